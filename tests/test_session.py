"""Sessions: steps after acceptance, the effects ledger, budget, rollback, provenance policies."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pydantic
import pytest

import s3ckpt
from s3ckpt import (
    BudgetExceededError,
    EffectFailedError,
    EffectMismatchError,
    FencedError,
    IncompatibleSchemaError,
    Ref,
    StepRejectedError,
    UnknownOutcomeError,
)
from s3ckpt.effects import derive_idempotency_key


@pytest.fixture
def store(tmp_path: Path) -> s3ckpt.Store:
    key = s3ckpt.generate_key()
    opened = s3ckpt.open_store(str(tmp_path / "store"), key=key)
    opened.test_key = key  # type: ignore[attr-defined]
    return opened


def store_key(store: s3ckpt.Store) -> str:
    return str(store.test_key)  # type: ignore[attr-defined]


def resume(store: s3ckpt.Store, **kwargs: Any) -> s3ckpt.Session:
    kwargs.setdefault("workflow", "refund")
    kwargs.setdefault("workflow_version", "1")
    return store.resume("order-42", **kwargs)


class Provider:
    """A fake outside world: it remembers what it was sent, by idempotency key."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.calls = 0

    def send(self, key: str) -> str:
        self.calls += 1
        self.sent.append(key)
        return f"ref-{len(self.sent)}"


def test_a_completed_step_is_not_run_again(store: s3ckpt.Store) -> None:
    runs: Counter[str] = Counter()

    def fetch(n: int) -> dict[str, Any]:
        runs["fetch"] += 1
        return {"docs": list(range(n))}

    with resume(store) as session:
        assert session.step("fetch", fetch, 3) == {"docs": [0, 1, 2]}
    with resume(store) as session:
        assert session.step("fetch", fetch, 3) == {"docs": [0, 1, 2]}
        assert session.step("fetch", fetch, 2) == {"docs": [0, 1]}  # the second step of that name is new
    assert runs["fetch"] == 2
    latest = store.run("order-42").latest()
    assert latest is not None
    assert sorted(latest.steps) == ["fetch#0", "fetch#1"]


def test_a_rejected_step_is_not_a_resume_point_but_its_attempt_and_effects_are_recorded(store: s3ckpt.Store) -> None:
    provider = Provider()

    def draft() -> str:
        session.emit("notify", target="ops", payload={"draft": 1}, send=provider.send)
        return "too short"

    with resume(store) as session, pytest.raises(StepRejectedError, match="rejected"):
        session.step("draft", draft, accept=lambda text: len(text) > 20)
    latest = store.run("order-42").latest()
    assert latest is not None
    assert latest.steps == {}
    assert [(a.step, a.outcome, len(a.effects)) for a in latest.ledger.attempts] == [("draft#0", "rejected", 1)]
    assert [e.status for e in latest.effects] == ["confirmed"]

    # The retry (after a resume) runs the body again; the effect it already caused is not caused again.
    with resume(store) as session:
        assert session.step("draft", draft, accept=lambda text: True) == "too short"
    assert provider.calls == 1
    latest = store.run("order-42").latest()
    assert latest is not None
    assert list(latest.steps) == ["draft#0"]


def test_emit_records_the_intent_before_sending_and_the_reference_after(store: s3ckpt.Store) -> None:
    seen: list[Any] = []

    def send(key: str) -> str:
        latest = store.run("order-42").latest()
        assert latest is not None
        seen.append([(e.idempotency_key, e.status) for e in latest.effects])
        return "msg-1"

    with resume(store) as session:
        ref = session.emit("send-email", target="user@example.com", payload={"body": "hi"}, send=send)
    assert ref == "msg-1"
    latest = store.run("order-42").latest()
    assert latest is not None
    (effect,) = latest.effects
    assert seen == [[(effect.idempotency_key, "pending")]]
    assert effect.status == "confirmed"
    assert effect.reference == "msg-1"
    assert effect.payload is None  # only the hash, unless asked
    assert effect.payload_hash.startswith("sha256:")
    assert effect.target == "user@example.com"

    provider = Provider()
    with resume(store) as session:
        assert session.emit("send-email", target="user@example.com", payload={"body": "hi"}, send=provider.send) == "msg-1"
    assert provider.calls == 0


def test_idempotency_keys_are_deterministic_per_store_run_and_position(store: s3ckpt.Store, tmp_path: Path) -> None:
    keys: list[str] = []

    def lost(key: str) -> str:
        keys.append(key)
        raise TimeoutError("no answer")

    # Two store objects (two hosts) on one store: the same position presents the same key.
    for _ in range(2):
        again = s3ckpt.open_store(store.backend.url, key=store_key(store))
        reconcile = {"charge": lambda e: None}
        with again.resume("order-42", workflow="refund", workflow_version="1", reconcile=reconcile) as session, pytest.raises(
            TimeoutError
        ):
            session.emit("charge", target="card", payload={"i": 0}, send=lost)
    assert len(keys) == 2
    assert keys[0] == keys[1]
    assert keys[0] == derive_idempotency_key(store.config.store_id, "order-42", "charge#0", "charge", 0)
    # Another store with a run of the same name (another tenant, another environment): another key.
    other = s3ckpt.open_store(str(tmp_path / "other"), key=s3ckpt.generate_key())
    with other.resume("order-42", workflow="refund", workflow_version="1") as session, pytest.raises(TimeoutError):
        session.emit("charge", target="card", payload={"i": 0}, send=lost)
    assert keys[-1] != keys[0]


def test_an_explicit_refusal_gives_the_position_a_new_key(store: s3ckpt.Store) -> None:
    keys: list[str] = []

    def refuse(key: str) -> str:
        keys.append(key)
        raise EffectFailedError("provider said no")

    with resume(store) as session:
        for _ in range(2):
            with pytest.raises(EffectFailedError):
                session.emit("charge", target="card", payload=5, send=refuse)
    provider = Provider()
    with resume(store) as session:
        assert session.emit("charge", target="card", payload=5, send=provider.send) == "ref-1"
    assert len({*keys, *provider.sent}) == 3  # a refused request is not replayed under its key
    latest = store.run("order-42").latest()
    assert latest is not None
    assert [e.position for e in latest.effects] == ["charge#0"] * 3
    assert [e.status for e in latest.effects] == ["failed", "failed", "confirmed"]


def test_an_unknown_outcome_without_a_reconciler_raises_and_sends_nothing(store: s3ckpt.Store) -> None:
    def flaky(key: str) -> str:
        raise TimeoutError("no answer")

    with resume(store) as session, pytest.raises(TimeoutError):
        session.emit("send-email", target="a@example.com", payload="hello", send=flaky)
    latest = store.run("order-42").latest()
    assert latest is not None
    assert [e.status for e in latest.effects] == ["unknown"]

    provider = Provider()
    with pytest.raises(UnknownOutcomeError, match="send-email") as info:
        resume(store)
    assert [e.kind for e in info.value.effects] == ["send-email"]
    assert provider.calls == 0

    # A reconciler that finds it happened: confirmed, and emit returns the reference without sending.
    with resume(store, reconcile={"send-email": lambda effect: "found-" + effect.idempotency_key[:8]}) as session:
        ref = session.emit("send-email", target="a@example.com", payload="hello", send=provider.send)
    assert ref.startswith("found-")
    assert provider.calls == 0


def test_a_reconciler_that_finds_nothing_lets_the_effect_be_sent_exactly_once(store: s3ckpt.Store) -> None:
    provider = Provider()

    def lost(key: str) -> str:
        raise ConnectionResetError("reset")

    with resume(store) as session, pytest.raises(ConnectionResetError):
        session.emit("send-email", target="a@example.com", payload="hello", send=lost)
    for _ in range(2):
        with resume(store, reconcile={"send-email": lambda effect: None}) as session:
            session.emit("send-email", target="a@example.com", payload="hello", send=provider.send)
    assert provider.calls == 1
    latest = store.run("order-42").latest()
    assert latest is not None
    (effect,) = latest.effects
    assert (effect.status, effect.sends, effect.reference) == ("confirmed", 2, "ref-1")


def test_an_explicitly_failed_send_may_be_sent_again(store: s3ckpt.Store) -> None:
    class Declined(Exception):
        pass

    def decline(key: str) -> str:
        raise Declined("card declined")

    with resume(store) as session, pytest.raises(Declined):
        session.emit("charge", target="card", payload=5, send=decline, failed_on=(Declined,))
    latest = store.run("order-42").latest()
    assert latest is not None
    assert [e.status for e in latest.effects] == ["failed"]
    provider = Provider()
    with resume(store) as session:  # no reconciler needed: failed is a known outcome
        assert session.emit("charge", target="card", payload=5, send=provider.send) == "ref-1"
    assert provider.calls == 1


def test_the_same_key_with_another_payload_stops_the_session(store: s3ckpt.Store) -> None:
    provider = Provider()
    with resume(store) as session:
        session.emit("send-email", target="a@example.com", payload="v1", send=provider.send)
    with resume(store) as session:
        with pytest.raises(EffectMismatchError, match="payload"):
            session.emit("send-email", target="a@example.com", payload="v2", send=provider.send)
        with pytest.raises(EffectMismatchError):
            session.step("next", lambda: 1)
    assert provider.calls == 1


def test_budget_is_saved_with_every_commit_and_stops_a_step_over_it(store: s3ckpt.Store) -> None:
    with resume(store, budget={"usd": 5}) as session:
        session.step("a", lambda: session.spend(usd=3, tokens=1000))
        session.step("b", lambda: session.spend(usd=2.5))
        with pytest.raises(BudgetExceededError, match="usd") as info:
            session.step("c", lambda: "never")
        assert info.value.spent == 5.5
    latest = store.run("order-42").latest()
    assert latest is not None
    assert latest.budget == {"usd": 5.5, "tokens": 1000}
    with resume(store, budget={"usd": 5}) as session, pytest.raises(BudgetExceededError):
        session.step("c", lambda: "never")
    with resume(store, budget={"usd": 10}) as session:
        assert session.step("c", lambda: "now") == "now"
        assert session.budget == {"usd": 5.5, "tokens": 1000}


def test_rollback_restores_the_state_and_returns_the_effects_to_compensate(store: s3ckpt.Store) -> None:
    provider = Provider()
    with resume(store) as session:
        session.step("plan", lambda: "p")
        session.state["phase"] = "planned"
        point = session.checkpoint().seq
        session.step("act", lambda: session.emit("charge", target="card", payload=9, send=provider.send))
        session.state["phase"] = "acted"
    run = store.run("order-42")
    undone = run.rollback(point)
    assert [(e.kind, e.reference) for e in undone] == [("charge", "ref-1")]
    latest = run.latest()
    assert latest is not None
    assert latest.state == {"phase": "planned"}
    assert list(latest.steps) == ["plan#0"]
    assert [e.status for e in latest.effects] == ["rolled_back"]
    assert len(list(run.history())) > point + 1  # appended, never rewritten
    assert run.get(point).state == {"phase": "planned"}
    # Run again after the rollback: the step runs, and its effect goes out under a new key.
    with resume(store) as session:
        session.step("plan", lambda: pytest.fail("completed before the rollback point"))
        session.step("act", lambda: session.emit("charge", target="card", payload=9, send=provider.send))
    assert provider.calls == 2
    assert provider.sent[0] != provider.sent[1]


def test_provenance_is_recorded_per_run_and_per_step(store: s3ckpt.Store) -> None:
    with resume(store, provenance={"model": "m-1", "prompt_sha256": "ab12"}) as session:
        session.step("ask", lambda: "answer")
    latest = store.run("order-42").latest()
    assert latest is not None
    assert latest.provenance["model"] == "m-1"
    assert latest.provenance["workflow_version"] == "1"
    assert latest.steps["ask#0"].provenance["model"] == "m-1"


@pytest.mark.parametrize(("policy", "reruns"), [("invalidate", 1), ("accept", 0), ("migrate", 0)])
def test_a_provenance_change_follows_the_policy(store: s3ckpt.Store, policy: str, reruns: int) -> None:
    calls: list[str] = []
    provider = Provider()
    with resume(store, provenance={"model": "m-1"}) as session:
        session.step("ask", lambda: calls.append("m-1") or "first")
        session.emit("post", target="thread", payload="x", send=provider.send)
        session.spend(usd=1)
    with resume(store, provenance={"model": "m-2"}, on_version_change=policy) as session:
        session.step("ask", lambda: calls.append("m-2") or "second")
        session.emit("post", target="thread", payload="x", send=provider.send)
    assert len(calls) == 1 + reruns
    assert provider.calls == 1  # effects survive every policy
    latest = store.run("order-42").latest()
    assert latest is not None
    assert latest.budget == {"usd": 1}
    assert latest.steps["ask#0"].provenance["model"] == ("m-2" if reruns else "m-1")


def test_a_workflow_version_change_migrates_the_state_or_refuses(store: s3ckpt.Store) -> None:
    with resume(store) as session:
        session.state["total"] = 10
    with pytest.raises(IncompatibleSchemaError, match="refund"):
        resume(store, workflow_version="2")
    store.register_migration("refund", "1", "2", lambda state: {"total_cents": state["total"] * 100})
    with resume(store, workflow_version="2") as session:
        assert session.state == {"total_cents": 1000}
    with pytest.raises(IncompatibleSchemaError, match="belongs to workflow 'refund'"):
        store.resume("order-42", workflow="signup", workflow_version="2")


class Answer(pydantic.BaseModel):
    text: str
    score: float


def test_results_come_back_as_refs_models_and_json(store: s3ckpt.Store) -> None:
    def answer() -> Answer:
        return Answer(text="yes", score=0.5)

    def stored() -> Ref:
        return Ref("s3://bucket/big.json", version="v7", sha256="00" * 32)

    with resume(store) as session:
        session.step("answer", answer)
        session.step("stored", stored)
        session.step("json", lambda: (1, "two"))
    with resume(store) as session:
        assert session.step("answer", answer) == Answer(text="yes", score=0.5)
        assert session.step("stored", stored) == Ref("s3://bucket/big.json", version="v7", sha256="00" * 32)
        assert session.step("json", lambda: None) == [1, "two"]
        with pytest.raises(s3ckpt.InvalidArtifactError, match=r"pydantic model, or a s3ckpt\.Ref"):
            session.step("bytes", lambda: b"raw")


def test_nested_steps_and_effects_are_scoped_by_their_step(store: s3ckpt.Store) -> None:
    provider = Provider()
    inner_runs: list[int] = []

    def outer() -> int:
        a = session.step("inner", lambda: inner_runs.append(1) or 1)
        session.emit("notify", target="x", payload=a, send=provider.send)
        return a + 1

    with resume(store) as session:
        assert session.step("outer", outer) == 2
        assert session.step("inner", lambda: 5) == 5  # a top-level step of the same name is another step
    latest = store.run("order-42").latest()
    assert latest is not None
    assert sorted(latest.steps) == ["inner#0", "outer#0", "outer#0/inner#0"]
    assert latest.effects[0].position == "outer#0/notify#0"
    assert latest.steps["outer#0"].effects == (latest.effects[0].idempotency_key,)


def test_a_fenced_session_stops(store: s3ckpt.Store) -> None:
    old = resume(store)
    old.step("a", lambda: 1)
    with resume(store) as newer:
        newer.step("b", lambda: 2)
    with pytest.raises(FencedError):
        old.step("c", lambda: 3)
    with pytest.raises(FencedError):
        old.emit("x", target="t", payload=1, send=Provider().send)


def test_a_large_ledger_is_stored_as_chunks_and_reads_back(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key(), inline_limit=2048)
    with store.resume("big", workflow="w", workflow_version="1") as session:
        for i in range(40):
            session.step(f"s{i}", lambda i=i: {"text": f"result {i} " * 20})
    latest = store.run("big").latest()
    assert latest is not None
    assert latest.record.ledger_manifest is not None
    assert latest.record.ledger is None
    assert len(latest.steps) == 40
    with store.resume("big", workflow="w", workflow_version="1") as session:
        assert session.step("s39", lambda: pytest.fail("recorded")) == {"text": "result 39 " * 20}
    assert latest.to_dict()["steps"]["s0#0"]["result"] == {"text": "result 0 " * 20}


def test_plain_commits_carry_the_ledger_forward(store: s3ckpt.Store) -> None:
    with resume(store) as session:
        session.step("a", lambda: 1)
    store.run("order-42").claim(workflow="refund", workflow_version="1").commit({"manual": True})
    latest = store.run("order-42").latest()
    assert latest is not None
    assert list(latest.steps) == ["a#0"]
    assert latest.state == {"manual": True}


def test_an_operator_settles_an_unknown_effect(store: s3ckpt.Store) -> None:
    def flaky(key: str) -> str:
        raise TimeoutError("no answer")

    with resume(store) as session, pytest.raises(TimeoutError):
        session.emit("send-email", target="a@example.com", payload="hello", send=flaky)
    latest = store.run("order-42").latest()
    assert latest is not None
    key = latest.effects[0].idempotency_key
    settled = store.run("order-42").resolve_effect(key, sent=True, reference="msg-9")
    assert (settled.status, settled.resolved_by) == ("confirmed", "operator")
    provider = Provider()
    with resume(store) as session:
        assert session.emit("send-email", target="a@example.com", payload="hello", send=provider.send) == "msg-9"
    assert provider.calls == 0


def test_a_reconcile_mapping_that_answers_every_kind_is_used_even_when_empty(store: s3ckpt.Store) -> None:
    """A defaultdict (or any Mapping whose len is 0) still answers: `reconcile or {}` would drop it."""
    from collections import defaultdict

    def lost(key: str) -> str:
        raise TimeoutError("no answer")

    with resume(store) as session, pytest.raises(TimeoutError):
        session.emit("send-email", target="a@example.com", payload="hi", send=lost)
    asked: list[str] = []
    every_kind: defaultdict[str, Any] = defaultdict(lambda: lambda effect: asked.append(effect.kind) or "found")
    with resume(store, reconcile=every_kind) as session:
        assert session.emit("send-email", target="a@example.com", payload="hi", send=lost) == "found"
    assert asked == ["send-email"]
