"""Object names: run ids and blob ids become keys that can never escape the store's prefix.

A store names run directories one of two ways (its config's ``run_names``), both injective:
escaped (below), which keeps run ids readable in object keys, or keyed: ``~k`` + the first 40 hex
digits of HMAC-SHA256(a key derived from the master key, run id), which shows nothing of the id to
whoever lists the bucket. ``~k`` never occurs in an escaped name either. Keyed names, like hashed
ones, are decoded by reading the run id from the run's records.

Run ids are escaped into a single path segment: bytes outside ``[A-Za-z0-9_.-]`` become ``~XX``
(upper-case hex of the UTF-8 byte) and a leading dot is always escaped, so "." and ".." cannot
appear. The escape is injective, so every string round-trips. Names longer than the budget keep a
readable prefix and end in ``~h`` plus a SHA-256 of the id; ``~h`` never occurs in an escaped name
(escapes are ``~`` plus two upper-case hex digits), so the two forms cannot collide. Hashed names
cannot be decoded; the run id is then read from the run's records, which carry it authenticated.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import NewType

from .errors import IntegrityError, InvalidRunIdError

BlobId = NewType("BlobId", str)

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_HEX = "0123456789ABCDEF"
# S3 keys are at most 1024 bytes; leave room for the prefix and "runs/.../log/<seq>".
_MAX_SEGMENT = 200
_HASHED_MARK = "~h"
_BLOB_ID = re.compile(r"[0-9a-f]{64}")
_ESCAPED = re.compile(r"(?:[A-Za-z0-9_.-]|~[0-9A-F]{2})*")


def encode_run_id(run_id: str) -> str:
    """Return the single path segment that stands for ``run_id`` in object keys."""
    if not isinstance(run_id, str):
        raise InvalidRunIdError(f"a run id must be a str, not {type(run_id).__name__}")
    if run_id == "":
        raise InvalidRunIdError("a run id must not be empty: pass any non-empty string, e.g. 'order-42'")
    try:
        raw = run_id.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates
        raise InvalidRunIdError(f"run id {run_id!r} is not valid Unicode text: {exc}") from exc
    out: list[str] = []
    for i, byte in enumerate(raw):
        if byte in _SAFE and not (i == 0 and byte == ord(".")):
            out.append(chr(byte))
        else:
            out.append("~" + _HEX[byte >> 4] + _HEX[byte & 15])
    escaped = "".join(out)
    if len(escaped) <= _MAX_SEGMENT:
        return escaped
    digest = hashlib.sha256(raw).hexdigest()
    head = escaped[:100]
    # Never cut an escape in half: drop a trailing partial "~X" or "~".
    cut = head.rfind("~")
    if cut >= len(head) - 2:
        head = head[:cut]
    return head + _HASHED_MARK + digest


def decode_run_id(segment: str) -> str | None:
    """Invert :func:`encode_run_id`; ``None`` for hashed names, which must be read from a record."""
    if _HASHED_MARK in segment:
        return None
    if not _ESCAPED.fullmatch(segment):
        raise IntegrityError(f"not a run directory written by s3ckpt: {segment!r}")
    raw = bytearray()
    i = 0
    while i < len(segment):
        if segment[i] == "~":
            raw.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(segment[i]))
            i += 1
    return raw.decode("utf-8")


def check_blob_id(value: str) -> BlobId:
    """Validate a blob id before it becomes part of a key (dulwich's _get_shafile_path discipline)."""
    if not isinstance(value, str) or not _BLOB_ID.fullmatch(value):
        raise IntegrityError(f"malformed blob id {value!r}: expected 64 lower-case hex digits")
    return BlobId(value)


def blob_key(blob_id: BlobId) -> str:
    return f"blobs/{blob_id[:2]}/{blob_id}"


def pack_key(pack_id: BlobId) -> str:
    return f"packs/{pack_id[:2]}/{pack_id}"


_KEYED_MARK = "~k"


class RunNames:
    """How one store names its runs' objects: escaped, or keyed by ``key``."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key

    @property
    def keyed(self) -> bool:
        return self._key is not None

    def segment(self, run_id: str) -> str:
        escaped = encode_run_id(run_id)  # validates every run id the same way
        if self._key is None:
            return escaped
        return _KEYED_MARK + hmac.new(self._key, run_id.encode("utf-8"), hashlib.sha256).hexdigest()[:40]

    def decode(self, segment: str) -> str | None:
        """The run id of a directory name, or None when it must be read from the run's records."""
        if segment.startswith(_KEYED_MARK):
            return None
        return decode_run_id(segment)

    def prefix(self, run_id: str) -> str:
        return f"runs/{self.segment(run_id)}/"

    def log_key(self, run_id: str, seq: int) -> str:
        return f"{self.prefix(run_id)}log/{seq:020d}"

    def head_key(self, run_id: str) -> str:
        return f"{self.prefix(run_id)}HEAD"


#: The names of a store with readable (escaped) run names: the default.
ESCAPED = RunNames()


def run_prefix(run_id: str) -> str:
    return ESCAPED.prefix(run_id)


def log_key(run_id: str, seq: int) -> str:
    return ESCAPED.log_key(run_id, seq)


def head_key(run_id: str) -> str:
    return ESCAPED.head_key(run_id)


def parse_seq(name: str) -> int | None:
    """The seq of a log object name (``00000000000000000042``), or None for anything else."""
    if len(name) == 20 and name.isdigit() and name.isascii():
        return int(name)
    return None
