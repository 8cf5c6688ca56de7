"""Bytes on the wire: compression when it helps, encryption always, strict validation on load.

Plaintext inside every envelope starts with one flag byte: 0 raw, 1 zstd. Decompression is bounded
so a hostile object cannot exhaust memory.
"""

from __future__ import annotations

import json
import threading
from typing import TypeVar, overload

import pydantic
import pydantic_core
import zstandard

from . import values
from .crypto import Cipher
from .errors import IncompatibleSchemaError, IntegrityError, InvalidArtifactError
from .migrations import migrate_record
from .records import HEAD_SCHEMA_VERSION, RECORD_SCHEMA_VERSION, CommitRecord, HeadPointer

#: Payload encodings, named by the envelope's flag byte.
RAW = 0
ZSTD = 1
#: Compress only when it saves at least this fraction; incompressible data stays raw.
_MIN_SAVING = 0.05
_MAX_RECORD = values.MAX_RECORD_BYTES

_local = threading.local()
_M = TypeVar("_M", CommitRecord, HeadPointer)


def _compressor() -> zstandard.ZstdCompressor:
    # Level 1: 2x (text) to 7x (hex-like text) faster than level 3 at about the same ratio on the
    # benchmark data; compression is the largest CPU cost of a save.
    # zstd contexts are not thread-safe; one per thread is cheap and avoids a lock.
    comp = getattr(_local, "comp", None)
    if comp is None:
        comp = _local.comp = zstandard.ZstdCompressor(level=1, write_content_size=True)
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "dec", None)
    if dec is None:
        dec = _local.dec = zstandard.ZstdDecompressor()
    return dec


_SAMPLE = 8 << 10


def compress(plain: bytes | memoryview, *, min_size: int = 256) -> tuple[int, bytes | memoryview]:
    """``(flag, payload)``: zstd when it saves enough, else the input itself (no copy)."""
    if len(plain) >= min_size:
        if len(plain) > 4 * _SAMPLE:
            # Random data (weights, encrypted or compressed files) costs zstd a full pass to
            # discover it is incompressible; a sample from the middle tells almost as well.
            middle = len(plain) // 2
            sample = plain[middle : middle + _SAMPLE]
            if len(_compressor().compress(sample)) > _SAMPLE * (1 - _MIN_SAVING):
                return RAW, plain
        packed = _compressor().compress(plain)
        if len(packed) <= len(plain) * (1 - _MIN_SAVING):
            return ZSTD, packed
    return RAW, plain


@overload
def decompress(flag: int, payload: bytes, *, limit: int, where: str) -> bytes: ...
@overload
def decompress(flag: int, payload: bytes | memoryview, *, limit: int, where: str) -> bytes | memoryview: ...
def decompress(flag: int, payload: bytes | memoryview, *, limit: int, where: str) -> bytes | memoryview:
    """The plaintext of a payload; a raw payload is returned as it is (a view stays a view)."""
    if flag == RAW:
        return payload
    if flag == ZSTD:
        try:
            params = zstandard.get_frame_parameters(payload)
            if params.content_size <= 0 or params.content_size > limit:
                raise IntegrityError(f"{where}: compressed size header {params.content_size} is out of bounds")
            return _decompressor().decompress(payload, max_output_size=limit)
        except zstandard.ZstdError as exc:
            raise IntegrityError(f"{where}: corrupt compressed data ({exc})") from None
    raise IntegrityError(f"{where}: unknown encoding flag {flag}")


def encode_record(cipher: Cipher, record: CommitRecord, *, segment: str) -> bytes:
    """``segment``: the run's directory name (the store's RunNames), bound into the AAD."""
    document = record.model_dump_json().encode("utf-8")
    if len(document) > _MAX_RECORD:
        # Readers refuse records past this size, so the writer refuses to write one.
        raise InvalidArtifactError(
            f"the record of run {record.run_id!r} seq {record.seq} would be {len(document)} bytes, over the limit of "
            f"{_MAX_RECORD} that every reader accepts (very many chunks or artifacts, or a large meta or provenance). "
            "Nothing was committed; split the artifacts across checkpoints or runs, and keep meta small."
        )
    flag, payload = compress(document)
    return cipher.seal("log", f"{segment}/{record.seq}", payload, flag=flag)


def _record_plain(cipher: Cipher, sealed: bytes, *, segment: str, seq: int, key: str) -> bytes:
    # The associated data names the run by its encoded segment, which is injective, so records of a
    # run with a hashed (undecodable) name can still be opened to learn the run id.
    flag, payload = cipher.open("log", f"{segment}/{seq}", sealed, key=key)
    return decompress(flag, payload, limit=_MAX_RECORD, where=key)


def _open_record(cipher: Cipher, sealed: bytes, *, segment: str, seq: int, key: str) -> CommitRecord:
    return _validate(CommitRecord, _record_plain(cipher, sealed, segment=segment, seq=seq, key=key), key)


def record_schema_version(cipher: Cipher, sealed: bytes, *, segment: str, seq: int, key: str) -> int | None:
    """The schema version a stored record declares, without validating the rest (for migrate)."""
    return _peek_version(_record_plain(cipher, sealed, segment=segment, seq=seq, key=key))


def decode_record(cipher: Cipher, sealed: bytes, *, run_id: str, seq: int, key: str, segment: str) -> CommitRecord:
    record = _open_record(cipher, sealed, segment=segment, seq=seq, key=key)
    if record.run_id != run_id or record.seq != seq:
        raise IntegrityError(
            f"{key} holds the record of run {record.run_id!r} seq {record.seq}, not run {run_id!r} seq {seq}",
            key=key,
        )
    return record


def peek_run_id(cipher: Cipher, sealed: bytes, *, segment: str, seq: int, key: str) -> str:
    """The run id of a record found under ``runs/<segment>/`` (the caller checks that the store
    names that run ``segment``)."""
    record = _open_record(cipher, sealed, segment=segment, seq=seq, key=key)
    if record.seq != seq:
        raise IntegrityError(f"{key} holds a record of another seq", key=key)
    return record.run_id


def encode_head(cipher: Cipher, segment: str, pointer: HeadPointer) -> bytes:
    return cipher.seal("head", segment, pointer.model_dump_json().encode("utf-8"), flag=RAW)


def decode_head(cipher: Cipher, sealed: bytes, *, segment: str, key: str) -> HeadPointer:
    flag, payload = cipher.open("head", segment, sealed, key=key)
    plain = decompress(flag, payload, limit=1 << 16, where=key)
    return _validate(HeadPointer, plain, key)


#: Kinds that s3ckpt itself seals; :func:`seal_document` refuses them.
_CORE_KINDS = frozenset({"log", "head", "blob", "config", "keyfile"})
#: The same, for the layers that check a kind before sealing (``Run.put_document``).
CORE_KINDS = _CORE_KINDS


def seal_document(cipher: Cipher, kind: str, name: str, document: bytes) -> bytes:
    """Seal ``document`` (opaque bytes, compressed when that helps) as an object of ``kind`` named
    ``name``: the associated data binds the store, the kind and the name, so the object opens only
    as that kind and name (for objects an integration keeps beside a run's log)."""
    if kind in _CORE_KINDS or not kind:
        raise ValueError(f"seal_document: kind {kind!r} is reserved or empty")
    flag, payload = compress(document)
    return cipher.seal(kind, name, payload, flag=flag)


def open_document(cipher: Cipher, kind: str, name: str, sealed: bytes, *, key: str, limit: int = _MAX_RECORD) -> bytes:
    """The document :func:`seal_document` sealed as ``kind`` and ``name``; IntegrityError if the
    object was sealed as anything else, altered, or decompresses beyond ``limit`` bytes."""
    if kind in _CORE_KINDS or not kind:
        raise ValueError(f"open_document: kind {kind!r} is reserved or empty")
    flag, payload = cipher.open(kind, name, sealed, key=key)
    return bytes(decompress(flag, payload, limit=limit, where=key))


def _validate(model: type[_M], plain: bytes, key: str) -> _M:
    current = RECORD_SCHEMA_VERSION if model is CommitRecord else HEAD_SCHEMA_VERSION
    version = _peek_version(plain)
    if version is not None and version > current:
        raise IncompatibleSchemaError(
            f"{key} has schema version {version}, newer than {current} which this s3ckpt reads; upgrade s3ckpt to read it",
            found=version,
            supported=current,
        )
    try:
        if version is not None and version < current and model is CommitRecord:
            document = pydantic_core.from_json(plain)
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            plain = json.dumps(migrate_record(document, version)).encode()
        return model.model_validate_json(plain)
    except pydantic.ValidationError as exc:
        raise IntegrityError(f"{key} is not a valid {model.__name__}: {exc.errors()[0]['msg']}", key=key) from None
    except (ValueError, RecursionError) as exc:
        raise IntegrityError(f"{key} is not a valid {model.__name__}: {exc}", key=key) from None


def _peek_version(plain: bytes) -> int | None:
    """The schema version, read without trusting the rest of the document."""
    marker = b'"schema_version":'
    at = plain.find(marker)
    if at < 0:
        return None
    digits = plain[at + len(marker) : at + len(marker) + 12].split(b",")[0].split(b"}")[0].strip()
    return int(digits) if digits.isdigit() and len(digits) < 10 else None
