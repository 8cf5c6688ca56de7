"""The LangGraph saver under the store's lifecycle: the commit deadline that protects what it
references from the collector (docs/langgraph.md, "Deletion and the collector")."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

import s3ckpt
from s3ckpt.backends import MemoryBackend, PutResult
from s3ckpt.backends._base import PutMode
from s3ckpt.integrations.langgraph import S3ckptSaver
from s3ckpt.records import ChunkerParams, Manifest
from s3ckpt.testing import ManualClock

SMALL_CHUNKS = ChunkerParams(avg_size=1024, min_size=256, max_size=4096)
THREAD = "t"
METADATA: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}


class StallingBackend(MemoryBackend):
    """A memory backend that, once armed, holds the caller of the next pack PUT after the pack is
    stored: a commit whose packs are uploaded and whose record (or writes object) is not created."""

    def __init__(self, name: str, clock: ManualClock) -> None:
        super().__init__(name, clock=clock)
        self.armed = False
        self.reached = threading.Event()
        self.release = threading.Event()
        self.stalled: list[str] = []

    def put(self, key: str, data: bytes | bytearray | memoryview, *, mode: PutMode = "overwrite", **kw: Any) -> PutResult:
        result = super().put(key, data, mode=mode, **kw)
        if self.armed and key.startswith("packs/"):
            self.armed = False
            self.stalled.append(key)
            self.reached.set()
            assert self.release.wait(30)
        return result


@dataclass
class Env:
    store: s3ckpt.Store
    backend: StallingBackend
    clock: ManualClock


@pytest.fixture
def env() -> Iterator[Env]:
    clock = ManualClock()
    name = f"lg-lifecycle-{uuid.uuid4().hex}"
    backend = StallingBackend(name, clock)
    store = s3ckpt.open_store(key=s3ckpt.generate_key(), backend=backend, chunker=SMALL_CHUNKS, commit_deadline=0.3)
    yield Env(store, backend, clock)
    backend.release.set()
    store.close()
    MemoryBackend.wipe(name)


def config(checkpoint_id: str | None = None, thread: str = THREAD) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint(cid: str, n: int, value: Any) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=cid,
        ts="2026-01-01T00:00:00+00:00",
        channel_values={"x": value},
        channel_versions={"x": f"{n:032}.0"},
        versions_seen={},
        updated_channels=None,
    )


def put(saver: S3ckptSaver, parent: str | None, cid: str, n: int, value: Any, run_id: str | None = None) -> RunnableConfig:
    metadata: CheckpointMetadata = {**METADATA, "run_id": run_id or f"run-{cid}"}
    return saver.put(config(parent), checkpoint(cid, n, value), metadata, {"x": f"{n:032}.0"})


def large(n: int = 20_000) -> str:
    return os.urandom(n // 2).hex()


def stored_manifests(store: s3ckpt.Store) -> dict[str, Manifest]:
    """Every manifest that a record or a writes object of the store names, by where it is named."""
    found: dict[str, Manifest] = {}
    for run_id in store.runs():
        for record in store.run(run_id).records():
            for name, manifest in record.artifacts.items():
                found[f"{run_id}@{record.seq}/{name}"] = manifest
    saver = S3ckptSaver(store)
    for info in store.backend.list("runs/"):
        if "/writes/" in info.key:
            run_id = next(r for r in store.runs() if info.key.startswith(store.run(r).prefix))
            wo = saver._open_writes(run_id, info.key, store.backend.get(info.key).data, None)
            for name, manifest in wo.artifacts.items():
                found[f"{info.key}/{name}"] = manifest
    return found


def assert_nothing_names_a_missing_pack(store: s3ckpt.Store) -> None:
    packs = {info.key for info in store.backend.list("packs/")}
    for where, manifest in stored_manifests(store).items():
        for ref in manifest.chunks:
            assert ref.pack is not None
            key = f"packs/{ref.pack[:2]}/{ref.pack}"
            assert key in packs, f"{where} names {key}, which the collector deleted"


def _stalled(env: Env, call: Callable[[], Any], *, at_pack: bool = True) -> tuple[BaseException | None, int]:
    """Run ``call`` in a thread named "slow", held after its first pack is stored (or wherever it
    sets ``env.backend.reached``); meanwhile the pack ages past the grace by the storage clock, gc
    runs, and the commit deadline passes. Returns what the call raised and how many packs gc
    deleted."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    env.backend.armed = at_pack
    thread = threading.Thread(target=run, name="slow")
    thread.start()
    assert env.backend.reached.wait(10)
    env.clock.advance(600)
    deleted = env.store.gc(grace=timedelta(seconds=1)).packs_deleted
    time.sleep(env.store.options.commit_deadline + 0.1)
    env.backend.release.set()
    thread.join(30)
    assert not thread.is_alive()
    return outcome[0], deleted


def test_a_put_stalled_past_the_deadline_never_names_a_pack_the_collector_deleted(env: Env) -> None:
    saver = S3ckptSaver(env.store, inline_limit=1024)
    first = large()
    root = put(saver, None, "000001", 1, first)
    error, deleted = _stalled(env, lambda: put(saver, "000001", "000002", 2, large()))
    assert deleted >= 1, "the collector took the stalled put's pack"
    assert isinstance(error, s3ckpt.CommitDeadlineError), error
    assert "commit_deadline" in str(error)
    assert_nothing_names_a_missing_pack(env.store)
    assert env.store.verify(read_data=True).ok
    fresh = S3ckptSaver(env.store, inline_limit=1024).get_tuple(config())
    assert fresh is not None
    assert fresh.config == root
    assert fresh.checkpoint["channel_values"] == {"x": first}
    # The saver goes on: its next put commits (its position did not move).
    put(saver, "000001", "000003", 3, large())
    assert env.store.verify(read_data=True).ok


def test_put_writes_stalled_past_the_deadline_never_names_a_pack_the_collector_deleted(env: Env) -> None:
    saver = S3ckptSaver(env.store, inline_limit=1024)
    root = put(saver, None, "000001", 1, "small")
    error, deleted = _stalled(env, lambda: saver.put_writes(root, [("c", large())], "task"))
    assert deleted >= 1
    assert isinstance(error, s3ckpt.CommitDeadlineError), error
    assert "put_writes" in str(error)
    assert not [info.key for info in env.store.backend.list("runs/") if "/writes/" in info.key]
    assert_nothing_names_a_missing_pack(env.store)
    got = S3ckptSaver(env.store).get_tuple(root)
    assert got is not None
    assert got.pending_writes == []
    value = large()
    saver.put_writes(root, [("c", value)], "task")  # called again, it is stored
    got = S3ckptSaver(env.store).get_tuple(root)
    assert got is not None
    assert got.pending_writes == [("task", "c", value)]


def test_copy_thread_stalled_past_the_deadline_copies_nothing_naming_a_deleted_pack(env: Env) -> None:
    saver = S3ckptSaver(env.store, inline_limit=1024)
    root = put(saver, None, "000001", 1, large())
    saver.put_writes(root, [("c", large())], "task")

    class Stalling(S3ckptSaver):
        def _sync(self, lg: Any) -> None:
            super()._sync(lg)
            if lg.thread_id == THREAD and threading.current_thread().name == "slow":
                env.backend.reached.set()
                assert env.backend.release.wait(30)

    copier = Stalling(env.store, inline_limit=1024)
    error, _ = _stalled(env, lambda: copier.copy_thread(THREAD, "copy"), at_pack=False)
    assert isinstance(error, s3ckpt.CommitDeadlineError), error
    assert S3ckptSaver(env.store).get_tuple(config(thread="copy")) is None
    assert_nothing_names_a_missing_pack(env.store)


def test_core_delete_run_of_a_thread_reads_as_a_drop_and_the_thread_is_used_again(env: Env) -> None:
    saver = S3ckptSaver(env.store, inline_limit=1024)
    root = put(saver, None, "000001", 1, large())
    saver.put_writes(root, [("c", large())], "task")
    run_id = f"langgraph/{THREAD}/"
    stale = S3ckptSaver(env.store, inline_limit=1024)
    assert stale.get_tuple(config()) is not None
    env.store.delete_run(run_id)  # the core's deletion: a deleted record, no state
    assert saver.get_tuple(config()) is None  # the saver reads it as a drop
    assert list(saver.list(config())) == []
    with pytest.raises(s3ckpt.RunDeletedError):  # a saver that read the thread before is fenced
        put(stale, "000001", "000009", 9, "late")
    # The thread id is used again: a new history after the deletion.
    value = large()
    again = put(saver, None, "000002", 2, value)
    saver.put_writes(again, [("c", "new")], "task")
    env.clock.advance(600)
    report = env.store.gc(grace=timedelta(seconds=1))
    assert report.writes_deleted == 1
    assert report.packs_deleted >= 2
    assert [r.kind for r in env.store.run(run_id).records()] == ["pruned", "deleted", "checkpoint"]
    got = S3ckptSaver(env.store).get_tuple(config())
    assert got is not None
    assert got.checkpoint["channel_values"] == {"x": value}
    assert got.pending_writes == [("task", "c", "new")]
    assert env.store.verify(read_data=True).ok
    assert env.store.stats().garbage_bytes == 0


def test_a_record_tombstoned_under_a_saver_reads_as_removed_and_is_not_reused(env: Env) -> None:
    saver = S3ckptSaver(env.store, inline_limit=1024)
    value = large()
    root = put(saver, None, "000001", 1, value)
    saver.put_writes(root, [("c", large())], "task")
    child = put(saver, "000001", "000002", 2, "small")
    assert saver.get_tuple(root) is not None
    run = env.store.run(f"langgraph/{THREAD}/")
    entry = next(e for e in run._entries() if e.record.seq == 0)
    run._tombstone(entry)  # replaced under the saver (not through a marker)
    assert saver.get_tuple(root) is None  # the listing shows another etag: it is gone
    assert [t.checkpoint["id"] for t in saver.list(config())] == ["000002"]
    got = saver.get_tuple(child)
    assert got is not None
    assert got.parent_config is not None
    # A put whose channel has the removed record's version stores the value again: no chunk of the
    # tombstoned record (or of its checkpoint's writes) is named.
    cfg = saver.put(config("000002"), checkpoint("000003", 1, value), METADATA, {})
    env.clock.advance(600)
    assert env.store.gc(grace=timedelta(seconds=1)).packs_deleted >= 2  # the root's and its writes'
    fresh = S3ckptSaver(env.store, inline_limit=1024).get_tuple(cfg)
    assert fresh is not None
    assert fresh.checkpoint["channel_values"] == {"x": value}
    assert_nothing_names_a_missing_pack(env.store)
    assert env.store.verify(read_data=True).ok


def test_a_copy_that_read_a_thread_before_its_deletion_keeps_its_data() -> None:
    """copy_thread names the source's chunks from another run. A copy that read the source just
    before delete_thread commits after a gc: the collector kept the removed records' data for the
    grace after the drop marker, so the copy names nothing deleted (a deleted core run's data is
    freed at once: no writer can name it)."""
    clock = ManualClock()
    name = f"lg-copy-{uuid.uuid4().hex}"
    backend = StallingBackend(name, clock)
    store = s3ckpt.open_store(key=s3ckpt.generate_key(), backend=backend, chunker=SMALL_CHUNKS, commit_deadline=5)
    try:
        env = Env(store, backend, clock)
        saver = S3ckptSaver(store, inline_limit=1024)
        value, written = large(), large()
        root = put(saver, None, "000001", 1, value)
        saver.put_writes(root, [("c", written)], "task")
        clock.advance(600)  # the source's packs are old

        class Stalling(S3ckptSaver):
            def _sync(self, lg: Any) -> None:
                super()._sync(lg)
                if lg.thread_id == THREAD and threading.current_thread().name == "slow":
                    backend.reached.set()
                    assert backend.release.wait(30)

        outcome: list[BaseException | None] = []

        def copy() -> None:
            try:
                Stalling(store, inline_limit=1024).copy_thread(THREAD, "copy")
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=copy, name="slow")
        thread.start()
        assert backend.reached.wait(10)
        saver.delete_thread(THREAD)
        clock.advance(5)
        assert store.gc(grace=timedelta(seconds=10)).packs_deleted == 0  # the drop is younger than the grace
        backend.release.set()
        thread.join(30)
        assert outcome == [None]
        clock.advance(600)
        report = store.gc(grace=timedelta(seconds=10))
        assert report.writes_deleted == 1  # the source's, whose checkpoint is gone; the copy's stays
        assert_nothing_names_a_missing_pack(env.store)
        assert store.verify(read_data=True).ok
        got = S3ckptSaver(store, inline_limit=1024).get_tuple(config(thread="copy"))
        assert got is not None
        assert got.checkpoint["channel_values"] == {"x": value}
        assert got.pending_writes == [("task", "c", written)]
        assert S3ckptSaver(store).get_tuple(config()) is None
    finally:
        backend.release.set()
        store.close()
        MemoryBackend.wipe(name)
