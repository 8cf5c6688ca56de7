"""What commit accepts, every reader reads back (docs/FORMAT.md, "Limits shared by writers and
readers").

Hypothesis generates JSON-like values that are deep, wide, Unicode (lone surrogates included),
large (strings that spill the state to chunks, integers of thousands of digits) and hostile (NaN,
non-str keys, sets, bytes), and hands each to every entry point that records a value: a commit's
state and meta, a claim's provenance, a step's result, an effect's target and the reference its
send returns. For each, either the call raises InvalidArtifactError and nothing is committed, or
every reader (latest, a fresh store's claim and resume, history) returns a value equal to the
value's JSON form (tuples as lists, models as their JSON).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3ckpt
from s3ckpt import InvalidArtifactError
from s3ckpt.backends import MemoryBackend
from s3ckpt.values import MAX_DEPTH

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
TEXT = st.one_of(
    st.text(max_size=12),
    st.text(st.one_of(st.characters(), SURROGATES), max_size=6),
    st.text(st.characters(), min_size=5000, max_size=20000),  # spills a state to chunks (inline_limit below)
)
NUMBERS = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=10**3990, max_value=10**4010),  # around the digit limit
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
KEYS = st.one_of(st.text(max_size=8), st.text(st.one_of(st.characters(), SURROGATES), max_size=3), st.integers(), st.none())


def _nest(depth: int, leaf: Any, dicts: bool) -> Any:
    value = leaf
    for i in range(depth):
        value = {"k": value} if dicts and i % 2 else [value]
    return value


JSONISH = st.one_of(
    st.recursive(
        SCALARS,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.tuples(children, children),
            st.dictionaries(KEYS, children, max_size=5),
        ),
        max_leaves=25,
    ),
    st.builds(_nest, st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3) | st.integers(150, 400), SCALARS, st.booleans()),
    st.sampled_from([{1, 2}, b"raw", bytearray(b"x"), object(), float("nan"), {"a": float("-inf")}]),
)


def _plain(value: Any) -> Any:
    """What a reader should give back: the JSON form (tuples become lists)."""
    return json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))


def _same(a: Any, b: Any) -> bool:
    # NaN never gets here (refused); compare -0.0 and 0.0 as JSON does.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.fixture
def store_name() -> Iterator[str]:
    name = f"limits-{uuid.uuid4().hex}"
    yield name
    MemoryBackend.wipe(name)


KEY = s3ckpt.generate_key()
COMMON = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _open(name: str) -> s3ckpt.Store:
    # No redaction: the values must come back byte for byte. A small inline limit makes large
    # values take the chunked path as well.
    return s3ckpt.open_store(f"memory://{name}", key=KEY, redactor=s3ckpt.NO_REDACTION, inline_limit=4096)


def _records(name: str) -> list[str]:
    return [info.key for info in MemoryBackend(name).list("runs/") if "/log/" in info.key]


@COMMON
@given(value=JSONISH, where=st.sampled_from(["state", "meta", "provenance"]))
def test_a_committed_value_reads_back_equal_or_nothing_is_written(value: Any, where: str) -> None:
    name = f"limits-{uuid.uuid4().hex}"
    try:
        store = _open(name)
        run = store.run("r")
        writer = run.claim()
        writer.commit({"before": True})
        before = _records(name)
        try:
            if where == "state":
                writer.commit(value)
            elif where == "meta":
                writer.commit({"ok": 1}, meta={"value": value})
            else:
                writer = run.claim(value=value)
                writer.commit({"ok": 1})
        except InvalidArtifactError:
            assert _records(name) == before, "a refused value left a record behind"
            assert writer.commit({"after": True}).seq >= 2  # the writer is still usable
            return
        expected = _plain(value)
        fresh = _open(name)
        latest = fresh.run("r").latest()
        assert latest is not None
        got = {"state": latest.state, "meta": latest.meta.get("value"), "provenance": latest.provenance.get("value")}[where]
        assert _same(got, expected)
        assert _same([c.state for c in fresh.run("r").history()][-1], latest.state)
        claimed = _open(name).run("r").claim()
        parent = claimed._parent_record()
        assert parent is not None
        assert _same(_open(name).run("r")._checkpoint(parent).state, latest.state)
        with _open(name).resume("r", workflow="w", workflow_version="1", on_version_change="accept") as session:
            # A session's state is a dict when the run had none (docs/sessions.md).
            assert _same(session.state, {} if latest.state is None else latest.state)
    finally:
        MemoryBackend.wipe(name)


@COMMON
@given(value=JSONISH)
def test_a_step_result_replays_equal_or_the_step_is_not_recorded(value: Any) -> None:
    name = f"limits-{uuid.uuid4().hex}"
    try:
        with _open(name).resume("r", workflow="w", workflow_version="1") as session:
            try:
                first = session.step("s", lambda: value)
            except InvalidArtifactError:
                assert "s#0" not in session.steps
                refused = True
            else:
                refused = False
                assert first is value
        with _open(name).resume("r", workflow="w", workflow_version="1") as session:
            if refused:
                assert "s#0" not in session.steps
            else:
                replayed = session.step("s", lambda: pytest.fail("a recorded step ran again"))
                assert _same(replayed, _plain(value))
    finally:
        MemoryBackend.wipe(name)


@COMMON
@given(target=JSONISH, reference=JSONISH)
def test_an_effect_target_and_reference_read_back_equal_or_are_refused(target: Any, reference: Any) -> None:
    name = f"limits-{uuid.uuid4().hex}"
    sent: list[str] = []
    try:
        session = _open(name).resume("r", workflow="w", workflow_version="1")
        before = _records(name)
        try:
            got = session.emit("e", target=target, payload=1, send=lambda key: sent.append(key) or reference)
        except InvalidArtifactError:
            latest = _open(name).run("r").latest()
            effects = latest.effects if latest else []
            if not sent:  # the target was refused: nothing was recorded, nothing sent
                assert _records(name) == before
                assert effects == []
            else:  # the provider acted, but its answer cannot be stored: visibly unknown, never confirmed
                assert [e.status for e in effects] == ["unknown"]
            return
        assert _same(got, _plain(reference))
        latest = _open(name).run("r").latest()
        assert latest is not None
        (effect,) = latest.effects
        assert effect.status == "confirmed"
        assert _same(effect.target, _plain(target))
        assert _same(effect.reference, _plain(reference))
    finally:
        MemoryBackend.wipe(name)


def test_a_record_over_the_size_every_reader_accepts_is_refused(store_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Very many chunks carried forward make a record's manifests large: the writer refuses a record
    the readers would refuse, and nothing is committed (here with the limit lowered to 32 KiB)."""
    from s3ckpt import codec

    monkeypatch.setattr(codec, "_MAX_RECORD", 32 << 10)
    store = s3ckpt.open_store(f"memory://{store_name}", key=KEY)
    writer = store.run("r").claim()
    writer.commit({"small": True}, artifacts={"a": b"x" * 1000})
    before = _records(store_name)
    many = {f"part-{i}": bytes([i % 251]) * 40 for i in range(400)}  # 400 manifests of one chunk each
    with pytest.raises(InvalidArtifactError, match="limit"):
        writer.commit({"big": True}, artifacts=many)
    assert _records(store_name) == before
    latest = s3ckpt.open_store(f"memory://{store_name}", key=KEY).run("r").latest()
    assert latest is not None
    assert latest.state == {"small": True}


def test_numbers_at_the_edges_come_back_exactly(store_name: str) -> None:
    values = [0.0, -0.0, 5e-324, 1.7976931348623157e308, 2**63, -(2**63) - 1, 10**3999, 0.1 + 0.2]
    writer = _open(store_name).run("r").claim()
    writer.commit({"v": values})
    latest = _open(store_name).run("r").latest()
    assert latest is not None
    assert latest.state["v"] == values
    assert all(math.copysign(1, a) == math.copysign(1, b) for a, b in zip(latest.state["v"][:2], values[:2], strict=True))
