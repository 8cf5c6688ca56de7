"""The commit log on every backend: round trips, run ids, fencing, races, retries."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

import s3ckpt
from s3ckpt._names import encode_run_id, log_key
from s3ckpt.backends import LocalBackend
from s3ckpt.errors import (
    ConflictError,
    FencedError,
    InvalidArtifactError,
    InvalidRunIdError,
    RunNotFoundError,
)

from .conftest import StoreEnv


def test_commit_latest_get_history(store: s3ckpt.Store) -> None:
    run = store.run("order-42")
    assert run.latest() is None
    writer = run.claim(model="m-1")
    first = writer.commit({"step": 1}, meta={"note": "first"})
    second = writer.commit({"step": 2, "items": [1, 2, 3]})
    assert (first.seq, second.seq) == (1, 2)  # seq 0 is the claim record
    latest = run.latest()
    assert latest is not None
    assert latest.seq == 2
    assert latest.state == {"step": 2, "items": [1, 2, 3]}
    assert latest.provenance == {"model": "m-1"}
    assert run.get(1).meta == {"note": "first"}
    assert [c.state["step"] for c in run.history()] == [1, 2]
    with pytest.raises(RunNotFoundError):
        run.get(0)  # a claim record, not a checkpoint
    with pytest.raises(KeyError):
        run.get(99)
    assert list(store.runs()) == ["order-42"]
    record = latest.to_dict()
    assert record["seq"] == 2
    assert record["kind"] == "checkpoint"
    assert record["epoch"] == 1


def test_artifacts_bytes_path_and_file(store: s3ckpt.Store, tmp_path: Path) -> None:
    big = os.urandom(3 << 20) + b"z" * (2 << 20)
    path = tmp_path / "a.bin"
    path.write_bytes(big[::-1])
    writer = store.run("r").claim()
    with open(path, "rb") as fh:
        cp = writer.commit({}, artifacts={"bytes": big, "path": str(path), "file": fh, "empty": b""})
    assert cp.artifacts == {"bytes": len(big), "path": len(big), "file": len(big), "empty": 0}
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.read_artifact("bytes") == big
    assert latest.read_artifact("path") == big[::-1]
    with latest.open_artifact("file") as stream:
        assert stream.read(10) == big[::-1][:10]
        assert stream.read() == big[::-1][10:]
    assert latest.read_artifact("empty") == b""
    with pytest.raises(KeyError, match="has no artifact 'nope'"):
        latest.open_artifact("nope")


def test_unchanged_artifact_is_not_uploaded_again(store: s3ckpt.Store) -> None:
    data = os.urandom(4 << 20)
    writer = store.run("r").claim()
    writer.commit({}, artifacts={"a": data})
    assert writer.last_stats.uploaded_chunks == writer.last_stats.chunks > 1
    flipped = data[2 << 20] ^ 0xFF  # always a different byte (writing b"X" changed nothing 1 time in 256)
    changed = data[: 2 << 20] + bytes([flipped]) + data[(2 << 20) + 1 :]
    assert changed != data
    writer.commit({}, artifacts={"a": changed})
    assert 1 <= writer.last_stats.uploaded_chunks < writer.last_stats.chunks
    # A new writer (another process after a crash) knows the parent's chunks too.
    fresh = store.run("r").claim()
    fresh.commit({}, artifacts={"a": changed})
    assert fresh.last_stats.uploaded_chunks == 0


def test_large_state_goes_to_chunks(store: s3ckpt.Store) -> None:
    state = {"blob": "x" * (200 << 10), "n": 7}
    store.run("big").claim().commit(state)
    latest = store.run("big").latest()
    assert latest is not None
    assert latest.state == state
    assert latest.record.state_manifest is not None
    assert latest.to_dict()["state"] == state


def test_pydantic_state(store: s3ckpt.Store) -> None:
    import pydantic

    class Progress(pydantic.BaseModel):
        cursor: int
        done: list[str]

    store.run("p").claim().commit(Progress(cursor=3, done=["a"]))
    latest = store.run("p").latest()
    assert latest is not None
    assert Progress.model_validate(latest.state) == Progress(cursor=3, done=["a"])


@pytest.mark.parametrize("bad", [{1, 2}, float("nan"), object(), b"bytes"])
def test_non_json_state_is_refused_and_nothing_committed(store: s3ckpt.Store, bad: Any) -> None:
    writer = store.run("r").claim()
    writer.commit({"ok": True})
    with pytest.raises(InvalidArtifactError, match="JSON-compatible"):
        writer.commit({"bad": bad})
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.state == {"ok": True}
    assert writer.commit({"ok": 2}).seq == 2  # the writer is still usable


RUN_IDS = [
    "plain",
    "a/b/c",
    "..",
    ".",
    "../../etc/passwd",
    "/abs/path",
    "with space and ~tilde~7E",
    "ünïcødé ✓ 😀",
    "x" * 300,
    "é" * 300,
    "~h" + "0" * 64,
    "CON",
    "a\nb\tc\x00d",
]


def test_any_run_id_round_trips_and_stays_inside(env: StoreEnv) -> None:
    store = env.open()
    for i, run_id in enumerate(RUN_IDS):
        store.run(run_id).claim().commit({"i": i})
    assert sorted(store.runs()) == sorted(RUN_IDS)
    for i, run_id in enumerate(RUN_IDS):
        latest = store.run(run_id).latest()
        assert latest is not None
        assert latest.run_id == run_id
        assert latest.state == {"i": i}
    keys = [info.key for info in env.raw().list("")]
    assert all(k.startswith(("config", "keys/", "blobs/", "runs/")) for k in keys), keys
    for key in keys:
        if key.startswith("runs/"):
            assert key.split("/")[1] not in (".", "..")
            assert len(key) < 400
    if env.kind == "local":
        root = Path(env.url)
        outside = {p for p in root.parent.rglob("*") if root not in p.parents and p != root}
        assert outside == set(), outside


def test_encoded_names_are_distinct() -> None:
    encoded = {encode_run_id(r) for r in RUN_IDS}
    assert len(encoded) == len(RUN_IDS)
    assert encode_run_id("x" * 300) != encode_run_id("x" * 299 + "y")


@pytest.mark.parametrize("bad", ["", None, 42, "\ud800"])
def test_invalid_run_ids(store: s3ckpt.Store, bad: Any) -> None:
    with pytest.raises(InvalidRunIdError):
        store.run(bad)
    with pytest.raises(ValueError):  # the builtin it also inherits
        store.run(bad)


def test_zombie_is_fenced_without_commit_in_between(store: s3ckpt.Store) -> None:
    run = store.run("z")
    old = run.claim()
    old.commit({"by": "old"})
    new = run.claim()
    with pytest.raises(FencedError) as info:
        old.commit({"by": "zombie"})
    assert info.value.newer_epoch == new.epoch > old.epoch
    assert isinstance(info.value, ConflictError)
    with pytest.raises(FencedError):  # and stays fenced
        old.commit({"by": "zombie again"})
    latest = run.latest()
    assert latest is not None
    assert latest.state == {"by": "old"}
    assert new.commit({"by": "new"}).seq == 3


def test_zombie_is_fenced_after_newer_commits(store: s3ckpt.Store) -> None:
    run = store.run("z")
    old = run.claim()
    new = run.claim()
    new.commit({"by": "new", "n": 1})
    new.commit({"by": "new", "n": 2})
    with pytest.raises(FencedError):
        old.commit({"by": "zombie"})
    assert [c.state for c in run.history()] == [{"by": "new", "n": 1}, {"by": "new", "n": 2}]


def test_sixteen_threads_race_for_each_seq(env: StoreEnv) -> None:
    """16 writers, one per thread, each claiming and committing in rounds: every seq has exactly
    one record, every success is in the log where it said, every loser got ConflictError."""
    store = env.open(concurrency=4)
    run = store.run("race")
    results: list[tuple[str, int]] = []
    failures: list[BaseException] = []
    unexpected: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def worker(i: int) -> None:
        barrier.wait()
        for round_ in range(3):
            try:
                writer = run.claim(worker=i)
                cp = writer.commit({"worker": i, "round": round_})
                with lock:
                    results.append((f"{i}/{round_}", cp.seq))
            except ConflictError as exc:
                with lock:
                    failures.append(exc)
            except BaseException as exc:  # pragma: no cover - reported below
                with lock:
                    unexpected.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert unexpected == []
    assert len(results) + len(failures) == 48
    assert results, "at least one commit must win"
    seqs = [seq for _, seq in results]
    assert len(seqs) == len(set(seqs)), "two writers were told they committed the same seq"
    history = {cp.seq: cp.state for cp in run.history()}
    assert set(history) == set(seqs)
    for tag, seq in results:
        worker_id, round_ = map(int, tag.split("/"))
        assert history[seq] == {"worker": worker_id, "round": round_}
    records = list(run.records())
    assert [r.seq for r in records] == list(range(len(records)))


def test_shared_writer_threads_get_distinct_seqs(store: s3ckpt.Store) -> None:
    writer = store.run("shared").claim()
    seqs: list[int] = []

    def commit(i: int) -> None:
        seqs.append(writer.commit({"i": i}).seq)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 17))


def test_record_at_wrong_key_is_refused(env: StoreEnv) -> None:
    store = env.open()
    writer = store.run("r").claim()
    writer.commit({"n": 1})
    raw = env.raw()
    raw.put(log_key("r", 5), raw.get(log_key("r", 1)).data)
    with pytest.raises(s3ckpt.IntegrityError):
        store.run("r").get(5)


def test_local_directory_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("S3CKPT_URL", raising=False)
    key = s3ckpt.generate_key()
    with s3ckpt.open_store(key=key) as store:
        assert isinstance(store.backend.inner, LocalBackend)  # type: ignore[attr-defined]
        store.run("r").claim().commit({"x": 1})
    assert (tmp_path / ".s3ckpt" / "config").exists()
    monkeypatch.setenv("S3CKPT_KEY", key)
    with s3ckpt.open_store() as store:
        latest = store.run("r").latest()
        assert latest is not None
        assert latest.state == {"x": 1}
