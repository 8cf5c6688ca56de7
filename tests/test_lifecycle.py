"""Verify, delete, prune, gc and stats: each promise of docs/operations.md, on every backend where
it matters, with real threads where a writer must be stalled."""

from __future__ import annotations

import io
import os
import random
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import s3ckpt
from s3ckpt import _boundaries
from s3ckpt.backends import MemoryBackend
from s3ckpt.records import ChunkerParams
from s3ckpt.testing import ManualClock
from tests.conftest import StoreEnv

SMALL_CHUNKS = ChunkerParams(avg_size=1024, min_size=256, max_size=4096)


@pytest.fixture
def clocked() -> Iterator[tuple[s3ckpt.Store, ManualClock]]:
    clock = ManualClock()
    name = f"lifecycle-{os.urandom(6).hex()}"
    store = s3ckpt.open_store(
        backend=MemoryBackend(name, clock=clock), key=s3ckpt.generate_key(), chunker=SMALL_CHUNKS, commit_deadline=60
    )
    yield store, clock
    store.close()
    MemoryBackend.wipe(name)


def _stall_at(point: str, thread_name: str, release: threading.Event, reached: threading.Event) -> None:
    def hook(at: str, detail: str) -> None:
        if at == point and threading.current_thread().name == thread_name:
            reached.set()
            release.wait(30)

    _boundaries.install(hook)


@pytest.fixture(autouse=True)
def _no_hook() -> Iterator[None]:
    yield
    _boundaries.install(None)


def test_prune_keeps_the_policy_the_latest_and_what_a_kept_record_names(env: StoreEnv) -> None:
    store = env.open(chunker=SMALL_CHUNKS)
    writer = store.run("r").claim()
    for i in range(5):
        writer.commit({"i": i}, artifacts={"a": os.urandom(5000)})  # seqs 1..5
    store.run("r").rollback(2)  # claim 6, checkpoint 7 (rollback_to=2)
    writer = store.run("r").claim()  # 8 names 7
    report = store.prune(keep_last=1)
    kinds = {r.seq: r.kind for r in store.run("r").records()}
    assert report.pruned == tuple(("r", s) for s in (1, 3, 4, 5, 6))
    assert [s for s, k in kinds.items() if k == "checkpoint"] == [2, 7]  # 2: the kept rollback's target
    assert kinds[8] == "claim"
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.state == {"i": 1}
    with pytest.raises(s3ckpt.RunNotFoundError, match="retention"):
        store.run("r").get(3)
    writer.commit({"i": 9})  # a live writer is never fenced by a prune
    assert store.verify(read_data=True).ok


def test_prune_keep_within_and_dry_run(clocked: tuple[s3ckpt.Store, ManualClock]) -> None:
    store, _ = clocked
    writer = store.run("r").claim()
    for i in range(4):
        writer.commit({"i": i})
    planned = store.prune(keep_last=0, dry_run=True)
    assert planned.records_pruned == 3
    assert planned.dry_run
    assert [r.kind for r in store.run("r").records()].count("pruned") == 0
    assert store.prune(keep_within=timedelta(hours=1)).records_pruned == 0
    with pytest.raises(s3ckpt.InvalidArgumentError, match="keep_last"):
        store.prune()
    with pytest.raises(s3ckpt.InvalidArgumentError, match="keep_last"):
        store.prune(keep_last=-1)
    with pytest.raises(s3ckpt.InvalidArgumentError, match="timedelta"):
        store.prune(keep_within=3600)  # type: ignore[arg-type]


@pytest.mark.parametrize("remover", ["prune", "delete"])
def test_a_writer_fenced_and_stalled_through_a_prune_or_delete_never_commits(tmp_path: Path, remover: str) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    zombie = store.run("r").claim()
    zombie.commit({"by": "zombie"}, artifacts={"a": b"z" * 3000})  # seq 1; its next create is seq 2
    release, reached = threading.Event(), threading.Event()
    _stall_at("before-record", "zombie", release, reached)
    outcome: list[BaseException | s3ckpt.Checkpoint] = []

    def late_commit() -> None:
        try:
            outcome.append(zombie.commit({"by": "zombie again"}, artifacts={"a": os.urandom(3000)}))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=late_commit, name="zombie")
    thread.start()
    assert reached.wait(10)
    other = store.run("r").claim()  # seq 2: the zombie's seq, now taken
    for i in range(3):
        other.commit({"by": "other", "i": i})
    if remover == "prune":
        store.prune(keep_last=1)
        assert next(r for r in store.run("r").records() if r.seq == 2).kind == "pruned"  # the key stays taken
    else:
        store.delete_run("r")
    release.set()
    thread.join(30)
    assert len(outcome) == 1
    assert isinstance(outcome[0], s3ckpt.FencedError), outcome
    if remover == "prune":
        latest = store.run("r").latest()
        assert latest is not None
        assert latest.state == {"by": "other", "i": 2}
    else:
        assert isinstance(outcome[0], s3ckpt.FencedError)
        assert store.run("r").latest() is None


def test_deleting_a_run_under_a_live_session_fences_it_and_frees_its_data(clocked: tuple[s3ckpt.Store, ManualClock]) -> None:
    store, clock = clocked
    session = store.resume("r", workflow="w", workflow_version="1")
    session.step("load", lambda: "x" * 100_000)  # a large result: the state spills to chunks
    session.checkpoint(artifacts={"weights": os.urandom(20_000)})
    assert store.stats().live_bytes > 0
    store.delete_run("r")
    with pytest.raises(s3ckpt.RunDeletedError):
        session.step("next", lambda: 1)
    assert store.run("r").latest() is None
    assert list(store.run("r").history()) == []
    with pytest.raises(s3ckpt.RunDeletedError, match="another run id"):
        store.resume("r", workflow="w", workflow_version="1")
    assert store.delete_run("r") == store.delete_run("r")  # deleting again changes nothing
    assert store.gc(grace=timedelta(minutes=2)).packs_deleted == 0  # tombstones keep data for the grace
    clock.advance(180)
    assert [r.kind for r in store.run("r").records()][-1] == "deleted"
    freed = store.gc(grace=timedelta(minutes=2))
    assert {r.kind for r in store.run("r").records()} == {"pruned", "deleted"}  # the collector erased its records
    assert freed.packs_deleted > 0
    assert freed.bytes_freed > 0
    stats = store.stats()
    assert (stats.packs, stats.stored_bytes, stats.live_bytes) == (0, 0, 0)
    assert store.verify(read_data=True).ok


def test_gc_deletes_only_unreferenced_packs_older_than_the_grace(clocked: tuple[s3ckpt.Store, ManualClock]) -> None:
    store, clock = clocked
    writer = store.run("r").claim()
    base = os.urandom(40_000)
    for i in range(6):
        writer.commit({"i": i}, artifacts={"a": base[: 30_000 + i * 1000] + os.urandom(3000)})

    class Boom(Exception):
        pass

    class Exploding(io.RawIOBase):
        """A file whose read fails after 40 MB: a Ctrl-C mid-save. Its packs are stored; no record
        names them."""

        def __init__(self) -> None:
            self.left = 40 << 20

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            if self.left <= 0:
                raise Boom
            n = min(len(buffer), self.left, 50_000)
            buffer[:n] = os.urandom(n)
            self.left -= n
            return n

    with pytest.raises(Boom):
        writer.commit(artifacts={"b": Exploding()})
    assert store.stats().garbage_bytes > 0
    before = {r.seq: r for r in store.run("r").records()}
    assert store.gc(grace=timedelta(minutes=2)).packs_deleted == 0  # the orphan is young
    clock.advance(600)
    report = store.gc(grace=timedelta(minutes=2), dry_run=True)
    assert report.packs_deleted > 0
    assert store.stats().garbage_bytes > 0
    report = store.gc(grace=timedelta(minutes=2))
    assert report.packs_deleted > 0
    assert report.packs_kept_young == 0
    assert store.stats().garbage_bytes == 0
    for seq, record in before.items():
        if record.kind == "checkpoint":
            cp = store.run("r").get(seq)
            assert len(cp.read_artifact("a")) == 30_000 + (seq - 1) * 1000 + 3000
    assert store.verify(read_data=True).ok


def test_gc_refuses_a_grace_that_does_not_exceed_the_commit_deadline(clocked: tuple[s3ckpt.Store, ManualClock]) -> None:
    store, _ = clocked
    with pytest.raises(s3ckpt.InvalidArgumentError, match="commit_deadline"):
        store.gc(grace=timedelta(seconds=60))
    with pytest.raises(s3ckpt.InvalidArgumentError, match="timedelta"):
        store.gc(grace=3600)  # type: ignore[arg-type]


def test_gc_stops_before_deleting_anything_when_a_record_cannot_be_read(clocked: tuple[s3ckpt.Store, ManualClock]) -> None:
    store, clock = clocked
    writer = store.run("r").claim()
    writer.commit(artifacts={"a": os.urandom(10_000)})
    writer.commit(artifacts={"a": os.urandom(10_000)})
    store.backend.put(store.run("r")._log_key(1), b"garbage", mode="overwrite")
    clock.advance(600)
    with pytest.raises(s3ckpt.S3ckptError):
        store.gc(grace=timedelta(minutes=2))
    assert store.stats  # the packs are all still there:
    assert len(list(store.backend.list("packs/"))) == 2


def _stalled_writer_outcome(store: s3ckpt.Store, gc_until: float, grace: timedelta) -> tuple[Any, int]:
    writer = store.run("r").claim()
    writer.commit({"i": 0}, artifacts={"a": os.urandom(5000)})
    release, reached = threading.Event(), threading.Event()
    _stall_at("before-record", "slow", release, reached)
    outcome: list[Any] = []

    def slow() -> None:
        try:
            outcome.append(writer.commit({"i": 1}, artifacts={"a": os.urandom(5000)}))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=slow, name="slow")
    thread.start()
    assert reached.wait(10)
    deleted = 0
    end = time.monotonic() + gc_until
    while time.monotonic() < end:
        deleted += store.gc(grace=grace).packs_deleted
        time.sleep(0.05)
    release.set()
    thread.join(30)
    return outcome[0], deleted


@pytest.mark.parametrize("backend_kind", ["local", "moto_http"])
def test_a_writer_stalled_past_the_grace_never_commits_a_record_naming_a_deleted_pack(env: StoreEnv) -> None:
    store = env.open(commit_deadline=0.4)
    outcome, deleted = _stalled_writer_outcome(store, gc_until=2.5, grace=timedelta(seconds=0.8))
    assert deleted >= 1  # the collector did take the stalled commit's pack
    assert isinstance(outcome, s3ckpt.CommitDeadlineError), outcome
    assert store.verify(read_data=True).ok
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.state == {"i": 0}
    assert len(latest.read_artifact("a")) == 5000


@pytest.mark.parametrize("backend_kind", ["memory", "local", "moto_http"])
def test_verify_finds_missing_and_damaged_data_and_lists_orphans_and_unknown_effects(env: StoreEnv) -> None:
    store = env.open(chunker=SMALL_CHUNKS)
    with store.resume("r", workflow="w", workflow_version="1") as session:
        session.checkpoint(artifacts={"a": os.urandom(20_000)})
        with pytest.raises(TimeoutError):
            session.emit("charge", target="card", payload=1, send=lambda key: (_ for _ in ()).throw(TimeoutError()))
    clean = store.verify(read_data=True)
    assert clean.ok
    assert clean.chunks_read > 0
    assert clean.orphans == []
    assert [e.kind for _, e in clean.unknown_effects] == ["charge"]
    raw = env.raw()
    packs = sorted(info.key for info in raw.list("packs/"))
    data = raw.get(packs[0]).data
    raw.put(packs[0], data[:-20] + bytes(20), mode="overwrite")  # same size, last chunk damaged
    assert store.verify().ok  # without reading data, a damaged chunk is not seen
    damaged = store.verify(read_data=True)
    assert not damaged.ok
    assert damaged.problems[0].run_id == "r"
    raw.delete(packs[0])
    assert not store.verify().ok
    assert "missing" in store.verify().problems[0].message
    raw.put("packs/ab/" + "ab" * 32, b"x", mode="create")
    assert "packs/ab/" + "ab" * 32 in store.verify().orphans


def test_verify_reports_a_deleted_log_record_under_versioning_as_truncation(moto_s3: Any) -> None:
    client: Any = moto_s3.client()
    client.put_bucket_versioning(Bucket=moto_s3.bucket, VersioningConfiguration={"Status": "Enabled"})
    store = s3ckpt.open_store(moto_s3.url, key=s3ckpt.generate_key(), endpoint_url=moto_s3.endpoint_url)
    writer = store.run("r").claim()
    for i in range(3):
        writer.commit({"i": i})
    client.delete_object(Bucket=moto_s3.bucket, Key=f"ckpt/{store.run('r')._log_key(3)}")  # the newest record
    report = store.verify()
    assert not report.ok
    assert any("delete marker" in p.message for p in report.problems)


def test_stats_count_runs_records_and_bytes(clocked: tuple[s3ckpt.Store, ManualClock]) -> None:
    store, _ = clocked
    for run in ("a", "b"):
        writer = store.run(run).claim()
        writer.commit(artifacts={"x": os.urandom(8000)})
    stats = store.stats()
    assert (stats.runs, stats.records, stats.packs) == (2, 4, 2)
    assert stats.stored_bytes == stats.live_bytes > 16_000
    assert stats.garbage_bytes == 0
    assert stats.to_dict()["runs"] == 2


def test_storage_stays_bounded_under_retention_gc_and_repacking() -> None:
    """An artifact changed 1% per commit, kept 5 deep and collected every 20 commits: without
    repacking, packs with a few live chunks pile up (2.35x the live set in this run at 64 MiB);
    with it the store stays within 1.3x (benchmarks/bench_lifecycle.py runs the full size)."""
    rng = random.Random(7)
    data = bytearray(rng.randbytes(24 << 20))
    name = f"bounded-{os.urandom(6).hex()}"
    store = s3ckpt.open_store(backend=MemoryBackend(name), key=s3ckpt.generate_key(), commit_deadline=0.2)
    writer = store.run("r").claim()
    for i in range(1, 101):
        at = rng.randrange(0, len(data) - len(data) // 100)
        data[at : at + len(data) // 100] = rng.randbytes(len(data) // 100)
        writer.commit({"i": i}, artifacts={"big": bytes(data)})
        if i % 20 == 0:
            store.prune(keep_last=5)
            time.sleep(0.45)
            store.gc(grace=timedelta(seconds=0.4))
    stats = store.stats()
    assert stats.stored_bytes <= 1.3 * stats.live_bytes, stats
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.read_artifact("big") == bytes(data)
    assert store.verify(read_data=True).ok
    store.close()
    MemoryBackend.wipe(name)


def test_keep_within_forever_keeps_everything(clocked: tuple[s3ckpt.Store, ManualClock]) -> None:
    store, _ = clocked
    writer = store.run("r").claim()
    for i in range(3):
        writer.commit({"i": i})
    assert store.prune(keep_within=timedelta.max).records_pruned == 0
    assert store.prune(keep_last=0, keep_within=timedelta(days=800_000)).records_pruned == 0


def test_verify_checks_the_chunks_of_langgraph_writes_objects(clocked: tuple[s3ckpt.Store, ManualClock]) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from s3ckpt.integrations.langgraph import S3ckptSaver

    store, _ = clocked
    saver = S3ckptSaver(store, inline_limit=100)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"x": "small"}
    checkpoint["channel_versions"] = {"x": saver.get_next_version(None, None)}
    config = saver.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {"source": "loop", "step": 0}, {}
    )
    before = {info.key for info in store.backend.list("packs/")}
    saver.put_writes(config, [("x", os.urandom(5000).hex())], "task1")  # a large value: chunks of its own
    (pack,) = {info.key for info in store.backend.list("packs/")} - before
    healthy = store.verify(read_data=True)
    assert healthy.ok
    assert pack not in healthy.orphans
    store.backend.delete(pack)
    broken = store.verify()
    assert not broken.ok
    assert broken.problems[0].key == pack
    assert "writes" in broken.problems[0].message


def test_commit_reports_progress_over_all_its_artifacts(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom(3 << 20))
    seen: list[tuple[int, int | None]] = []
    store.run("r").claim().commit(artifacts={"a": os.urandom(2 << 20), "b": path}, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (5 << 20, 5 << 20)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    stream: list[tuple[int, int | None]] = []
    with store.resume("s", workflow="w", workflow_version="1") as session, open(path, "rb") as f:
        session.checkpoint(artifacts={"f": f}, progress=lambda d, t: stream.append((d, t)))
    assert stream[-1] == (3 << 20, None)  # a stream's size is not known ahead
    with pytest.raises(s3ckpt.InvalidArgumentError, match="progress"):
        store.run("r").claim().commit(progress="yes")  # type: ignore[arg-type]


def test_the_commit_deadline_is_the_stores_and_no_writer_may_take_longer(tmp_path: Path) -> None:
    """A deadline known only to each process let a writer with the default 30 minutes meet an
    operator's gc with a 2 s grace (review): the store's config fixes it."""
    url, key = str(tmp_path / "s"), s3ckpt.generate_key()
    with s3ckpt.open_store(url, key=key, commit_deadline=1) as created:
        assert created.options.commit_deadline == 1
    with s3ckpt.open_store(url, key=key) as writer, s3ckpt.open_store(url, key=key, commit_deadline=0.5) as stricter:
        assert writer.options.commit_deadline == 1  # the store's, not the default
        assert stricter.options.commit_deadline == 0.5
        assert stricter.gc(grace=timedelta(seconds=2)).dry_run is False  # 2x the store's deadline, not ours
        with pytest.raises(s3ckpt.InvalidArgumentError, match="twice"):
            stricter.gc(grace=timedelta(seconds=1.5))
    with pytest.raises(s3ckpt.ConfigurationError, match="at most 1 s"):
        s3ckpt.open_store(url, key=key, commit_deadline=60)
    with s3ckpt.open_store(str(tmp_path / "default"), key=key) as default, pytest.raises(s3ckpt.InvalidArgumentError):
        default.gc(grace=timedelta(minutes=59))


def test_a_commit_from_its_own_progress_callback_is_refused_not_a_deadlock(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    writer = store.run("r").claim()
    refused: list[BaseException] = []

    def progress(done: int, total: int | None) -> None:
        try:
            writer.commit({"nested": True})
        except s3ckpt.InvalidArgumentError as exc:
            refused.append(exc)

    writer.commit({"i": 1}, artifacts={"a": os.urandom(10_000)}, progress=progress)
    assert refused
    assert "inside a commit" in str(refused[0])
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.state == {"i": 1}
    writer.commit({"i": 2})  # the writer is still usable
