"""Chunking, packs, reuse of the parent's chunks, compression, range reads and restore."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("change", ["in place", "appended"])
def test_a_file_changed_while_being_checkpointed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """Another writer changes the file after the commit has chunked its first MiB. The change is
    made at that moment, not by a thread racing the commit (which a loaded machine can schedule
    before the commit starts or after it ends), and the file's mtime is first set far in the past,
    so that even a same-size write moves it whatever the clock's granularity."""
    from s3ckpt import blobs

    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    path = tmp_path / "growing.bin"
    path.write_bytes(os.urandom(16 << 20))
    os.utime(path, ns=(10**18, 10**18))  # 2001
    writer = store.run("r").claim()
    writer.commit({"v": 1})
    changed_at: list[int] = []
    consumed = blobs._MappedFile.consumed

    def consumed_then_changed(self: Any, upto: int) -> None:
        consumed(self, upto)
        if not changed_at:
            changed_at.append(upto)
            with open(path, "r+b") as fh:
                fh.seek(8 << 20 if change == "in place" else 16 << 20)  # the same size, or longer
                fh.write(os.urandom(4096))

    monkeypatch.setattr(blobs._MappedFile, "consumed", consumed_then_changed)
    with pytest.raises(s3ckpt.InvalidArtifactError, match="changed while it was being checkpointed"):
        writer.commit({"v": 2}, artifacts={"f": str(path)})
    assert 0 < changed_at[0] < 16 << 20  # changed mid-commit
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


def _edits(base: bytes) -> dict[str, bytes]:
    """New versions of ``base``: in place, shifted, shorter, longer, and all at once."""
    rng = __import__("random").Random(7)
    in_place = bytearray(base)
    for _ in range(16):
        at = rng.randrange(len(base) - 4096)
        in_place[at : at + 4096] = os.urandom(4096)
    return {
        "unchanged": base,
        "in place": bytes(in_place),
        "insertion": base[: len(base) // 3] + os.urandom(1000) + base[len(base) // 3 :],
        "deletion": base[: len(base) // 2] + base[len(base) // 2 + 5000 :],
        "truncated": base[: len(base) - 200_000],
        "truncated at a cut": base[: len(base) // 2],
        "extended": base + os.urandom(300_000),
        # XOR, not a constant: a constant equal to the random byte would change nothing (1 in 256)
        "first byte": bytes([base[0] ^ 0xFF]) + base[1:],
        "last byte": base[:-1] + bytes([base[-1] ^ 0xFF]),
        "rewritten": os.urandom(len(base)),
        "tiny": base[:100],
    }


@pytest.mark.parametrize("edit", list(_edits(b"x" * 10_000)))
def test_guided_cut_is_the_cut_fastcdc_gives_alone(tmp_path: Path, edit: str) -> None:
    """The parent's chunks guide the cut of the next version; the result must be exactly FastCDC's
    own cut of the new bytes (same dedupe as an unguided store), and the bytes must read back."""
    base = os.urandom(6 << 20)
    new = _edits(base)[edit]
    guided = s3ckpt.open_store(str(tmp_path / "guided"), key=s3ckpt.generate_key())
    writer = guided.run("r").claim()
    writer.commit({}, artifacts={"x": base})
    writer.commit({}, artifacts={"x": new})
    cp = guided.run("r").latest()
    assert cp is not None
    assert cp.read_artifact("x") == new

    # A run with no parent in the same store (same chunker seed, same ids) cuts with FastCDC alone.
    guided.run("alone").claim().commit({}, artifacts={"x": new})
    fresh = guided.run("alone").latest()
    assert fresh is not None
    assert [c.id for c in cp.record.artifacts["x"].chunks] == [c.id for c in fresh.record.artifacts["x"].chunks]


def test_an_in_place_edit_chunks_only_the_changed_regions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from s3ckpt.blobs import BlobStore

    chunked: list[int] = []
    make_chunker = BlobStore.chunker

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def cut_buf(self, buf: memoryview) -> Iterator[Any]:
            for piece in self.inner.cut_buf(buf):
                chunked.append(piece.length)
                yield piece

    monkeypatch.setattr(BlobStore, "chunker", lambda self: Counting(make_chunker(self)))
    store = s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key())
    base = os.urandom(32 << 20)
    new = _edits(base)["in place"]
    writer = store.run("r").claim()
    writer.commit({}, artifacts={"x": base})
    assert sum(chunked) == len(base)  # the first version has no parent: FastCDC over all of it
    chunked.clear()
    writer.commit({}, artifacts={"x": new})
    stats = writer.last_stats
    # 16 edits of 4 KiB: each re-chunks the chunk it falls in and perhaps the next, nothing else.
    assert 0 < sum(chunked) <= 16 * 2 * (512 << 10)
    assert sum(chunked) < len(new) // 4
    assert stats.reused_chunks >= stats.chunks - 2 * 16
    cp = store.run("r").latest()
    assert cp is not None
    assert cp.read_artifact("x") == new
