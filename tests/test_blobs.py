"""Chunking, dedupe, compression and the GC-safety refresh of old blobs."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import s3ckpt
from s3ckpt.backends import LocalBackend


def _blob_files(root: Path) -> list[Path]:
    return [p for p in (root / "blobs").rglob("*") if p.is_file() and not p.name.startswith(".")]


def test_cross_run_dedupe_uploads_nothing_new(tmp_path: Path) -> None:
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    data = os.urandom(5 << 20)
    first = store.run("a").claim()
    first.commit({}, artifacts={"x": data})
    before = len(_blob_files(tmp_path / "s"))
    second = store.run("b").claim()
    second.commit({}, artifacts={"x": data})
    assert second.last_stats.uploaded_chunks == 0
    assert second.last_stats.dedupe_hits == second.last_stats.chunks == first.last_stats.chunks
    assert len(_blob_files(tmp_path / "s")) == before


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
    stored = sum(p.stat().st_size for p in _blob_files(tmp_path / "s"))
    assert stored < len(text) / 10
    noise = os.urandom(2 << 20)
    store.run("n").claim().commit({}, artifacts={"noise": noise})
    stored_noise = sum(p.stat().st_size for p in _blob_files(tmp_path / "s")) - stored
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


def test_dedupe_hit_on_an_old_blob_refreshes_its_age(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = s3ckpt.open_store(str(root), key=s3ckpt.generate_key())
    data = os.urandom(1 << 20)
    store.run("a").claim().commit({}, artifacts={"x": data})
    old = time.time() - 3 * 86400
    for path in _blob_files(root):
        os.utime(path, (old, old))
    store.run("b").claim().commit({}, artifacts={"x": data})
    ages = [time.time() - p.stat().st_mtime for p in _blob_files(root)]
    assert ages
    assert max(ages) < 3600, "an old blob hit by dedupe must be rewritten so a collector keeps it"
    cp = store.run("a").latest()
    assert cp is not None
    assert cp.read_artifact("x") == data  # the rewrite is the same content


def test_recent_dedupe_hit_is_not_rewritten(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = s3ckpt.open_store(str(root), key=s3ckpt.generate_key())
    data = os.urandom(1 << 20)
    store.run("a").claim().commit({}, artifacts={"x": data})
    before = {p: LocalBackend(root).head(str(p.relative_to(root))) for p in _blob_files(root)}
    store.run("b").claim().commit({}, artifacts={"x": data})
    after = {p: LocalBackend(root).head(str(p.relative_to(root))) for p in _blob_files(root)}
    assert before == after
