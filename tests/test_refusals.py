"""Refusals come before side effects: every validation (workflow, version policy, effect exists and
is unknown, arguments) happens before anything is written, so a typo by an operator never fences
the healthy live worker, and a refused call leaves the log exactly as it was.

Hypothesis draws a run (steps and effects of various outcomes, committed by a live session), then a
refused call of each kind; after it, the log must be unchanged and the live session must still
commit.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3ckpt
from s3ckpt.backends import MemoryBackend

KEY = s3ckpt.generate_key()


def _log(name: str) -> list[tuple[str, bytes]]:
    backend = MemoryBackend(name)
    return [(info.key, backend.get(info.key).data) for info in backend.list("runs/") if "/log/" in info.key]


def _live(store: s3ckpt.Store, effects: list[str]) -> s3ckpt.Session:
    session = store.resume("r", workflow="refund", workflow_version="1")
    session.step("plan", lambda: "p")
    for i, outcome in enumerate(effects):

        def send(key: str, outcome: str = outcome) -> str:
            if outcome == "refused":
                raise s3ckpt.EffectFailedError("no")
            if outcome == "unknown":
                raise TimeoutError("no answer")
            return f"ref-{key[:6]}"

        with contextlib.suppress(s3ckpt.EffectFailedError, TimeoutError):
            session.emit(f"e{i}", target="t", payload=i, send=send)
    session.checkpoint()
    return session


REFUSALS: dict[str, Callable[[s3ckpt.Store, s3ckpt.Checkpoint], Any]] = {
    "another workflow": lambda s, cp: s.resume("r", workflow="signup", workflow_version="1"),
    "a version with no migration": lambda s, cp: s.resume("r", workflow="refund", workflow_version="2"),
    "a migration that fails": lambda s, cp: (
        s.register_migration("refund", "1", "9", lambda state: 1 / 0),
        s.resume("r", workflow="refund", workflow_version="9"),
    ),
    "a bad policy": lambda s, cp: s.resume("r", workflow="refund", workflow_version="1", on_version_change="maybe"),  # type: ignore[arg-type]
    "a bad budget": lambda s, cp: s.resume("r", workflow="refund", workflow_version="1", budget={"usd": -1}),
    "a bad reconciler": lambda s, cp: s.resume("r", workflow="refund", workflow_version="1", reconcile={"e0": "yes"}),  # type: ignore[dict-item]
    "bad provenance": lambda s, cp: s.resume("r", workflow="refund", workflow_version="1", provenance={"x": {1, 2}}),
    "resume with an effect in doubt and no reconciler": lambda s, cp: s.resume("r", workflow="refund", workflow_version="1"),
    "resolve a missing effect": lambda s, cp: s.run("r").resolve_effect("s3c-nope", sent=False),
    "resolve an ambiguous prefix": lambda s, cp: s.run("r").resolve_effect("s3c-", sent=False),
    "resolve a known outcome": lambda s, cp: s.run("r").resolve_effect(
        next(e.idempotency_key for e in cp.effects if e.status in ("confirmed", "failed")), sent=False
    ),
    "resolve with no reference": lambda s, cp: s.run("r").resolve_effect(cp.effects[0].idempotency_key, sent=True),
    "rollback past an unknown effect": lambda s, cp: s.run("r").rollback(1),
    "rollback to a claim": lambda s, cp: s.run("r").rollback(0),
    "rollback to a seq that is no int": lambda s, cp: s.run("r").rollback(1.5),  # type: ignore[arg-type]
}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    effects=st.lists(st.sampled_from(["confirmed", "refused", "unknown"]), min_size=1, max_size=4),
    refusal=st.sampled_from(sorted(REFUSALS)),
)
def test_a_refused_call_writes_nothing_and_fences_no_one(effects: list[str], refusal: str) -> None:
    name = f"refusals-{uuid.uuid4().hex}"
    try:
        store = s3ckpt.open_store(f"memory://{name}", key=KEY)
        session = _live(store, effects)
        latest = store.run("r").latest()
        assert latest is not None
        applicable = {
            "resolve a known outcome": any(e in ("confirmed", "refused") for e in effects),
            "rollback past an unknown effect": "unknown" in effects,
            "resume with an effect in doubt and no reconciler": "unknown" in effects,
            "resolve an ambiguous prefix": len(effects) > 1,
        }.get(refusal, True)
        before = _log(name)
        other = s3ckpt.open_store(f"memory://{name}", key=KEY)  # an operator's process
        if applicable:
            with pytest.raises(s3ckpt.S3ckptError):
                REFUSALS[refusal](other, latest)
            assert _log(name) == before, f"{refusal}: a refused call wrote to the log"
        # The live worker was not fenced: it commits on.
        session.state["after"] = refusal
        assert session.checkpoint().seq == latest.seq + 1
    finally:
        MemoryBackend.wipe(name)


def test_resolve_settles_by_prefix_and_says_it_fences(tmp_path: Any) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=KEY)
    session = _live(store, ["unknown"])
    key = session.effects[0].idempotency_key
    settled = store.run("r").resolve_effect(key[:10], sent=True, reference="msg-7")
    assert (settled.idempotency_key, settled.status, settled.reference) == (key, "confirmed", "msg-7")
    with pytest.raises(s3ckpt.FencedError):  # the operator's claim fenced the live session
        session.checkpoint()
    with pytest.raises(s3ckpt.EffectSettledError, match="force"):
        store.run("r").resolve_effect(key, sent=False)
    forced = store.run("r").resolve_effect(key, sent=False, force=True)
    assert forced.status == "not_sent"
