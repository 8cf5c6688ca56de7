"""``Run.append`` and ``Run.entry``: the optimistic append at the next seq that integrations (the
LangGraph saver) build on instead of constructing records themselves."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

import s3ckpt
from s3ckpt.backends import MemoryBackend


@pytest.fixture
def store() -> Iterator[s3ckpt.Store]:
    name = f"append-{uuid.uuid4().hex}"
    with s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(name), commit_deadline=5) as opened:
        yield opened
    MemoryBackend.wipe(name)


def test_append_lands_after_what_the_caller_read_or_nowhere(store: s3ckpt.Store) -> None:
    run = store.run("r")
    first = run.append({"n": 1}, after=None, writer_id="w", meta={"by": "me"})
    assert (first.record.seq, first.record.kind, first.record.epoch) == (0, "checkpoint", 1)
    assert first.record.meta == {"by": "me"}
    second = run.append({"n": 2}, after=first, writer_id="w")
    assert second.record.prev == first.digest
    latest = run.latest()
    assert latest is not None
    assert (latest.seq, latest.state) == (1, {"n": 2})
    with pytest.raises(s3ckpt.ConflictError, match="Read the log again") as info:
        run.append({"n": 3}, after=first, writer_id="other")  # behind: seq 1 is taken
    assert type(info.value) is s3ckpt.ConflictError
    assert info.value.seq == 1
    assert [r.seq for r in run.records()] == [0, 1]
    entry = run.entry(1)
    assert entry is not None
    assert entry.digest == second.digest
    assert run.entry(2) is None


def test_a_deletion_fences_appends_behind_it_and_the_log_goes_on_after_it(store: s3ckpt.Store) -> None:
    run = store.run("r")
    first = run.append({"n": 1}, after=None, writer_id="w")
    dropped = run.append(None, after=first, writer_id="w", deletes=True)
    assert (dropped.record.kind, dropped.record.epoch, dropped.record.checkpoint_seq) == ("deleted", 2, None)
    assert run.latest() is None
    with pytest.raises(s3ckpt.RunDeletedError):
        run.append({"n": 2}, after=first, writer_id="late")
    again = run.append({"n": 3}, after=dropped, writer_id="w")  # a LangGraph thread used again
    assert again.record.epoch == 2
    assert [c.state for c in run.history()] == [{"n": 3}]
    with pytest.raises(s3ckpt.InvalidArgumentError, match="no state"):
        run.append({"n": 4}, after=again, writer_id="w", deletes=True)


def test_a_claim_fences_an_append_behind_it(store: s3ckpt.Store) -> None:
    run = store.run("r")
    first = run.append({"n": 1}, after=None, writer_id="w")
    run.claim()
    with pytest.raises(s3ckpt.FencedError):
        run.append({"n": 2}, after=first, writer_id="w")


def test_a_record_naming_chunks_is_held_to_the_commit_deadline(store: s3ckpt.Store) -> None:
    run = store.run("r")
    writer = run.claim()
    stored = writer.commit(artifacts={"a": b"x" * 5000})
    manifest = stored.record.artifacts["a"]
    tail = run.entry(1)
    with pytest.raises(s3ckpt.InvalidArgumentError, match="started="):
        run.append({}, after=tail, writer_id="w", artifacts={"a": manifest})
    with pytest.raises(s3ckpt.CommitDeadlineError, match="commit_deadline"):
        run.append({}, after=tail, writer_id="w", artifacts={"a": manifest}, started=time.monotonic() - 10)
    assert run.entry(2) is None  # nothing was written
    copied = run.append({}, after=tail, writer_id="w", artifacts={"a": manifest}, started=time.monotonic())
    latest = run.latest()
    assert latest is not None
    assert latest.seq == copied.record.seq
    assert latest.read_artifact("a") == b"x" * 5000
