"""S3ckptSaver with real graphs: killed and resumed in another process, two graphs on one thread,
unchanged channels not stored again, no pickles."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

# No importorskip: the dev extra installs LangGraph, and a missing install must fail, not skip.
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, CheckpointTuple

import s3ckpt
from s3ckpt.integrations.langgraph import S3ckptSaver, parse_run_id, run_id_for
from s3ckpt.testing.plugin import S3Bucket

from .langgraph_workload import build

ROOT = Path(__file__).resolve().parent.parent


def _store(tmp_path: Path, key: str | None = None) -> s3ckpt.Store:
    return s3ckpt.open_store(str(tmp_path / "store"), key=key or s3ckpt.generate_key())


def _chain(saver: S3ckptSaver, thread: str) -> list[CheckpointTuple]:
    return list(saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))


def _assert_linear(tuples: list[CheckpointTuple]) -> None:
    """One chain, newest first: each checkpoint's parent is the next older one; no shared parents."""
    parents = [t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None for t in tuples]
    assert len(set(parents)) == len(parents), f"two checkpoints share a parent: {parents}"
    ids = [t.config["configurable"]["checkpoint_id"] for t in tuples]
    assert parents[:-1] == ids[1:]
    assert parents[-1] is None


def test_run_ids_round_trip() -> None:
    for thread, ns in [("t", ""), ("a/b", "child:1|x:2"), ("ü %/..", "")]:
        assert parse_run_id(run_id_for(thread, ns)) == (thread, ns)
    assert parse_run_id("order-42") is None


def test_graph_runs_and_resumes_state(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        app = build(S3ckptSaver(store))
        config: RunnableConfig = {"configurable": {"thread_id": "t1"}}
        assert app.invoke({"n": 1, "visited": []}, config) == {"n": 31, "visited": ["a", "b", "c", "d"]}
        # Another saver (another process, in effect) sees the same history.
        saver = S3ckptSaver(store)
        history = _chain(saver, "t1")
        assert len(history) == 6
        _assert_linear(history)
        assert build(saver).get_state(config).values == {"n": 31, "visited": ["a", "b", "c", "d"]}


def _child(url: str, key: str, thread: str, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "S3CKPT_KEY": key, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.langgraph_workload", url, thread, *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_killed_mid_run_resumes_in_another_process(tmp_path: Path) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key) as store:
        expected = build(S3ckptSaver(store)).invoke({"n": 1, "visited": []}, {"configurable": {"thread_id": "reference"}})
    marker = tmp_path / "stalled"
    child = _child(url, key, "victim", "--stall-at", "c", "--marker", str(marker))
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None, "the child exited before reaching node c"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    with s3ckpt.open_store(url, key=key) as store:
        state = build(S3ckptSaver(store)).get_state({"configurable": {"thread_id": "victim"}})
        assert state.next == ("c",)  # a and b are committed, c is what remains
        assert state.values["visited"] == ["a", "b"]
    resumed = _child(url, key, "victim", "--resume")
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0
    assert json.loads(out) == expected
    with s3ckpt.open_store(url, key=key) as store:
        _assert_linear(_chain(S3ckptSaver(store), "victim"))


class _Together(S3ckptSaver):
    """A saver whose first read of the thread waits for the other graph's: both start from the
    same observed log, as two workers picking up one thread at once do."""

    def __init__(self, store: s3ckpt.Store, barrier: threading.Barrier) -> None:
        super().__init__(store)
        self.barrier = barrier

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        out = super().get_tuple(config)
        self.barrier.wait(timeout=30)
        return out


@pytest.mark.parametrize("backend", ["local", "moto"])
def test_two_graphs_on_one_thread_do_not_fork(tmp_path: Path, request: pytest.FixtureRequest, backend: str) -> None:
    key = s3ckpt.generate_key()
    if backend == "local":
        url, options = str(tmp_path / "store"), {}
    else:
        bucket: S3Bucket = request.getfixturevalue("moto_s3")
        url, options = bucket.url, {"endpoint_url": bucket.endpoint_url, "region": "us-east-1"}
    with s3ckpt.open_store(url, key=key, **options) as first:
        # The thread has history already: both graphs continue the same checkpoint.
        build(S3ckptSaver(first)).invoke({"n": 1, "visited": []}, {"configurable": {"thread_id": "shared"}})
    barrier = threading.Barrier(2)
    results: dict[int, Any] = {}

    def work(i: int) -> None:
        with s3ckpt.open_store(url, key=key, **options) as store:
            app = build(_Together(store, barrier), delay=0.01)
            try:
                results[i] = app.invoke({"n": 100 + i, "visited": []}, {"configurable": {"thread_id": "shared"}})
            except Exception as exc:
                results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    errors = [r for r in results.values() if isinstance(r, Exception)]
    assert len(results) == 2
    assert len(errors) == 1, results
    assert isinstance(errors[0], s3ckpt.ConflictError)
    assert "two graphs are running the thread at once" in str(errors[0])
    with s3ckpt.open_store(url, key=key, **options) as store:
        history = _chain(S3ckptSaver(store), "shared")
    _assert_linear(history)
    assert len(history) == 12  # the first invoke's 6 and the winner's 6


def _checkpoint(cid: str, values: dict[str, Any], versions: dict[str, Any]) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=cid,
        ts="2026-01-01T00:00:00+00:00",
        channel_values=values,
        channel_versions=versions,
        versions_seen={},
        updated_channels=None,
    )


def test_unchanged_large_channel_is_not_uploaded_again(moto_s3: S3Bucket) -> None:
    big = os.urandom(1 << 20).hex()  # 2 MiB of text, changes never
    with s3ckpt.open_store(moto_s3.url, key=s3ckpt.generate_key(), endpoint_url=moto_s3.endpoint_url) as store:
        saver = S3ckptSaver(store)
        md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
        config: RunnableConfig = {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
        config = saver.put(config, _checkpoint("1", {"big": big, "n": 0}, {"big": 1, "n": 1}), md, {"big": 1, "n": 1})
        log = moto_s3.server.log
        log.reset()
        for i in range(2, 6):
            cp = _checkpoint(str(i), {"big": big, "n": i}, {"big": 1, "n": i})
            config = saver.put(config, cp, md, {"n": i})
        assert log.count("PUT") == 4  # one record per checkpoint, no pack
        assert log.total == 4
        assert log.bytes_in < 4 * 8192
        fresh = S3ckptSaver(store).get_tuple(config)
        assert fresh is not None
        assert fresh.checkpoint["channel_values"] == {"big": big, "n": 5}


def test_pickle_is_refused(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        saver = S3ckptSaver(store)
        md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
        config: RunnableConfig = {"configurable": {"thread_id": "p", "checkpoint_ns": ""}}

        class Opaque:
            pass

        with pytest.raises((s3ckpt.InvalidArtifactError, TypeError)):
            saver.put(config, _checkpoint("1", {"x": Opaque()}, {"x": 1}), md, {"x": 1})


def _keys(store: s3ckpt.Store, thread: str, part: str) -> list[str]:
    from s3ckpt._names import run_prefix

    prefix = run_prefix(run_id_for(thread, "")) + part
    return [info.key for info in store.backend.list(prefix)]


def test_pending_writes_live_beside_the_log_and_another_saver_sees_them(tmp_path: Path) -> None:
    from langgraph.checkpoint.serde.types import ERROR

    with _store(tmp_path) as store:
        writer, reader = S3ckptSaver(store), S3ckptSaver(store)
        md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
        config: RunnableConfig = {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
        config = writer.put(config, _checkpoint("1", {"x": 1}, {"x": 1}), md, {"x": 1})
        writer.put_writes(config, [("a", 1), ("b", "two")], "task")
        writer.put_writes(config, [("a", 9)], "task")  # a repeat of (task, 0): the first wins
        writer.put_writes(config, [(ERROR, "first")], "task")
        # put_writes takes no log position: the log holds the one put record.
        assert len(_keys(store, "w", "log/")) == 1
        assert len(_keys(store, "w", "writes/")) == 2
        seen = reader.get_tuple({"configurable": {"thread_id": "w", "checkpoint_ns": ""}})
        assert seen is not None
        assert sorted(seen.pending_writes or []) == sorted([("task", "a", 1), ("task", "b", "two"), ("task", ERROR, "first")])
        # A later special write supersedes the first, and a reader that already loaded the thread sees it.
        time.sleep(0.01)
        writer.put_writes(config, [(ERROR, "second")], "task")
        writer.put_writes(config, [("c", 3)], "other")
        seen = reader.get_tuple({"configurable": {"thread_id": "w", "checkpoint_ns": ""}})
        assert seen is not None
        assert sorted(seen.pending_writes or []) == sorted(
            [("task", "a", 1), ("task", "b", "two"), ("task", ERROR, "second"), ("other", "c", 3)]
        )
        # The log's next seq is still free: the writer's next put commits without a conflict.
        writer.put(config, _checkpoint("2", {"x": 2}, {"x": 2}), md, {"x": 2})


def test_put_writes_does_not_wait_for_a_put_in_flight(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        saver = S3ckptSaver(store)
        md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
        config: RunnableConfig = {"configurable": {"thread_id": "o", "checkpoint_ns": ""}}
        config = saver.put(config, _checkpoint("1", {"x": 1}, {"x": 1}), md, {"x": 1})
        lg = saver._log_of("o", "")
        with lg.commit:  # what a put holds while its record's PUT is on the wire
            worker = threading.Thread(target=saver.put_writes, args=(config, [("a", 1)], "task"))
            worker.start()
            worker.join(timeout=10)
            assert not worker.is_alive(), "put_writes waited for the put"
        got = saver.get_tuple(config)
        assert got is not None
        assert got.pending_writes == [("task", "a", 1)]


def test_prune_and_delete_mark_and_the_collector_removes(tmp_path: Path) -> None:
    """prune and delete_thread only append markers (a worker may); readers see the result at once,
    and gc, once the grace has passed, replaces the removed records with tombstones and deletes the
    writes objects of removed checkpoints."""
    with s3ckpt.open_store(str(tmp_path / "store"), key=s3ckpt.generate_key(), commit_deadline=0.2) as store:
        saver = S3ckptSaver(store)
        md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
        config: RunnableConfig = {"configurable": {"thread_id": "p", "checkpoint_ns": ""}}
        first = saver.put(config, _checkpoint("1", {"x": 1}, {"x": 1}), md, {"x": 1})
        saver.put_writes(first, [("a", 1)], "t1")
        second = saver.put(first, _checkpoint("2", {"x": 2}, {"x": 2}), md, {"x": 2})
        saver.put_writes(second, [("a", 2)], "t2")
        assert len(_keys(store, "p", "writes/")) == 2
        saver.prune(["p"])
        assert len(_keys(store, "p", "writes/")) == 2  # nothing deleted: a marker was appended
        fresh = S3ckptSaver(store)
        assert [t.checkpoint["id"] for t in _chain(fresh, "p")] == ["2"]
        latest = fresh.get_tuple(config)
        assert latest is not None
        assert latest.pending_writes == [("t2", "a", 2)]
        grace = timedelta(seconds=0.5)
        assert store.gc(grace=grace).writes_deleted == 0  # within the grace: kept
        time.sleep(0.6)
        report = store.gc(grace=grace)
        assert report.writes_deleted == 1
        assert len(_keys(store, "p", "writes/")) == 1
        kinds = [r.kind for r in store.run(run_id_for("p")).records()]
        assert kinds == ["pruned", "checkpoint", "checkpoint"]  # put 1 (tombstone), put 2, forget
        saver.delete_thread("p")
        assert S3ckptSaver(store).get_tuple(config) is None
        time.sleep(0.6)
        assert store.gc(grace=grace).writes_deleted == 1
        assert _keys(store, "p", "writes/") == []
        assert [r.kind for r in store.run(run_id_for("p")).records()] == ["pruned"] * 3 + ["deleted"]
        assert store.verify(read_data=True).ok
        assert S3ckptSaver(store).get_tuple(config) is None


def test_graph_on_s3_costs_at_most_two_requests_per_super_step(moto_s3: S3Bucket) -> None:
    with s3ckpt.open_store(moto_s3.url, key=s3ckpt.generate_key(), endpoint_url=moto_s3.endpoint_url) as store:
        saver = S3ckptSaver(store)
        app = build(saver)
        app.invoke({"n": 1, "visited": []}, {"configurable": {"thread_id": "warm"}})
        log = moto_s3.server.log
        log.reset()
        out = app.invoke({"n": 1, "visited": []}, {"configurable": {"thread_id": "steps"}})
        requests = log.total
        assert out == {"n": 31, "visited": ["a", "b", "c", "d"]}
        steps = len(_chain(S3ckptSaver(store), "steps"))
        assert steps == 6
        assert requests <= 2 * steps, f"{requests} requests for {steps} super-steps"


def test_sealed_documents_open_only_as_their_kind_and_name(tmp_path: Path) -> None:
    from s3ckpt import codec

    with _store(tmp_path) as store:
        cipher = store.cipher
        sealed = codec.seal_document(cipher, "langgraph-writes", "a/b", b"{}" * 500)
        assert codec.open_document(cipher, "langgraph-writes", "a/b", sealed, key="k") == b"{}" * 500
        with pytest.raises(s3ckpt.IntegrityError):
            codec.open_document(cipher, "langgraph-writes", "a/c", sealed, key="k")
        with pytest.raises(s3ckpt.IntegrityError):
            codec.open_document(cipher, "other", "a/b", sealed, key="k")
        with pytest.raises(s3ckpt.IntegrityError):
            codec.open_document(cipher, "langgraph-writes", "a/b", sealed, key="k", limit=10)
        for reserved in ("log", "head", "blob", ""):
            with pytest.raises(ValueError):
                codec.seal_document(cipher, reserved, "a/b", b"x")


def test_writes_ride_in_the_next_put_while_puts_are_under_way(tmp_path: Path) -> None:
    """LangGraph's async durability: a task's put_writes arrives while the put chain is busy; its
    writes are committed in the record of the next put whose parent is their checkpoint."""
    with _store(tmp_path) as store:
        saver = S3ckptSaver(store)
        md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
        config: RunnableConfig = {"configurable": {"thread_id": "r", "checkpoint_ns": ""}}
        first = saver.put(config, _checkpoint("1", {"x": 1}, {"x": 1}), md, {"x": 1})
        lg = saver._log_of("r", "")
        with lg.lock:
            lg.puts_active += 1  # a put of the run is under way
        worker = threading.Thread(target=saver.put_writes, args=(first, [("a", 1), ("b", 2)], "task"))
        worker.start()
        deadline = time.monotonic() + 10
        while not lg.waiting:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        second = saver.put(first, _checkpoint("2", {"x": 2}, {"x": 2}), md, {"x": 2})
        worker.join(timeout=10)
        assert not worker.is_alive()
        with lg.lock:
            lg.puts_active -= 1
        assert _keys(store, "r", "writes/") == []  # no writes object: they rode in the record
        assert len(_keys(store, "r", "log/")) == 2
        for reader in (saver, S3ckptSaver(store)):
            got = reader.get_tuple(first)
            assert got is not None
            assert got.pending_writes == [("task", "a", 1), ("task", "b", 2)]
        # Removing the record that carries them keeps the writes of the checkpoint that stays.
        fresh = S3ckptSaver(store)
        lg2 = fresh._log_of("r", "")
        with lg2.commit, lg2.lock:
            fresh._sync(lg2)
            fresh._forget(lg2, {lg2.puts["2"]})
        assert len(_keys(store, "r", "writes/")) == 1
        got = S3ckptSaver(store).get_tuple(first)
        assert got is not None
        assert got.pending_writes == [("task", "a", 1), ("task", "b", 2)]
        assert S3ckptSaver(store).get_tuple(second) is None


def test_writes_are_written_alone_when_no_put_comes(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        saver = S3ckptSaver(store)
        md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
        config: RunnableConfig = {"configurable": {"thread_id": "q", "checkpoint_ns": ""}}
        first = saver.put(config, _checkpoint("1", {"x": 1}, {"x": 1}), md, {"x": 1})
        lg = saver._log_of("q", "")
        with lg.lock:
            lg.puts_active += 1
        worker = threading.Thread(target=saver.put_writes, args=(first, [("a", 1)], "task"))
        worker.start()
        time.sleep(0.1)
        assert worker.is_alive()  # waiting for the put under way
        with lg.lock:
            lg.puts_active -= 1  # the puts stop: it writes its object
            lg.changed.notify_all()
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert len(_keys(store, "q", "writes/")) == 1
        got = S3ckptSaver(store).get_tuple(first)
        assert got is not None
        assert got.pending_writes == [("task", "a", 1)]
