"""Content-addressed chunks: FastCDC boundaries, keyed ids, zstd when it helps, bounded parallelism.

Writes stream: the chunker reads the source a window at a time and at most ``max_inflight`` chunks
are in memory, so an artifact larger than memory works. A chunk whose id the writer already knows
to be stored (the parent record references it) is not uploaded again; any other chunk is written
with create-if-absent, and "already exists" is a dedupe hit. See docs/FORMAT.md for why a hit on an
old blob is refreshed (garbage collection safety).
"""

from __future__ import annotations

import io
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import BinaryIO, cast

from pyfastcdc import FastCDC

from . import codec
from ._names import BlobId, blob_key, check_blob_id
from .backends import Backend
from .crypto import Cipher
from .errors import IntegrityError, InvalidArtifactError, ObjectNotFoundError, PreconditionFailedError
from .records import ChunkerParams, ChunkRef, Manifest

DEFAULT_CHUNKER = ChunkerParams(avg_size=1 << 20, min_size=256 << 10, max_size=4 << 20)


@dataclass
class WriteStats:
    """What one write moved; benchmarks and the CLI report these."""

    chunks: int = 0
    bytes_in: int = 0
    uploaded_chunks: int = 0
    uploaded_bytes: int = 0
    dedupe_hits: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, uploaded: int = 0, hit: bool = False) -> None:
        with self._lock:
            if uploaded:
                self.uploaded_chunks += 1
                self.uploaded_bytes += uploaded
            if hit:
                self.dedupe_hits += 1


class BlobStore:
    def __init__(
        self,
        backend: Backend,
        cipher: Cipher,
        params: ChunkerParams,
        pool: ThreadPoolExecutor,
        *,
        max_inflight: int = 8,
        refresh_after: timedelta = timedelta(days=1),
    ) -> None:
        self.backend = backend
        self.cipher = cipher
        self.params = params
        self.pool = pool
        self.max_inflight = max(2, max_inflight)
        self.refresh_after = refresh_after

    def _chunker(self) -> FastCDC:
        p = self.params
        return FastCDC(p.avg_size, min_size=p.min_size, max_size=p.max_size, seed=self.cipher.chunker_seed)

    # -- writing -----------------------------------------------------------------------------

    def write(self, source: Source, known: Mapping[str, int], stats: WriteStats) -> Manifest:
        """Store ``source`` (bytes or a binary file) and return its manifest."""
        chunker = self._chunker()
        if isinstance(source, bytes | memoryview):
            view = memoryview(source)
            pieces: Iterable[bytes | memoryview] = (view[c.offset : c.offset + c.length] for c in chunker.cut_buf(view))
        else:
            # cut_stream reuses its buffer for the next chunk, so each chunk is copied out.
            pieces = (bytes(c.data) for c in chunker.cut_stream(source))
        return self._write_pieces(pieces, known, stats)

    def _write_pieces(
        self, pieces: Iterable[bytes | memoryview], known: Mapping[str, int], stats: WriteStats
    ) -> Manifest:
        inflight: deque[Future[ChunkRef]] = deque()
        refs: list[ChunkRef] = []
        size = 0
        try:
            for piece in pieces:
                size += len(piece)
                inflight.append(self.pool.submit(self._store_chunk, piece, known, stats))
                while len(inflight) >= self.max_inflight:
                    refs.append(inflight.popleft().result())
            while inflight:
                refs.append(inflight.popleft().result())
        finally:
            for fut in inflight:
                fut.cancel()
        stats.chunks += len(refs)
        stats.bytes_in += size
        return Manifest(size=size, chunks=tuple(refs))

    def _store_chunk(self, data: bytes | memoryview, known: Mapping[str, int], stats: WriteStats) -> ChunkRef:
        blob_id = self.cipher.content_id(data)
        if blob_id in known:
            stats.add(hit=True)
            return ChunkRef(id=blob_id, size=len(data))
        sealed = self.cipher.seal("blob", blob_id, codec.pack(data))
        key = blob_key(blob_id)
        try:
            self.backend.put(key, sealed, mode="create")
            stats.add(uploaded=len(sealed))
        except PreconditionFailedError:
            stats.add(hit=True)
            self._refresh_if_old(key, sealed)
        return ChunkRef(id=blob_id, size=len(data))

    def _refresh_if_old(self, key: str, sealed: bytes) -> None:
        # A dedupe hit on an old, possibly unreferenced blob could race a garbage collector that is
        # about to delete it. Rewriting it resets its age, which the collector's grace period honours.
        info = self.backend.head(key)
        if info is None or datetime.now(UTC) - info.last_modified > self.refresh_after:
            self.backend.put(key, sealed, mode="overwrite")

    # -- reading -----------------------------------------------------------------------------

    def read_chunk(self, ref: ChunkRef) -> bytes:
        blob_id = check_blob_id(ref.id)
        key = blob_key(BlobId(blob_id))
        try:
            sealed = self.backend.get(key).data
        except ObjectNotFoundError:
            raise IntegrityError(f"blob {blob_id} is missing from the store; run `s3ckpt verify`", key=key) from None
        data = codec.unpack(self.cipher.open("blob", blob_id, sealed, key=key), limit=ref.size, where=key)
        if len(data) != ref.size or self.cipher.content_id(data) != blob_id:
            raise IntegrityError(f"blob {blob_id} does not hash to its id", key=key)
        return data

    def iter_chunks(self, manifest: Manifest, *, readahead: int | None = None) -> Iterator[bytes]:
        """The manifest's chunks in order, fetched ``readahead`` at a time on the pool."""
        depth = readahead or self.max_inflight
        pending: deque[Future[bytes]] = deque()
        refs = iter(manifest.chunks)
        try:
            for ref in refs:
                pending.append(self.pool.submit(self.read_chunk, ref))
                if len(pending) >= depth:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for fut in pending:
                fut.cancel()

    def read_all(self, manifest: Manifest) -> bytes:
        return b"".join(self.iter_chunks(manifest))

    def open(self, manifest: Manifest) -> io.BufferedReader:
        return io.BufferedReader(_ChunkReader(self.iter_chunks(manifest), manifest.size), buffer_size=1 << 20)


class _ChunkReader(io.RawIOBase):
    """A read-only stream over decrypted chunks; holds one chunk plus the read-ahead in memory."""

    def __init__(self, chunks: Iterator[bytes], size: int) -> None:
        self._chunks = chunks
        self._current = memoryview(b"")
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._current:
            nxt = next(self._chunks, None)
            if nxt is None:
                if self._pos != self._size:
                    raise IntegrityError(f"artifact ended at {self._pos} bytes, expected {self._size}")
                return 0
            self._current = memoryview(nxt)
        n = min(len(buffer), len(self._current))
        buffer[:n] = self._current[:n]
        self._current = self._current[n:]
        self._pos += n
        return n

    def close(self) -> None:
        close: Callable[[], None] | None = getattr(self._chunks, "close", None)
        if close is not None:
            close()
        super().close()


Source = bytes | memoryview | BinaryIO


def open_source(value: object) -> tuple[Source, Callable[[], None]]:
    """An artifact value (bytes, a path, or a binary file) as a source for :meth:`BlobStore.write`,
    with the callback that releases it."""
    if isinstance(value, bytes | memoryview):
        return value, _nothing
    if isinstance(value, bytearray):
        return bytes(value), _nothing
    if isinstance(value, str | os.PathLike):
        fh = open(value, "rb")  # noqa: SIM115 - closed by the returned callback
        return fh, fh.close
    if isinstance(value, io.IOBase) or hasattr(value, "readinto") or hasattr(value, "read"):
        return cast(BinaryIO, value), _nothing
    raise InvalidArtifactError(
        f"an artifact must be bytes, a path or a binary file opened for reading, not {type(value).__name__}"
    )


def _nothing() -> None:
    pass
