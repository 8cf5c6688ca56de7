"""Content-defined chunks, stored in packs: FastCDC boundaries, keyed ids, zstd when it helps.

Chunks are small (about 160 KiB on average) so that a small edit rewrites little, and they are
stored many to an object ("pack", about 16 MiB) so that a large artifact costs tens of objects, not
thousands. Every chunk is sealed on its own (its id in the associated data), so a chunk is read by a
range request and verified alone. A manifest lists each chunk's id, size and location (pack,
offset, length); a new checkpoint reuses the locations of chunks its parent already stored.

Writes stream: the chunker reads a window at a time; at most ``max_inflight`` chunks are being
sealed and at most two packs are being uploaded at once, so memory stays bounded whatever the size.
"""

from __future__ import annotations

import contextlib
import errno
import io
import mmap
import os
import secrets
import stat
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple, cast

from pyfastcdc import FastCDC

from . import _boundaries, _guided, codec
from ._names import BlobId, blob_key, check_blob_id, pack_key
from .backends import Backend
from .crypto import ENVELOPE_OVERHEAD, Cipher, Sealer, sealed_size
from .errors import (
    DAMAGE_FIX,
    IntegrityError,
    InvalidArtifactError,
    ObjectNotFoundError,
    PreconditionFailedError,
    describe,
)
from .records import ChunkerParams, ChunkRef, Manifest

DEFAULT_CHUNKER = ChunkerParams(avg_size=128 << 10, min_size=32 << 10, max_size=512 << 10)
#: A pack is uploaded once it holds this many sealed bytes.
PACK_TARGET = 16 << 20
#: Writes hand chunks to the pool in batches of about this many bytes.
_BATCH = 1 << 20
#: Reads fetch contiguous chunks of one pack in ranges of at most this many bytes.
READ_SPAN = 4 << 20

Source = bytes | memoryview | BinaryIO


@dataclass
class WriteStats:
    """What one commit moved; benchmarks and the CLI report these."""

    chunks: int = 0
    bytes_in: int = 0
    #: chunks sealed and uploaded in this commit, and their sealed bytes
    uploaded_chunks: int = 0
    uploaded_bytes: int = 0
    packs: int = 0
    #: chunks whose stored copy was reused (the parent's, or an earlier one in this commit)
    reused_chunks: int = 0


class _Prepared(NamedTuple):
    id: str
    size: int
    flag: int
    payload: bytes | memoryview | None  # None when a stored copy is known
    #: the stored copy, when the guided cut found the parent's chunk in place
    reused: ChunkRef | None = None


class Upload:
    """The writes of one commit. Chunks of every artifact share packs; ``finish()`` must return
    before the commit record is written, because the record may name any of these packs."""

    def __init__(self, blobs: BlobStore, known: Mapping[str, ChunkRef]) -> None:
        self.blobs = blobs
        self.stats = WriteStats()
        self._known = dict(known)
        self._pack_id = ""
        self._sealer: Sealer | None = None
        self._pack: bytearray | None = None
        self._pack_size = 0
        self._uploads: deque[Future[None]] = deque()
        #: ids of the packs this upload created (a repack never copies out of these)
        self.created: set[str] = set()

    def write(
        self, source: Source, *, consumed: Callable[[int], None] | None = None, previous: Manifest | None = None
    ) -> Manifest:
        """Store ``source``; ``consumed(n)`` is told when its first ``n`` bytes are no longer needed.
        ``previous`` (the same artifact in the parent checkpoint) guides the cut of an in-memory or
        mapped source: its chunks still in place are only hashed, not chunked again."""
        chunker = self.blobs.chunker()
        pieces: Iterable[bytes | memoryview | ChunkRef]
        if isinstance(source, bytes | memoryview) and previous is not None and previous.chunks:
            pieces = _guided.cut(
                memoryview(source),
                chunker,
                previous.chunks,
                self.blobs.cipher.content_id,
                self.blobs.pool,
                self.blobs.max_inflight,
            )
        elif isinstance(source, bytes | memoryview):
            view = memoryview(source)
            pieces = (view[c.offset : c.offset + c.length] for c in chunker.cut_buf(view))
        else:
            # cut_stream reuses its buffer for the next chunk, so each chunk is copied out.
            pieces = (bytes(c.data) for c in chunker.cut_stream(source))
        pool, depth = self.blobs.pool, self.blobs.max_inflight
        # Chunks go to the pool in batches of about _BATCH bytes: one future and one GIL hand-off
        # per batch instead of per chunk. At most ``depth`` batches are in flight.
        inflight: deque[Future[list[_Prepared]]] = deque()
        refs: list[ChunkRef] = []
        size = 0
        placed = 0
        batch: list[bytes | memoryview | ChunkRef] = []
        batch_bytes = 0

        def place_oldest() -> None:
            nonlocal placed
            for prepared in inflight.popleft().result():
                refs.append(self._place(prepared))
                placed += prepared.size
            if consumed is not None:
                consumed(placed)

        try:
            for piece in pieces:
                length = piece.size if isinstance(piece, ChunkRef) else len(piece)
                size += length
                batch.append(piece)
                batch_bytes += length
                if batch_bytes >= _BATCH:
                    inflight.append(pool.submit(self._prepare_batch, batch))
                    batch, batch_bytes = [], 0
                    while len(inflight) >= depth:
                        place_oldest()
            if batch:
                inflight.append(pool.submit(self._prepare_batch, batch))
            while inflight:
                place_oldest()
        finally:
            for fut in inflight:
                fut.cancel()
        self.stats.chunks += len(refs)
        self.stats.bytes_in += size
        return Manifest(size=size, chunks=tuple(refs))

    def _prepare_batch(self, pieces: list[bytes | memoryview | ChunkRef]) -> list[_Prepared]:
        return [_Prepared(p.id, p.size, codec.RAW, None, p) if isinstance(p, ChunkRef) else self._prepare(p) for p in pieces]

    def _prepare(self, data: bytes | memoryview) -> _Prepared:
        """On a pool thread: hash, and seal unless a stored copy is already known."""
        chunk_id = self.blobs.cipher.content_id(data)
        if chunk_id in self._known:
            return _Prepared(chunk_id, len(data), codec.RAW, None)
        flag, payload = codec.compress(data)
        return _Prepared(chunk_id, len(data), flag, payload)

    def _place(self, prepared: _Prepared) -> ChunkRef:
        """On the caller's thread, in stream order: reuse a known location, or seal the chunk
        straight into the current pack buffer (no intermediate copy)."""
        known = prepared.reused or self._known.get(prepared.id)
        if known is not None:
            self.stats.reused_chunks += 1
            return known
        assert prepared.payload is not None  # set whenever the id was unknown at prepare time
        length = sealed_size(len(prepared.payload))
        out, ref = self._reserve(prepared.id, prepared.size, length)
        assert self._sealer is not None
        self.blobs.cipher.seal_into("blob", prepared.id, prepared.payload, prepared.flag, out, self._sealer)
        return self._placed(ref)

    def copy_sealed(self, ref: ChunkRef, sealed: bytes | memoryview) -> ChunkRef:
        """Place a chunk's sealed bytes, as stored in another pack, into this upload's pack (a
        repack). Sealing binds a chunk to its id, not to its pack, so the bytes move unchanged; the
        caller has verified them."""
        out, moved = self._reserve(ref.id, ref.size, len(sealed))
        out[:] = sealed
        return self._placed(moved)

    def _reserve(self, chunk_id: str, size: int, length: int) -> tuple[memoryview, ChunkRef]:
        if self._pack is None or self._sealer is None:
            self._pack_id, self._pack = secrets.token_hex(32), self.blobs.take_buffer()
            self._sealer = self.blobs.cipher.sealer()
            self.created.add(self._pack_id)
        offset = self._pack_size
        ref = ChunkRef(id=chunk_id, size=size, pack=self._pack_id, offset=offset, length=length)
        return memoryview(self._pack)[offset : offset + length], ref

    def _placed(self, ref: ChunkRef) -> ChunkRef:
        assert ref.length is not None
        self._pack_size += ref.length
        self._known[ref.id] = ref
        self.stats.uploaded_chunks += 1
        self.stats.uploaded_bytes += ref.length
        if self._pack_size >= PACK_TARGET:
            self._flush()
        return ref

    def _flush(self) -> None:
        if self._pack is None:
            return
        key, buffer, size = pack_key(BlobId(self._pack_id)), self._pack, self._pack_size
        self._pack_id, self._pack, self._pack_size = "", None, 0
        self.stats.packs += 1
        self._uploads.append(self.blobs.pool.submit(self.blobs.put_pack, key, buffer, size))
        while len(self._uploads) > 2:  # bound memory: at most two packs on the wire
            self._uploads.popleft().result()

    def finish(self) -> None:
        """Upload the last pack and wait until every pack of this commit is stored."""
        self._flush()
        while self._uploads:
            self._uploads.popleft().result()

    def abort(self) -> None:
        for fut in self._uploads:
            fut.cancel()
        self._uploads.clear()
        if self._pack is not None:
            self.blobs.give_buffer(self._pack)
            self._pack = None


class _Span(NamedTuple):
    """One read: a byte range of one object holding consecutive chunks."""

    key: str
    start: int
    end: int | None  # None: the whole object (a format-1 standalone blob)
    refs: tuple[ChunkRef, ...]


def stored_at(ref: ChunkRef) -> str:
    """The object holding a chunk: its pack, or (format 1) its own blob. Ids are checked again
    before they become keys."""
    if ref.pack is not None:
        return pack_key(BlobId(check_blob_id(ref.pack)))
    return blob_key(BlobId(check_blob_id(ref.id)))


class BlobStore:
    def __init__(
        self,
        backend: Backend,
        cipher: Cipher,
        params: ChunkerParams,
        pool: ThreadPoolExecutor,
        *,
        max_inflight: int = 8,
    ) -> None:
        self.backend = backend
        self.cipher = cipher
        self.params = params
        self.pool = pool
        self.max_inflight = max(2, max_inflight)
        # Pack buffers are reused: fresh memory costs page faults on every byte.
        self._buffers: list[bytearray] = []
        self._buffers_lock = threading.Lock()
        self._local = threading.local()
        #: pack key -> size; packs never change, so what this process wrote or asked once stays true
        self.pack_sizes: dict[str, int] = {}

    def take_buffer(self) -> bytearray:
        with self._buffers_lock:
            if self._buffers:
                return self._buffers.pop()
        return bytearray(PACK_TARGET + sealed_size(self.params.max_size))

    def give_buffer(self, buffer: bytearray) -> None:
        with self._buffers_lock:
            if len(self._buffers) < 4:
                self._buffers.append(buffer)

    def chunker(self) -> FastCDC:
        p = self.params
        return FastCDC(p.avg_size, min_size=p.min_size, max_size=p.max_size, seed=self.cipher.chunker_seed)

    def begin(self, known: Mapping[str, ChunkRef] | None = None) -> Upload:
        """Start the writes of one commit; ``known`` maps chunk ids to stored copies to reuse."""
        return Upload(self, known or {})

    def put_pack(self, key: str, buffer: bytearray, size: int) -> None:
        data = memoryview(buffer)[:size]
        try:
            self.backend.put(key, data, mode="create")  # a landed retry of ours is success (backends/_retry.py)
        except PreconditionFailedError:
            # Pack ids are 256 random bits: another pack at this key is not a race, it is damage.
            raise IntegrityError(f"{key} already holds another pack (a pack id collision)", key=key) from None
        finally:
            data.release()
        self.pack_sizes[key] = size
        self.give_buffer(buffer)
        _boundaries.reached("mid-upload", key)

    # -- reading -----------------------------------------------------------------------------

    def check_stored(self, manifests: Mapping[str, Manifest], *, where: str, read: bool = False) -> None:
        """Every object the manifests need exists and is long enough (one HEAD per pack, in
        parallel); with ``read``, every chunk is also fetched and verified."""
        if read:
            for manifest in manifests.values():
                for _ in self.iter_chunks(manifest):
                    pass
            return
        needed: dict[str, tuple[int, str]] = {}  # key -> (bytes needed, an artifact that needs them)
        for name, manifest in manifests.items():
            for ref in manifest.chunks:
                key = stored_at(ref)
                end = ref.offset + (ref.length or ENVELOPE_OVERHEAD)
                if end > needed.get(key, (0, ""))[0]:
                    needed[key] = (end, name)
        for (key, (end, name)), info in zip(needed.items(), self.pool.map(self.backend.head, needed), strict=True):
            if info is None:
                raise IntegrityError(f"{where}: artifact {name!r} needs {key}, which is missing; {DAMAGE_FIX}", key=key)
            if info.size < end:
                raise IntegrityError(
                    f"{where}: artifact {name!r} needs {end} bytes of {key}, which holds {info.size} (truncated); "
                    f"{DAMAGE_FIX}",
                    key=key,
                )

    def _spans(self, chunks: Iterable[ChunkRef]) -> Iterator[_Span]:
        """Group consecutive chunks that lie back to back in one pack into range reads."""
        group: list[ChunkRef] = []
        for ref in chunks:
            if ref.pack is None:  # format 1: one chunk per object, read whole
                if group:
                    yield self._span(group)
                    group = []
                yield _Span(stored_at(ref), 0, None, (ref,))
                continue
            if group:
                last = group[-1]
                contiguous = last.pack == ref.pack and last.offset + (last.length or 0) == ref.offset
                if not contiguous or ref.offset + (ref.length or 0) - group[0].offset > READ_SPAN:
                    yield self._span(group)
                    group = []
            group.append(ref)
        if group:
            yield self._span(group)

    @staticmethod
    def _span(group: list[ChunkRef]) -> _Span:
        first, last = group[0], group[-1]
        return _Span(stored_at(first), first.offset, last.offset + (last.length or 0), tuple(group))

    def _fetch(self, span: _Span) -> memoryview:
        """The sealed bytes of a span; a range read goes into a buffer this thread reuses (a fresh
        4 MiB object per span costs a page fault per 4 KiB, most of a restore's system time)."""
        try:
            if span.end is None:
                return memoryview(self.backend.get(span.key).data)
            data = self._thread_buffer("read", span.end - span.start)
            data = data[: self.backend.get_range_into(span.key, span.start, data)]
        except ObjectNotFoundError:
            raise IntegrityError(
                f"{span.key} is missing from the store, and a checkpoint needs it; {DAMAGE_FIX}", key=span.key
            ) from None
        if len(data) != span.end - span.start:
            raise IntegrityError(f"{span.key} is shorter than a checkpoint says (truncated)", key=span.key)
        return data

    def _sealed_chunks(self, span: _Span) -> Iterator[tuple[ChunkRef, memoryview]]:
        data = self._fetch(span)
        for ref in span.refs:
            start = ref.offset - span.start
            yield ref, data if span.end is None else data[start : start + (ref.length or 0)]

    def _read_span(self, span: _Span) -> list[bytes]:
        return [bytes(self._open_chunk(ref, sealed, span.key)) for ref, sealed in self._sealed_chunks(span)]

    def _thread_buffer(self, name: str, size: int) -> memoryview:
        buffer: bytearray | None = getattr(self._local, name, None)
        if buffer is None or len(buffer) < size:
            buffer = bytearray(max(size, READ_SPAN))
            setattr(self._local, name, buffer)
        return memoryview(buffer)[:size]

    def _open_chunk(
        self, ref: ChunkRef, sealed: bytes | memoryview, key: str, out: memoryview | None = None
    ) -> bytes | memoryview:
        """The verified plaintext of one chunk; with ``out``, possibly a view of ``out``."""
        chunk_id = check_blob_id(ref.id)
        payload: bytes | memoryview
        if out is None:
            flag, payload = self.cipher.open("blob", chunk_id, sealed, key=key)
        else:
            flag, payload = self.cipher.open_into("blob", chunk_id, sealed, out, key=key)
        data = codec.decompress(flag, payload, limit=ref.size, where=key)
        if len(data) != ref.size or self.cipher.content_id(data) != chunk_id:
            raise IntegrityError(f"chunk {chunk_id} in {key} does not hash to its id", key=key)
        return data

    def _spans_in_order(self, manifest: Manifest) -> Iterator[list[bytes]]:
        pending: deque[Future[list[bytes]]] = deque()
        try:
            for span in self._spans(manifest.chunks):
                pending.append(self.pool.submit(self._read_span, span))
                if len(pending) >= self.max_inflight:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for fut in pending:
                fut.cancel()

    def iter_chunks(self, manifest: Manifest) -> Iterator[bytes]:
        """The manifest's chunks in order, verified, fetched ahead on the pool."""
        for chunks in self._spans_in_order(manifest):
            yield from chunks

    def read_all(self, manifest: Manifest) -> bytes:
        return b"".join(self.iter_chunks(manifest))

    def open(self, manifest: Manifest) -> io.BufferedReader:
        return io.BufferedReader(_ChunkReader(self.iter_chunks(manifest), manifest.size), buffer_size=1 << 20)

    def read_into(self, manifest: Manifest, fd: int) -> None:
        """Write the manifest's bytes into file ``fd`` at their offsets, fetching, verifying and
        writing spans in parallel on the pool (the caller's thread only schedules)."""
        pending: deque[Future[None]] = deque()
        offset = 0
        try:
            for span in self._spans(manifest.chunks):
                pending.append(self.pool.submit(self._write_span, span, fd, offset))
                offset += sum(ref.size for ref in span.refs)
                while len(pending) >= self.max_inflight:
                    pending.popleft().result()
            while pending:
                pending.popleft().result()
        finally:
            for fut in pending:
                fut.cancel()

    def _write_span(self, span: _Span, fd: int, offset: int) -> None:
        for ref, sealed in self._sealed_chunks(span):
            out = self._thread_buffer("plain", len(sealed))
            view = memoryview(self._open_chunk(ref, sealed, span.key, out))
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written


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


class Opened(NamedTuple):
    """An artifact value ready for :meth:`Upload.write`, and how to release it."""

    source: Source
    close: Callable[[], None]
    consumed: Callable[[int], None] | None = None
    #: Raises InvalidArtifactError if the source changed while it was being stored.
    check_unchanged: Callable[[], None] = lambda: None


def open_source(value: object) -> Opened:
    """Bytes as they are; a path memory-mapped (no copy into Python); a binary file streamed.

    Anything else is InvalidArtifactError, raised before anything is stored: a path that is
    missing, a directory, not a regular file or unreadable (``.path`` names it), a file opened in
    text mode or closed, and a stream whose reads fail or return something other than bytes.
    """
    if isinstance(value, bytes):
        return Opened(value, _nothing)
    if isinstance(value, bytearray):
        return Opened(bytes(value), _nothing)
    if isinstance(value, memoryview):
        return Opened(_byte_view(value), _nothing)
    if isinstance(value, str | os.PathLike):
        return _open_path(value)
    if isinstance(value, io.TextIOBase):
        raise InvalidArtifactError(
            "an artifact file must be opened in binary mode: open(path, 'rb'), not 'r' (or pass the path itself)"
        )
    if isinstance(value, io.IOBase) or hasattr(value, "readinto") or hasattr(value, "read"):
        return Opened(cast(BinaryIO, _CheckedStream(value)), _nothing)
    raise InvalidArtifactError(
        f"an artifact must be bytes, a path or a binary file opened for reading, not {type(value).__name__} "
        "(for an array or another buffer, pass memoryview(x); None drops the artifact)"
    )


def _byte_view(view: memoryview) -> memoryview:
    """A flat view of bytes: chunk offsets count bytes, not the items of a typed view."""
    try:
        if view.format == "B" and view.ndim == 1 and view.c_contiguous:
            return view
        return view.cast("B")
    except (TypeError, ValueError, BufferError) as exc:  # released, or not contiguous
        raise InvalidArtifactError(f"cannot read this memoryview as bytes ({exc}); pass bytes(view)") from None


_NOT_A_FILE = "give the path of a regular file, or open the file and pass the binary file object"


def _open_path(value: str | os.PathLike[str]) -> Opened:
    try:
        raw = os.fspath(value)
        name = os.fsdecode(raw)
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it changes nothing for regular files.
        fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArtifactError(_path_problem(os.fsdecode(raw), exc), path=os.fsdecode(raw)) from None
    except (TypeError, ValueError) as exc:  # a NUL byte, a lone surrogate, a bad __fspath__
        shown = describe(value)
        raise InvalidArtifactError(f"artifact path {shown} is not a usable path ({exc}); fix the path", path=shown) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InvalidArtifactError(
                f"artifact path {name!r} is a directory; pass a file (archive a directory first, e.g. with tarfile)",
                path=name,
            )
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArtifactError(f"artifact path {name!r} is not a regular file; {_NOT_A_FILE}", path=name)
    except BaseException:
        os.close(fd)
        raise
    fh = os.fdopen(fd, "rb")
    try:
        if st.st_size < (1 << 20):
            data = fh.read()
            fh.close()
            return Opened(data, _nothing)
        try:
            mapped = _MappedFile(fh, name)
        except (OSError, ValueError):  # a filesystem that cannot map files: stream it instead
            return Opened(cast(BinaryIO, _CheckedStream(fh, name=name)), fh.close)
        return Opened(mapped.view, mapped.close, mapped.consumed, mapped.check_unchanged)
    except OSError as exc:
        fh.close()
        raise InvalidArtifactError(_path_problem(name, exc), path=name) from None


def _path_problem(name: str, exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return f"artifact path {name!r} does not exist (relative paths start at {os.getcwd()}); check the path"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"artifact path {name!r} cannot be read (permission denied); fix its permissions"
    if exc.errno == errno.ENOTDIR:
        return f"artifact path {name!r}: a part of it is a file, not a directory; check the path"
    return f"artifact path {name!r} cannot be read ({exc.strerror or exc}); {_NOT_A_FILE}"


class _CheckedStream:
    """A caller's binary file, read through ``readinto``, whose failures are InvalidArtifactError:
    a closed file, one opened for writing, an I/O error, a read that returns text."""

    def __init__(self, stream: object, *, name: str | None = None) -> None:
        self._name = name or type(stream).__name__
        if getattr(stream, "closed", False) is True:
            raise InvalidArtifactError(f"artifact file {self._name} is closed; pass an open binary file")
        readable = getattr(stream, "readable", None)
        try:
            ok = bool(readable()) if callable(readable) else True
        except (OSError, ValueError):
            ok = False
        if not ok:
            raise InvalidArtifactError(f"artifact file {self._name} is not open for reading; open it with 'rb'")
        readinto = getattr(stream, "readinto", None)
        self._readinto: Callable[[memoryview], object] | None = readinto if callable(readinto) else None
        read = getattr(stream, "read", None)
        self._read: Callable[[int], object] | None = read if callable(read) else None
        if self._readinto is None and self._read is None:
            raise InvalidArtifactError(f"artifact file {self._name} has no read or readinto method")

    def readinto(self, buffer: memoryview) -> int:
        try:
            if self._readinto is not None:
                n = self._readinto(buffer)
                if isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= len(buffer):
                    return n
                raise InvalidArtifactError(f"artifact file {self._name}: readinto returned {n!r}, not a byte count")
            assert self._read is not None
            data = self._read(len(buffer))
            if not isinstance(data, bytes | bytearray | memoryview):
                raise InvalidArtifactError(
                    f"artifact file {self._name} returned {type(data).__name__}, not bytes; open it in binary mode ('rb')"
                )
            n = len(data)
            if n > len(buffer):
                raise InvalidArtifactError(f"artifact file {self._name} returned more bytes than asked for")
            buffer[:n] = data
            return n
        except (OSError, ValueError, TypeError) as exc:
            if isinstance(exc, InvalidArtifactError):
                raise
            raise InvalidArtifactError(
                f"reading artifact file {self._name} failed ({type(exc).__name__}: {exc}); nothing was committed. "
                "Pass an open binary file (mode 'rb'), a path or bytes."
            ) from exc


class _MappedFile:
    """A file mapped read-only. Pages already chunked are dropped from this process, so a file
    larger than memory does not count toward its resident set."""

    def __init__(self, fh: BinaryIO, name: str) -> None:
        self._fh = fh
        self._name = name
        self._stamp = self._stat()
        self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.view = memoryview(self._map)
        self._released = 0

    def _stat(self) -> tuple[int, int]:
        st = os.fstat(self._fh.fileno())
        return st.st_size, st.st_mtime_ns

    def check_unchanged(self) -> None:
        # A file written to while it is chunked would store chunks that fail verification on
        # read: refuse the commit now rather than commit a checkpoint that cannot be restored.
        if self._stat() != self._stamp:
            raise InvalidArtifactError(
                f"{self._name} changed while it was being checkpointed; nothing was committed. "
                "Checkpoint a file only once its writer has finished with it (or pass a copy)."
            )

    def consumed(self, upto: int) -> None:
        end = upto - upto % mmap.PAGESIZE
        if end > self._released:
            self._map.madvise(mmap.MADV_DONTNEED, self._released, end - self._released)
            self._released = end

    def close(self) -> None:
        self.view.release()
        # Slices still held by cancelled work keep the map open until they are collected.
        with contextlib.suppress(BufferError):
            self._map.close()
        self._fh.close()


def _nothing() -> None:
    pass
