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


def test_a_key_left_by_a_lost_store_creation_is_a_wrong_key_not_a_replaced_config(tmp_path: Path) -> None:
    """A creator killed between its key file and its config leaves a key file that no config names;
    another process then creates the store. Opening with the first key is a wrong key: the advice
    must not be to restore a healthy config."""
    from s3ckpt.keyring import parse_key, wrap_master_key

    url = str(tmp_path / "store")
    first, second = s3ckpt.generate_key(), s3ckpt.generate_key()
    orphan = wrap_master_key(b"\x01" * 32, parse_key(first), store_id="0" * 32)
    (tmp_path / "store" / "keys").mkdir(parents=True)
    (tmp_path / "store" / "keys" / orphan.key_id).write_text(orphan.model_dump_json())
    s3ckpt.open_store(url, key=second).close()  # the store another process created
    with pytest.raises(s3ckpt.DecryptionError) as caught:
        s3ckpt.open_store(url, key=first, create=False)
    assert "restore" not in str(caught.value)
    assert "key list" in str(caught.value)


# -- second round -----------------------------------------------------------------------------------


class Timeout(BaseException):
    """What func_timeout or gevent raise: not an Exception."""


class Doc:
    """An argument with no JSON form and the default repr (an address, no value)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


@pytest.mark.parametrize("shape", ["closure", "not-json-argument", "default-repr-argument", "base-exception"])
def test_a_skip_loop_in_any_shape_is_stopped_before_it_can_misplace_a_result(store: s3ckpt.Store, shape: str) -> None:
    provider = Provider()

    def summarize(item: Any) -> str:
        if str(item) == "doc-1":
            raise (Timeout if shape == "base-exception" else ValueError)("cannot summarize")
        session.emit("post", target="feed", payload=str(item), send=provider.sender(str(item)))
        return f"summary of {item}"

    session = _resume(store)
    for item in ("doc-1", "doc-2"):
        try:
            if shape == "closure":
                session.step("summarize", lambda item=item: summarize(item))
            else:
                # A fresh object per item, freed after its call: its address may be reused by the next.
                argument = {"not-json-argument": Path, "default-repr-argument": Doc}.get(shape, str)(item)
                session.step("summarize", summarize, argument)
        except (ValueError, Timeout):
            continue
        except StepMismatchError:
            break
    assert provider.log == []  # doc-2 never ran at doc-1's position


def test_a_retry_of_a_step_whose_body_changed_its_arguments_is_a_retry(store: s3ckpt.Store) -> None:
    messages: list[str] = []
    calls: list[int] = []

    def llm(history: list[str]) -> str:
        history.append("assistant: thinking")  # agents keep their transcript in the argument
        calls.append(len(history))
        if len(calls) == 1:
            raise TimeoutError("model busy")
        return "answer"

    with _resume(store) as session:
        with pytest.raises(TimeoutError):
            session.step("ask", llm, messages)
        assert session.step("ask", llm, messages) == "answer"  # the same (changed) list: a retry


def test_a_rollback_drops_a_parent_step_whose_nested_charge_was_refunded(store: s3ckpt.Store) -> None:
    provider = Provider()

    def checkout() -> dict[str, Any]:
        ref = session.step("pay", lambda: session.emit("charge", target="card", payload=9, send=provider.sender("charge")))
        return {"paid": ref}

    with _resume(store) as session:
        start = session.checkpoint().seq
        session.step("checkout", checkout)
        done = session.checkpoint().seq
    store.run("r").rollback(start)
    with _resume(store) as session:  # runs checkout again: its nested pay replays nothing refunded
        session.step("checkout", checkout)
    store.run("r").rollback(done)
    latest = store.run("r").latest()
    assert latest is not None
    assert "checkout#0" not in latest.steps
    assert "checkout#0/pay#0" not in latest.steps


def test_a_rejected_parent_runs_its_nested_steps_again_on_retry(store: s3ckpt.Store) -> None:
    drafts = iter(["too short", "a long enough draft"])

    def write() -> str:
        return session.step("draft", lambda: next(drafts))

    with _resume(store) as session:
        with pytest.raises(s3ckpt.StepRejectedError):
            session.step("reply", write, accept=lambda text: len(text) > 10)
        assert session.step("reply", write, accept=lambda text: len(text) > 10) == "a long enough draft"


def test_a_loop_over_recipients_goes_on_past_one_send_in_doubt(store: s3ckpt.Store) -> None:
    provider = Provider()
    recipients = ["a@example.com", "b@example.com", "c@example.com"]

    def program(session: s3ckpt.Session, lost: str | None) -> None:
        for to in recipients:
            send = provider.sender(to, fail=ConnectionResetError if to == lost else None)
            with contextlib.suppress(ConnectionResetError):
                session.emit("email", target=to, payload="newsletter", send=send)

    with _resume(store) as session:  # no reconciler: b's answer is lost, the loop goes on
        program(session, lost="b@example.com")
    with _resume(store, reconcile={"email": provider.find}) as session:  # a replay sends nothing again
        program(session, lost=None)
    assert sorted(what for _, what in provider.log) == recipients


def test_a_recipient_past_one_in_doubt_is_found_again_when_the_replay_takes_another_path(store: s3ckpt.Store) -> None:
    # a's answer is lost and b goes on to the next position; a turns out not sent, and on the replay
    # the provider refuses a: b's call now comes first at a's position, and must find b's effect.
    provider = Provider()

    def program(session: s3ckpt.Session, fail_a: type[BaseException]) -> None:
        for to in ("a", "b", "c"):
            send = provider.sender(to, fail=fail_a if to == "a" else None, deliver=to != "a")
            with contextlib.suppress(ConnectionResetError, EffectFailedError):
                session.emit("email", target=to, payload="newsletter", send=send)

    with _resume(store) as session:
        program(session, ConnectionResetError)
    with _resume(store, reconcile={"email": provider.find}) as session:
        program(session, EffectFailedError)
    with _resume(store, reconcile={"email": provider.find}) as session:
        program(session, EffectFailedError)
    assert sorted(what for _, what in provider.log) == ["b", "c"]


def test_targets_that_differ_only_in_representation_are_one_effect(store: s3ckpt.Store) -> None:
    provider = Provider()
    with _resume(store) as session:
        with pytest.raises(TimeoutError):
            session.emit("charge", target={"customer": 42}, payload=10, send=provider.sender(1, fail=TimeoutError))
        with pytest.raises(UnknownOutcomeError):  # 42.0 == 42: the retry waits for the first to be settled
            session.emit("charge", target={"customer": 42.0}, payload=10, send=provider.sender(2))
    with _resume(store, reconcile={"charge": provider.find}) as session:
        assert session.emit("charge", target={"customer": 42.0}, payload=10, send=provider.sender(3)) == "ref-1"
    assert [what for _, what in provider.log] == [1]


def test_names_that_redaction_changes_still_find_their_reconciler_and_workflow(store: s3ckpt.Store) -> None:
    hook = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"
    provider = Provider()
    workflow = "deploy-AKIAIOSFODNN7EXAMPLF"
    with store.resume("r", workflow=workflow, workflow_version="1") as session, pytest.raises(TimeoutError):
        session.emit(hook, target="ops", payload=1, send=provider.sender(1, fail=TimeoutError))
    with store.resume("r", workflow=workflow, workflow_version="1", reconcile={hook: provider.find}) as session:
        assert session.emit(hook, target="ops", payload=1, send=provider.sender(1)) == "ref-1"
    assert len(provider.log) == 1


def test_a_passphrase_key_past_what_an_open_tries_is_refused_at_add(tmp_path: Path) -> None:
    from s3ckpt import store as store_module

    with s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key()) as opened:
        store_module._MAX_PASSPHRASE_FILES, saved = 2, store_module._MAX_PASSPHRASE_FILES
        try:
            opened.add_key("passphrase:first passphrase")
            opened.add_key("passphrase:second passphrase")
            with pytest.raises(s3ckpt.ConfigurationError, match="passphrase keys"):
                opened.add_key("passphrase:third passphrase")
        finally:
            store_module._MAX_PASSPHRASE_FILES = saved


def test_a_claim_refuses_a_parent_whose_ledger_data_is_gone(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key(), inline_limit=256)
    with store.resume("r", workflow="w", workflow_version="1") as session:
        for i in range(5):
            session.step(f"s{i}", lambda i=i: "x" * 100 + str(i))
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.record.ledger_manifest is not None
    for info in list(store.backend.list("packs/")):
        store.backend.delete(info.key)
    with pytest.raises(IntegrityError, match="missing"):
        store.run("r").claim()


def test_effects_with_keys_of_their_own_survive_a_reordering(store: s3ckpt.Store) -> None:
    provider = Provider()

    def emit(session: s3ckpt.Session, what: str) -> Any:
        return session.emit("notify", target="ops", payload=what, idempotency_key=f"notify-{what}", send=provider.sender(what))

    with _resume(store) as session:
        first = [emit(session, "A"), emit(session, "B")]
    with _resume(store) as session:  # a new version of the code emits them the other way round
        second = [emit(session, "B"), emit(session, "A")]
    assert second == first[::-1]
    assert len(provider.log) == 2


def test_a_callers_key_that_named_an_effect_that_happened_is_never_reused_for_other_content(store: s3ckpt.Store) -> None:
    provider = Provider()
    with _resume(store) as session:
        session.emit("charge", target="card", payload=10, idempotency_key="order-7", send=provider.sender(10))
        with pytest.raises(EffectMismatchError, match="a key names one effect"):
            session.emit("refund", target="card", payload=10, idempotency_key="order-7", send=provider.sender("refund"))
    assert len(provider.log) == 1
    latest = store.run("r").latest()
    assert latest is not None
    assert [(e.kind, e.status) for e in latest.effects] == [("charge", "confirmed")]
