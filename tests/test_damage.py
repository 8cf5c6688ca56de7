"""Damage is reported, never papered over: a missing or inconsistent parent or tail is IntegrityError
on every path that loads one, and nothing is written on the way; a store object never accepts a log
that went backwards from what it has seen.

The property test builds a run from generated claims and commits, deletes a generated set of its
records (and sometimes puts an old HEAD back), and then asks every reader path. Each must raise
IntegrityError or give exactly what the undamaged log gives. A fresh reader cannot tell the newest
records deleted from a shorter log (docs/FORMAT.md, "What a reader can and cannot detect"): when the
tail itself is gone, a fresh reader may see an older checkpoint of the run, never anything else.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3ckpt
from s3ckpt import IntegrityError
from s3ckpt._names import head_key, log_key
from s3ckpt.backends import MemoryBackend


def _store(name: str, key: str) -> s3ckpt.Store:
    return s3ckpt.open_store(f"memory://{name}", key=key)


def _log_keys(name: str) -> list[str]:
    return [info.key for info in MemoryBackend(name).list("runs/")]


def test_a_missing_claim_checkpoint_is_damage_not_a_fresh_start() -> None:
    name, key = f"damage-{uuid.uuid4().hex}", s3ckpt.generate_key()
    store = _store(name, key)
    with store.resume("r", workflow="w", workflow_version="1") as session:
        session.step("a", lambda: 1)
        session.checkpoint(artifacts={"model": b"weights" * 1000})
    store.run("r").claim(workflow="w", workflow_version="1")  # the tail is now a claim naming the checkpoint
    latest = store.run("r").latest()
    assert latest is not None
    MemoryBackend(name).delete(log_key("r", latest.seq))
    before = _log_keys(name)
    fresh = _store(name, key)
    for path in (
        lambda: fresh.run("r").latest(),
        lambda: fresh.run("r").claim(),
        lambda: fresh.resume("r", workflow="w", workflow_version="1"),
        lambda: fresh.run("r").rollback(1),
    ):
        with pytest.raises(IntegrityError):
            path()
    assert _log_keys(name) == before  # nothing was written: the damage stays visible
    MemoryBackend.wipe(name)


def test_a_store_object_never_accepts_a_log_that_went_backwards() -> None:
    name, key = f"damage-{uuid.uuid4().hex}", s3ckpt.generate_key()
    store = _store(name, key)
    writer = store.run("r").claim()
    for n in range(1, 6):
        writer.commit({"n": n})
    raw = MemoryBackend(name)
    assert store.run("r").latest().state == {"n": 5}  # type: ignore[union-attr]
    # Someone with delete rights removes the newest records and puts an older HEAD back.
    old_head = _store(name, key)
    old_head.run("r")
    for seq in (4, 5):
        raw.delete(log_key("r", seq))
    raw.delete(head_key("r"))
    # A fresh object cannot know (docs/FORMAT.md): it sees a shorter log.
    assert _store(name, key).run("r").latest().state == {"n": 3}  # type: ignore[union-attr]
    # The object that saw seq 5 refuses, on every path.
    for path in (lambda: store.run("r").latest(), lambda: store.run("r").claim(), lambda: list(store.run("r").records())):
        with pytest.raises(IntegrityError, match=r"went backwards|missing"):
            path()
    with pytest.raises(IntegrityError):
        store.run("r").get(5)
    MemoryBackend.wipe(name)


def test_a_listed_log_with_a_hole_is_damage() -> None:
    name, key = f"damage-{uuid.uuid4().hex}", s3ckpt.generate_key()
    store = _store(name, key)
    writer = store.run("r").claim()
    for n in range(1, 4):
        writer.commit({"n": n})
    raw = MemoryBackend(name)
    raw.delete(head_key("r"))
    raw.delete(log_key("r", 2))
    with pytest.raises(IntegrityError, match="missing"):
        _store(name, key).run("r").latest()
    MemoryBackend.wipe(name)


OPS = st.lists(st.sampled_from(["claim", "commit", "commit", "commit"]), min_size=1, max_size=10)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, data=st.data())
def test_every_reader_path_reports_damage_or_tells_the_truth(ops: list[str], data: st.DataObject) -> None:
    name, key = f"damage-{uuid.uuid4().hex}", s3ckpt.generate_key()
    raw = MemoryBackend(name)
    try:
        store = _store(name, key)
        writer = store.run("r").claim()
        states: dict[int, Any] = {}
        for i, op in enumerate(ops):
            if op == "claim":
                writer = store.run("r").claim()
            else:
                states[writer.commit({"i": i}, artifacts={"a": bytes([i]) * 70_000} if i % 3 == 0 else None).seq] = {"i": i}
        records = list(store.run("r").records())
        tail = records[-1].seq
        truth = store.run("r").latest()
        truth_state = None if truth is None else truth.state
        heads = {seq: raw.get(head_key("r")).data for seq in [tail]}
        doomed = data.draw(st.sets(st.integers(0, tail), min_size=1), label="records deleted")
        for seq in doomed:
            raw.delete(log_key("r", seq))
        if data.draw(st.booleans(), label="HEAD deleted"):
            raw.delete(head_key("r"))
        elif tail in doomed:
            raw.put(head_key("r"), heads[tail])  # a HEAD naming a record that is gone
        tail_gone = tail in doomed
        suffix_only = doomed == set(range(min(doomed), tail + 1))

        def check_latest(found: s3ckpt.Checkpoint | None, fresh: bool) -> None:
            if fresh and tail_gone:
                # A shorter log: an older checkpoint of this run, or none; never anything else.
                assert found is None or found.state in states.values()
            else:
                assert (None if found is None else found.state) == truth_state

        for fresh, reader in ((False, store), (True, _store(name, key))):
            with contextlib.suppress(IntegrityError):
                check_latest(reader.run("r").latest(), fresh)
            before = _log_keys(name)
            try:
                claimed = reader.run("r").claim()
            except IntegrityError:
                assert _log_keys(name) == before, "a refused claim wrote something"
            else:
                parent = claimed._parent_record()
                check_latest(None if parent is None else reader.run("r")._checkpoint(parent), fresh)
            if fresh and suffix_only:
                # Indistinguishable from a shorter log: the history is a prefix of the real one.
                history = [c.state for c in reader.run("r").history()]
                assert history == [states[seq] for seq in sorted(states) if seq < min(doomed)]
            else:
                with pytest.raises(IntegrityError):
                    list(reader.run("r").history())
    finally:
        MemoryBackend.wipe(name)
