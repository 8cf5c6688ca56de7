"""Any fsspec filesystem. Atomic create is claimed only where fsspec's ``xb`` mode is known to be a
real conditional write on the server (s3fs sends If-None-Match); elsewhere the backend says it
cannot create atomically, and commits refuse to run on it rather than risk two writers on one seq.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import fsspec

from ..errors import (
    ObjectNotFoundError,
    PreconditionFailedError,
    UnsupportedBackendError,
)
from ._base import Backend, Capabilities, GetResult, ObjectInfo, PutMode, PutResult, check_key

# Protocols whose open(mode="xb") is a server-side create-if-absent.
_ATOMIC_XB = frozenset({"s3", "s3a"})


def _mtime(info: Mapping[str, Any]) -> datetime:
    for field in ("LastModified", "mtime", "updated", "last_modified", "created"):
        value = info.get(field)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return datetime.fromtimestamp(0, UTC)


class FsspecBackend(Backend):
    def __init__(self, url: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
        fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
        self.fs = fs
        self.root = path.rstrip("/")
        protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
        self.url = url
        self.capabilities = Capabilities(atomic_create=bool(protocols & _ATOMIC_XB), compare_and_swap=False, metadata=False)

    def _p(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def get(self, key: str) -> GetResult:
        try:
            with self.fs.open(self._p(key), "rb") as fh:
                return GetResult(fh.read())
        except FileNotFoundError:
            raise ObjectNotFoundError(key) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._p(key), start=start, end=start + length))
        except FileNotFoundError:
            raise ObjectNotFoundError(key) from None

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        path = self._p(key)
        if mode == "create":
            if not self.capabilities.atomic_create:
                raise UnsupportedBackendError(
                    f"{self.url} cannot create objects atomically, so two writers could both commit "
                    "the same seq. Use s3://, a local directory or memory:// for commits."
                )
            try:
                with self.fs.open(path, "xb") as fh:
                    fh.write(data)
            except FileExistsError:
                raise PreconditionFailedError(key) from None
            return PutResult()
        if mode != "overwrite":
            raise UnsupportedBackendError(f"{self.url} has no compare-and-swap")
        self.fs.pipe_file(path, bytes(data))
        return PutResult()

    def head(self, key: str) -> ObjectInfo | None:
        try:
            info = self.fs.info(self._p(key))
        except FileNotFoundError:
            return None
        return ObjectInfo(key, int(info.get("size") or 0), _mtime(info), info.get("ETag"))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        base = prefix.rpartition("/")[0]
        start = f"{self.root}/{base}" if base else self.root
        try:
            found = self.fs.find(start, detail=True)
        except FileNotFoundError:
            return
        items = []
        for path, info in found.items():
            key = path[len(self.root) + 1 :] if path.startswith(self.root + "/") else path.lstrip("/")
            if key.startswith(prefix) and info.get("type", "file") == "file":
                items.append(ObjectInfo(key, int(info.get("size") or 0), _mtime(info), info.get("ETag")))
        yield from sorted(items, key=lambda i: i.key)

    def list_dirs(self, prefix: str) -> Iterator[str]:
        try:
            entries = self.fs.ls(f"{self.root}/{prefix.rstrip('/')}", detail=True)
        except FileNotFoundError:
            return
        yield from sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._p(key))
