"""The backend contract: a dozen methods over flat keys, with capabilities declared, not faked.

Vocabulary follows obspec's conditional put: ``mode`` is ``"overwrite"``, ``"create"`` (create if
absent, atomically) or ``Match(etag)`` (compare-and-swap). A backend that cannot do an operation
atomically says so through :class:`Capabilities`, and callers that need it refuse to run.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ..errors import BackendError


@dataclass(frozen=True)
class Match:
    """Write only if the object's current etag equals ``etag`` (compare-and-swap)."""

    etag: str


PutMode = Literal["overwrite", "create"] | Match


@dataclass(frozen=True)
class PutResult:
    etag: str | None = None


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: datetime
    etag: str | None = None


@dataclass(frozen=True)
class GetResult:
    data: bytes
    etag: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    #: ``put(mode="create")`` is atomic across processes and hosts: exactly one creator wins.
    atomic_create: bool
    #: ``put(mode=Match(etag))`` is a real compare-and-swap.
    compare_and_swap: bool
    #: ``put(metadata=...)`` is stored and returned by ``get``.
    metadata: bool


def check_key(key: str) -> str:
    """Refuse keys that a filesystem (or a path-normalising proxy) could resolve outside the prefix."""
    if not key or key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")):
        raise BackendError(f"refusing a key that could escape the store: {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix may be empty or end in ``/``, but may not climb out either."""
    if prefix.startswith("/") or any(part in (".", "..") for part in prefix.split("/")):
        raise BackendError(f"refusing a prefix that could escape the store: {prefix!r}")
    return prefix


class Backend(abc.ABC):
    """Flat key/value object storage under one prefix. Keys use ``/`` and never start with it."""

    capabilities: Capabilities
    #: A URL that names this backend in messages (never contains credentials).
    url: str

    @abc.abstractmethod
    def get(self, key: str) -> GetResult:
        """Return the object; raise ObjectNotFoundError if it does not exist."""

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end of the object). Backends override this
        with a real range read; this fallback reads the whole object."""
        return self.get(key).data[start : start + length]

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        """Read up to ``len(out)`` bytes from ``start`` into ``out``; returns how many were read
        (fewer at the end of the object). Backends that can read into a buffer override this."""
        data = self.get_range(key, start, len(out))
        out[: len(data)] = data
        return len(data)

    @abc.abstractmethod
    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        """Write the object. ``create`` raises PreconditionFailedError if it exists; ``Match``
        raises it if the etag differs or the object is missing. TransientBackendError means the
        write may or may not have landed and is safe to retry."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo | None:
        """Size, age and etag of the object, or None when it does not exist."""

    @abc.abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in lexicographic key order."""

    @abc.abstractmethod
    def list_dirs(self, prefix: str) -> Iterator[str]:
        """The immediate "directory" names below ``prefix`` (which ends with ``/``)."""

    def deleted_keys(self, prefix: str) -> Iterator[str]:
        """Keys under ``prefix`` whose current version is a delete marker (S3 with versioning on);
        backends that keep no history have none to report."""
        return iter(())

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release connections and pools."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
