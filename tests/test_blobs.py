"""Chunking, packs, reuse of the parent's chunks, compression, range reads and restore."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import s3ckpt


def _pack_files(root: Path) -> list[Path]:
    return [p for p in (root / "packs").rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_parent_chunks_are_reused_not_uploaded(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    data = os.urandom(5 << 20)
    writer = store.run("a").claim()
    writer.commit({}, artifacts={"x": data})
    before = len(_pack_files(tmp_path / "s"))
    writer.commit({"again": True}, artifacts={"x": data})
    assert writer.last_stats.uploaded_chunks == 0
    assert writer.last_stats.reused_chunks == writer.last_stats.chunks > 10
    assert len(_pack_files(tmp_path / "s")) == before


def test_chunks_repeated_within_a_commit_are_stored_once(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    data = os.urandom(3 << 20)
    writer = store.run("a").claim()
    writer.commit({}, artifacts={"one": data, "two": data})
    stats = writer.last_stats
    assert stats.uploaded_chunks == stats.reused_chunks == stats.chunks // 2
    cp = store.run("a").latest()
    assert cp is not None
    assert cp.read_artifact("two") == data


def test_a_large_artifact_is_few_objects_and_few_reads(tmp_path: Path) -> None:
    from s3ckpt.backends import LocalBackend

    calls: list[int] = []

    class Counting(LocalBackend):
        def get_range(self, key: str, start: int, length: int) -> bytes:
            calls.append(length)
            return super().get_range(key, start, length)

        def get_range_into(self, key: str, start: int, out: memoryview) -> int:
            calls.append(len(out))
            return super().get_range_into(key, start, out)

    key = s3ckpt.generate_key()
    data = os.urandom(40 << 20)
    store = s3ckpt.open_store(backend=Counting(tmp_path / "s"), key=key)
    writer = store.run("big").claim()
    writer.commit({}, artifacts={"x": data})
    assert writer.last_stats.chunks > 150
    assert writer.last_stats.packs == len(_pack_files(tmp_path / "s")) <= 3
    cp = store.run("big").latest()
    assert cp is not None
    assert cp.read_artifact("x") == data
    assert 10 <= len(calls) <= 16, "contiguous chunks must be read in ranges of a few MiB"
    restored = tmp_path / "restored.bin"
    cp.restore_artifact("x", restored)
    assert restored.read_bytes() == data


def test_content_defined_boundaries_survive_an_insertion(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    data = os.urandom(16 << 20)
    writer = store.run("a").claim()
    writer.commit({}, artifacts={"x": data})
    shifted = data[:1000] + b"inserted bytes shift every later offset" + data[1000:]
    writer.commit({}, artifacts={"x": shifted})
    stats = writer.last_stats
    assert stats.chunks >= 8
    assert stats.uploaded_chunks <= 2, stats  # only the chunk(s) around the insertion
    cp = store.run("a").latest()
    assert cp is not None
    assert cp.read_artifact("x") == shifted


def test_compressible_chunks_are_stored_smaller_random_ones_are_not(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    text = b"the same log line, again and again\n" * 60000
    store.run("t").claim().commit({}, artifacts={"log": text})
    stored = sum(p.stat().st_size for p in _pack_files(tmp_path / "s"))
    assert stored < len(text) / 10
    noise = os.urandom(2 << 20)
    store.run("n").claim().commit({}, artifacts={"noise": noise})
    stored_noise = sum(p.stat().st_size for p in _pack_files(tmp_path / "s")) - stored
    assert len(noise) < stored_noise < len(noise) * 1.01


class _Dribble(io.RawIOBase):
    """A stream that returns at most 1000 bytes per read, as sockets and pipes do."""

    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), 1000, len(self._data))
        buffer[:n] = self._data[:n]
        self._data = self._data[n:]
        return n


def test_short_reads_are_streamed_correctly(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    data = os.urandom(3 << 20)
    store.run("r").claim().commit({}, artifacts={"x": _Dribble(data)})
    cp = store.run("r").latest()
    assert cp is not None
    assert cp.read_artifact("x") == data


def test_a_file_changed_while_being_checkpointed_is_refused(tmp_path: Path) -> None:
    import threading
    import time

    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    path = tmp_path / "growing.bin"
    path.write_bytes(os.urandom(64 << 20))
    writer = store.run("r").claim()
    writer.commit({"v": 1})
    stop = threading.Event()

    def scribble() -> None:
        while not stop.is_set():
            with open(path, "r+b") as fh:
                fh.seek(1 << 20)
                fh.write(os.urandom(4096))
            time.sleep(0.001)

    thread = threading.Thread(target=scribble)
    thread.start()
    try:
        with pytest.raises(s3ckpt.InvalidArtifactError, match="changed while it was being checkpointed"):
            writer.commit({"v": 2}, artifacts={"f": str(path)})
    finally:
        stop.set()
        thread.join()
    latest = store.run("r").latest()
    assert latest is not None
    assert latest.state == {"v": 1}


def test_artifacts_carry_forward_and_keep_deduplicating(tmp_path: Path) -> None:
    """Weights every few steps, state every step: a state-only checkpoint still has the weights,
    and the next save of the same weights uploads nothing."""
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    weights = os.urandom(3 << 20)
    writer = store.run("train").claim()
    writer.commit({"step": 10}, artifacts={"weights": weights, "log": b"step 10"})
    writer.commit({"step": 11})
    middle = store.run("train").latest()
    assert middle is not None
    assert middle.artifacts == {"weights": len(weights), "log": 7}
    assert middle.read_artifact("weights") == weights
    # A new process (a resumed worker) continues the same way, with no extra read for the parent.
    resumed = store.run("train").claim()
    step12 = resumed.commit({"step": 12}, artifacts={"weights": weights})
    assert resumed.last_stats.uploaded_chunks == 0
    resumed.commit({"step": 13}, artifacts={"log": None})
    last = store.run("train").latest()
    assert last is not None
    assert last.artifacts == {"weights": len(weights)}
    assert store.run("train").get(step12.seq).read_artifact("log") == b"step 10"
