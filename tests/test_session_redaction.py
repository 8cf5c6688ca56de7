"""Redaction on write, end to end: secrets reach a record through every path a session offers
(step results, state, effect targets and references, errors, meta, provenance, budget units), and
none of them is in any decrypted object of the store; the look-alikes are kept byte for byte.
tests/test_redaction_property.py generates the positions and covers names, kinds and keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import s3ckpt
from tests.test_redaction import LOOKALIKES, SECRETS
from tests.test_redaction_property import store_leaks


def _every_record(store: s3ckpt.Store, run_id: str) -> str:
    """All records of the run, decrypted and decoded (ledgers stored as chunks included)."""
    run = store.run(run_id)
    texts = [record.model_dump_json() for record in run.records()]
    texts += [json.dumps(cp.to_dict(), default=str) for cp in run.history()]
    return "\n".join(texts)


def _drive(store: s3ckpt.Store, values: list[str]) -> None:
    """Put each value through every path into a record."""
    with store.resume("r", workflow="w", workflow_version="1", provenance={"note": values[0]}) as session:
        session.step("spend", lambda: session.spend(**{f"{v} {i}": 1 for i, v in enumerate(values)}))
        for i, value in enumerate(values):
            session.step(f"result-{i}", lambda v=value: {"text": v, "nested": [v, {"deep": v}]})
            session.state[f"s{i}"] = value
            session.emit("notify", target={"to": value}, payload=value, send=lambda key, v=value: {"ref": v})

            def fails(key: str, v: str = value) -> Any:
                raise s3ckpt.EffectFailedError(f"provider refused: {v}")

            with pytest.raises(s3ckpt.EffectFailedError):
                session.emit("refused", target="t", payload=i, send=fails)

            def rejects(v: str = value) -> str:
                return v

            with pytest.raises(s3ckpt.StepRejectedError):
                session.step(f"rejected-{i}", rejects, accept=lambda _: False)
        session.checkpoint(meta={"values": values})


@pytest.mark.parametrize("inline_limit", [64 << 10, 512], ids=["inline", "ledger-as-chunks"])
def test_no_secret_reaches_a_record_by_any_path(tmp_path: Path, inline_limit: int) -> None:
    assert len(SECRETS) >= 20
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key(), inline_limit=inline_limit)
    _drive(store, [case.text for case in SECRETS])
    stored = _every_record(store, "r")
    leaked = [case.name for case in SECRETS if case.secret in stored or json.dumps(case.secret)[1:-1] in stored]
    assert leaked == []
    assert "[REDACTED:" in stored
    assert store_leaks(tmp_path / "s", store, [case.secret for case in SECRETS]) == []  # every object, opened
    if inline_limit == 512:
        latest = store.run("r").latest()
        assert latest is not None
        assert latest.record.ledger_manifest is not None


def test_look_alikes_reach_the_record_unchanged(tmp_path: Path) -> None:
    assert len(LOOKALIKES) >= 20
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    _drive(store, LOOKALIKES)
    latest = store.run("r").latest()
    assert latest is not None
    for i, text in enumerate(LOOKALIKES):
        assert latest.state[f"s{i}"] == text
        assert latest.steps[f"result-{i}#0"].result == {"text": text, "nested": [text, {"deep": text}]}
    assert [e.target for e in latest.effects if e.kind == "notify"] == [{"to": t} for t in LOOKALIKES]
    assert [e.reference for e in latest.effects if e.kind == "notify"] == [{"ref": t} for t in LOOKALIKES]
    assert latest.meta == {"values": LOOKALIKES}
    assert latest.provenance["note"] == LOOKALIKES[0]


def test_payloads_are_stored_as_hashes_unless_asked(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    secret = SECRETS[0].text
    with store.resume("r", workflow="w", workflow_version="1") as session:
        session.emit("a", target="t", payload={"body": secret}, send=lambda key: "ok")
        session.emit("b", target="t", payload={"body": "kept " + secret}, send=lambda key: "ok", store_payload=True)
    latest = store.run("r").latest()
    assert latest is not None
    a, b = latest.effects
    assert a.payload is None
    assert a.payload_hash.startswith("sha256:")
    assert b.payload == {"body": "kept " + SECRETS[0].expected}  # opted in: stored, and redacted
    assert SECRETS[0].secret not in _every_record(store, "r")


def test_the_redactor_is_pluggable_and_can_be_turned_off(tmp_path: Path) -> None:
    import re

    custom = s3ckpt.Redactor(extra_patterns=[s3ckpt.SecretPattern("acme-token", re.compile(r"ACME-[0-9]{8}"))])
    store = s3ckpt.open_store(str(tmp_path / "a"), key=s3ckpt.generate_key(), redactor=custom)
    store.run("r").claim().commit({"t": "use ACME-12345678 now"})
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.state == {"t": "use [REDACTED:acme-token] now"}

    raw = s3ckpt.open_store(str(tmp_path / "b"), key=s3ckpt.generate_key(), redactor=s3ckpt.NO_REDACTION)
    raw.run("r").claim().commit({"password": "hunter2"})
    latest = raw.run("r").latest()
    assert latest is not None
    assert latest.state == {"password": "hunter2"}
