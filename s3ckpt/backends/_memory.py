"""An in-process backend: a dict behind a lock, shared by name within the process.

It checks keys and prefixes on every operation, as the other backends do, so code that passes
its tests does not meet a refusal for the first time on S3 or a local directory.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from ..errors import ObjectNotFoundError, PreconditionFailedError
from ._base import Backend, Capabilities, GetResult, Match, ObjectInfo, PutMode, PutResult, check_key, check_prefix


@dataclass
class _Object:
    data: bytes
    etag: str
    metadata: dict[str, str]
    last_modified: datetime


class _Space:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.objects: dict[str, _Object] = {}
        self.etags = itertools.count(1)


_SPACES: dict[str, _Space] = {}
_SPACES_LOCK = threading.Lock()


class MemoryBackend(Backend):
    """``memory://name``: every MemoryBackend with the same name in one process sees the same data."""

    capabilities = Capabilities(atomic_create=True, compare_and_swap=True, metadata=True)

    def __init__(self, name: str = "default", *, clock: Callable[[], datetime] | None = None) -> None:
        with _SPACES_LOCK:
            self._space = _SPACES.setdefault(name, _Space())
        self.url = f"memory://{name}"
        #: The storage's clock, which stamps ``last_modified`` (tests move it to age objects).
        self.clock = clock or (lambda: datetime.now(UTC))

    def get(self, key: str) -> GetResult:
        check_key(key)
        with self._space.lock:
            obj = self._space.objects.get(key)
        if obj is None:
            raise ObjectNotFoundError(key)
        return GetResult(obj.data, obj.etag, dict(obj.metadata))

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        check_key(key)
        data = bytes(data)
        with self._space.lock:
            current = self._space.objects.get(key)
            if mode == "create" and current is not None:
                raise PreconditionFailedError(key)
            if isinstance(mode, Match) and (current is None or current.etag != mode.etag):
                raise PreconditionFailedError(key)
            etag = f'"{next(self._space.etags)}"'
            self._space.objects[key] = _Object(data, etag, dict(metadata or {}), self.clock())
        return PutResult(etag)

    def head(self, key: str) -> ObjectInfo | None:
        check_key(key)
        with self._space.lock:
            obj = self._space.objects.get(key)
        if obj is None:
            return None
        return ObjectInfo(key, len(obj.data), obj.last_modified, obj.etag)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        with self._space.lock:
            items = sorted((k, o) for k, o in self._space.objects.items() if k.startswith(prefix))
        for key, obj in items:
            yield ObjectInfo(key, len(obj.data), obj.last_modified, obj.etag)

    def list_dirs(self, prefix: str) -> Iterator[str]:
        check_prefix(prefix)
        with self._space.lock:
            keys = [k for k in self._space.objects if k.startswith(prefix)]
        yield from sorted({k[len(prefix) :].split("/", 1)[0] for k in keys if "/" in k[len(prefix) :]})

    def delete(self, key: str) -> None:
        check_key(key)
        with self._space.lock:
            self._space.objects.pop(key, None)

    @staticmethod
    def wipe(name: str) -> None:
        """Forget a named space (for tests)."""
        with _SPACES_LOCK:
            _SPACES.pop(name, None)
