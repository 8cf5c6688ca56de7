"""Paths an adversarial review found past the property tests, each kept as a regression test.

Each test names the promise and the path: a loop that skips a failed step, a caller's key beside a
derived one, a retry that changes its payload, refusals that wrote a claim first, rollbacks that
missed an effect or kept a step whose effect was refunded, exception text that bricked a session, a
damaged parent reused by reference, and hostile values.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pydantic
import pytest

import s3ckpt
from s3ckpt import EffectFailedError, EffectMismatchError, IntegrityError, StepMismatchError, UnknownOutcomeError


class Provider:
    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def sender(self, what: Any, *, fail: type[BaseException] | None = None, deliver: bool = True) -> Any:
        def send(key: str) -> str:
            if deliver:
                self.log.append((key, what))
            if fail is not None:
                raise fail("no answer")
            return f"ref-{len(self.log)}"

        return send

    def find(self, effect: s3ckpt.EffectRecord) -> str | None:
        return next((f"ref-{i + 1}" for i, (key, _) in enumerate(self.log) if key == effect.idempotency_key), None)


@pytest.fixture
def store(tmp_path: Path) -> s3ckpt.Store:
    return s3ckpt.open_store(str(tmp_path / "store"), key=s3ckpt.generate_key())


def _resume(store: s3ckpt.Store, **kw: Any) -> s3ckpt.Session:
    return store.resume("r", workflow="w", workflow_version="1", **kw)


def test_a_loop_that_skips_a_failed_step_is_stopped_before_it_can_misplace_a_result(store: s3ckpt.Store) -> None:
    provider = Provider()
    done: list[str] = []

    def summarize(item: str) -> str:
        if item == "doc-1":
            raise ValueError("cannot summarize")
        session.emit("post", target="feed", payload=item, send=provider.sender(item))
        done.append(item)
        return f"summary of {item}"

    session = _resume(store)
    with pytest.raises(ValueError, match="cannot"):
        session.step("summarize", summarize, "doc-1")
    # The next item under the same name would take doc-1's position: refused, nothing run.
    with pytest.raises(StepMismatchError, match="own step name"):
        session.step("summarize", summarize, "doc-2")
    assert done == []
    # A retry with the same arguments is a retry; distinct names are distinct steps.
    with _resume(store) as session:
        for item in ("doc-1", "doc-2", "doc-3"):
            try:
                session.step(f"summarize-{item}", summarize, item)
            except ValueError:
                continue
    with _resume(store) as session:
        replayed = {item: session.step(f"summarize-{item}", pytest.fail, item) for item in ("doc-2", "doc-3")}
    assert replayed == {"doc-2": "summary of doc-2", "doc-3": "summary of doc-3"}
    assert [what for _, what in provider.log] == ["doc-2", "doc-3"]


def test_a_callers_key_never_lets_another_effect_of_the_position_go_out_twice(store: s3ckpt.Store) -> None:
    provider = Provider()

    def program(session: s3ckpt.Session) -> None:
        lost = provider.sender("A", fail=TimeoutError, deliver=False)
        with contextlib.suppress(TimeoutError, EffectFailedError):
            session.emit("charge", target="acme", payload="A", idempotency_key="order-7-A", send=lost)
        session.emit("charge", target="acme", payload="B", send=provider.sender("B"))

    with _resume(store, reconcile={"charge": provider.find}) as session:
        program(session)
    with _resume(store, reconcile={"charge": provider.find}) as session:
        program(session)
    assert [what for _, what in provider.log] == ["B"]


def test_a_retry_that_changes_its_payload_after_an_effect_in_doubt_sends_nothing_more(store: s3ckpt.Store) -> None:
    provider = Provider()
    session = _resume(store, reconcile={"charge": provider.find})
    reset = provider.sender(0, fail=ConnectionResetError)
    with pytest.raises(ConnectionResetError):
        session.emit("charge", target="acme", payload={"amount": 10, "attempt": 0}, send=reset)
    with pytest.raises(EffectMismatchError, match="retried with other content"):
        session.emit("charge", target="acme", payload={"amount": 10, "attempt": 1}, send=provider.sender(1))
    assert len(provider.log) == 1


def test_resume_with_an_undecidable_effect_writes_nothing_and_fences_nobody(store: s3ckpt.Store) -> None:
    live = _resume(store)
    with pytest.raises(TimeoutError):
        live.emit("email", target="a", payload=1, send=Provider().sender(1, fail=TimeoutError))
    records = len(list(store.run("r").records()))
    with pytest.raises(UnknownOutcomeError):
        _resume(store)  # an operator's resume with no reconciler for "email"
    assert len(list(store.run("r").records())) == records
    live.state["still"] = "mine"
    live.checkpoint()  # not fenced


def test_rollback_compensates_an_effect_that_was_not_sent_at_the_point_and_sent_after(store: s3ckpt.Store) -> None:
    provider = Provider()
    session = _resume(store)
    with pytest.raises(TimeoutError):
        session.emit("email", target="a", payload=1, send=provider.sender(1, fail=TimeoutError, deliver=False))
    with _resume(store, reconcile={"email": provider.find}) as session:
        point = session.checkpoint().seq  # the effect is not_sent here
        session.emit("email", target="a", payload=1, send=provider.sender(1))
    undone = store.run("r").rollback(point)
    assert [e.status for e in undone] == ["confirmed"]
    latest = store.run("r").latest()
    assert latest is not None
    assert [e.status for e in latest.effects] == ["rolled_back"]


def test_a_second_rollback_runs_again_a_step_whose_effect_the_first_refunded(store: s3ckpt.Store) -> None:
    provider = Provider()
    with _resume(store) as session:
        start = session.checkpoint().seq
        session.step("pay", lambda: session.emit("charge", target="card", payload=9, send=provider.sender("charge")))
        paid = session.checkpoint().seq
    store.run("r").rollback(start)  # the charge is refunded
    with _resume(store) as session:
        session.step("pay", lambda: session.emit("charge", target="card", payload=9, send=provider.sender("charge")))
    undone = store.run("r").rollback(paid)  # pay was complete there, but its charge is refunded now
    assert len(undone) == 1
    latest = store.run("r").latest()
    assert latest is not None
    assert "pay#0" not in latest.steps, "a step whose effect was refunded is no resume point"
    with _resume(store) as session:
        ref = session.step("pay", lambda: session.emit("charge", target="card", payload=9, send=provider.sender("charge")))
    assert ref == "ref-3"
    assert len(provider.log) == 3  # charged, refunded, charged, refunded, charged: one charge in force


@pytest.mark.parametrize("where", ["step", "send"])
def test_exception_text_that_is_not_valid_text_is_recorded_escaped(store: s3ckpt.Store, where: str) -> None:
    def fail(*args: Any) -> Any:
        raise ValueError("bad \udcff byte")

    with _resume(store) as session:
        def call() -> Any:
            if where == "step":
                return session.step("s", fail)
            return session.emit("e", target="t", payload=1, send=fail)

        with pytest.raises(ValueError, match="bad"):
            call()
        session.checkpoint()  # the session goes on
    latest = store.run("r").latest()
    assert latest is not None
    texts = [a.reason for a in latest.ledger.attempts] + [e.error or "" for e in latest.effects]
    assert any("\\udcff" in t for t in texts)


def test_a_claim_refuses_a_parent_whose_data_is_gone(store: s3ckpt.Store) -> None:
    writer = store.run("r").claim()
    writer.commit({"n": 1}, artifacts={"model": b"w" * 300_000})
    for info in list(store.backend.list("packs/")):
        store.backend.delete(info.key)
    with pytest.raises(IntegrityError, match="missing"):
        store.run("r").claim()


class Answer(pydantic.BaseModel):
    text: str


class AnswerV2(pydantic.BaseModel):
    text: str
    score: float  # a required field the recorded result does not have


def test_a_recorded_result_that_no_longer_fits_its_model_is_a_typed_error(store: s3ckpt.Store) -> None:
    def v1() -> Answer:
        return Answer(text="yes")

    def v2() -> AnswerV2:
        return AnswerV2(text="yes", score=1.0)

    with _resume(store) as session:
        session.step("answer", v1)
    with _resume(store) as session, pytest.raises(s3ckpt.IncompatibleSchemaError, match="invalidate"):
        session.step("answer", v2)


def test_values_that_lie_about_themselves_are_stored_as_they_are_or_refused(store: s3ckpt.Store) -> None:
    class LyingInt(int):
        def __int__(self) -> int:
            return 5

    class LyingKey(str):
        def __hash__(self) -> int:
            return 1

        def __eq__(self, other: object) -> bool:
            return False

    writer = store.run("r").claim()
    writer.commit({"n": LyingInt(7)})
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.state == {"n": 7}
    with pytest.raises(s3ckpt.InvalidArtifactError, match="twice"):
        writer.commit({LyingKey("a"): 1, LyingKey("a"): 2})


def test_the_derived_key_tells_fields_apart_whatever_they_contain() -> None:
    from s3ckpt.effects import derive_idempotency_key

    assert derive_idempotency_key("s", "a\0b", "p", "k", 0) != derive_idempotency_key("s", "a", "b\0p", "k", 0)
