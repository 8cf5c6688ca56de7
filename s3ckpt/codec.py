"""Bytes on the wire: compression when it helps, encryption always, strict validation on load.

Plaintext inside every envelope starts with one flag byte: 0 raw, 1 zstd. Decompression is bounded
so a hostile object cannot exhaust memory.
"""

from __future__ import annotations

import threading
from typing import TypeVar

import pydantic
import zstandard

from ._names import encode_run_id
from .crypto import Cipher
from .errors import IncompatibleSchemaError, IntegrityError
from .records import RECORD_SCHEMA_VERSION, CommitRecord, HeadPointer

_RAW = b"\x00"
_ZSTD = b"\x01"
#: Compress only when it saves at least this fraction; incompressible data stays raw.
_MIN_SAVING = 0.05
_MAX_RECORD = 256 << 20

_local = threading.local()
_M = TypeVar("_M", CommitRecord, HeadPointer)


def _compressor() -> zstandard.ZstdCompressor:
    # zstd contexts are not thread-safe; one per thread is cheap and avoids a lock.
    comp = getattr(_local, "comp", None)
    if comp is None:
        comp = _local.comp = zstandard.ZstdCompressor(level=3, write_content_size=True)
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "dec", None)
    if dec is None:
        dec = _local.dec = zstandard.ZstdDecompressor()
    return dec


def pack(plain: bytes | memoryview, *, min_size: int = 256) -> bytes:
    if len(plain) >= min_size:
        packed = _compressor().compress(plain)
        if len(packed) <= len(plain) * (1 - _MIN_SAVING):
            return _ZSTD + packed
    return _RAW + bytes(plain)


def unpack(data: bytes, *, limit: int, where: str) -> bytes:
    flag, body = data[:1], data[1:]
    if flag == _RAW:
        return body
    if flag == _ZSTD:
        try:
            params = zstandard.get_frame_parameters(body)
            if params.content_size <= 0 or params.content_size > limit:
                raise IntegrityError(f"{where}: compressed size header {params.content_size} is out of bounds")
            return _decompressor().decompress(body, max_output_size=limit)
        except zstandard.ZstdError as exc:
            raise IntegrityError(f"{where}: corrupt compressed data ({exc})") from None
    raise IntegrityError(f"{where}: unknown encoding flag {flag!r}")


def encode_record(cipher: Cipher, record: CommitRecord) -> bytes:
    plain = pack(record.model_dump_json().encode("utf-8"))
    return cipher.seal("log", f"{encode_run_id(record.run_id)}/{record.seq}", plain)


def _open_record(cipher: Cipher, sealed: bytes, *, segment: str, seq: int, key: str) -> CommitRecord:
    # The associated data names the run by its encoded segment, which is injective, so records of a
    # run with a hashed (undecodable) name can still be opened to learn the run id.
    plain = unpack(cipher.open("log", f"{segment}/{seq}", sealed, key=key), limit=_MAX_RECORD, where=key)
    return _validate(CommitRecord, plain, key)


def decode_record(cipher: Cipher, sealed: bytes, *, run_id: str, seq: int, key: str) -> CommitRecord:
    record = _open_record(cipher, sealed, segment=encode_run_id(run_id), seq=seq, key=key)
    if record.run_id != run_id or record.seq != seq:
        raise IntegrityError(
            f"{key} holds the record of run {record.run_id!r} seq {record.seq}, not run {run_id!r} seq {seq}",
            key=key,
        )
    return record


def peek_run_id(cipher: Cipher, sealed: bytes, *, segment: str, seq: int, key: str) -> str:
    """The run id of a record found under ``runs/<segment>/``, checked against the segment."""
    record = _open_record(cipher, sealed, segment=segment, seq=seq, key=key)
    if encode_run_id(record.run_id) != segment or record.seq != seq:
        raise IntegrityError(f"{key} holds a record of another run", key=key)
    return record.run_id


def encode_head(cipher: Cipher, run_id: str, pointer: HeadPointer) -> bytes:
    return cipher.seal("head", encode_run_id(run_id), _RAW + pointer.model_dump_json().encode("utf-8"))


def decode_head(cipher: Cipher, sealed: bytes, *, run_id: str, key: str) -> HeadPointer:
    plain = unpack(cipher.open("head", encode_run_id(run_id), sealed, key=key), limit=1 << 16, where=key)
    return _validate(HeadPointer, plain, key)


def _validate(model: type[_M], plain: bytes, key: str) -> _M:
    version = _peek_version(plain)
    if version is not None and version > RECORD_SCHEMA_VERSION:
        raise IncompatibleSchemaError(
            f"{key} has schema version {version}, newer than {RECORD_SCHEMA_VERSION} which this s3ckpt "
            "reads; upgrade s3ckpt to read it",
            found=version,
            supported=RECORD_SCHEMA_VERSION,
        )
    try:
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
    return int(digits) if digits.isdigit() else None
