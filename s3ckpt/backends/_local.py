"""A local directory: the embedded default. Atomic create by link(2), never exists-then-write.

Every write goes to a temporary file in the target directory, is flushed with fsync, and then
appears under its name in one step: ``link`` for create (fails with EEXIST if another process won)
and ``rename`` for overwrite. A reader never sees a partial object. Compare-and-swap holds an
``flock`` on a lock file beside the object, which serialises writers across processes on one host.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

from ..errors import ConfigurationError, ObjectNotFoundError, PreconditionFailedError
from ._base import Backend, Capabilities, GetResult, Match, ObjectInfo, PutMode, PutResult, check_key

_TMP = ".tmp-"
_LOCK = ".lock-"


def _etag(st: os.stat_result) -> str:
    # A rename gives a new inode, so any replacement changes the etag even within one mtime tick.
    return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


class LocalBackend(Backend):
    capabilities = Capabilities(atomic_create=True, compare_and_swap=True, metadata=False)

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = self.root.as_uri()
        self._fsync = fsync
        if self.root.exists() and not self.root.is_dir():
            raise ConfigurationError(f"{self.root} exists and is not a directory; choose another path")

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def get(self, key: str) -> GetResult:
        path = self._path(key)
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                return GetResult(fh.read(), _etag(st))
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFoundError(key) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        buffer = bytearray(length)
        return bytes(buffer[: self.get_range_into(key, start, memoryview(buffer))])

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFoundError(key) from None
        try:
            done = 0
            while done < len(out):
                n = os.preadv(fd, [out[done:]], start + done)
                if n == 0:
                    break
                done += n
            return done
        finally:
            os.close(fd)

    def _write_temp(self, path: Path, data: bytes | bytearray | memoryview) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f"{_TMP}{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self._fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        return tmp

    def _sync_dir(self, directory: Path) -> None:
        if not self._fsync:
            return
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        path = self._path(key)
        if mode == "create" and path.exists():
            # Cheap early answer for dedupe hits; link(2) below is still the real check.
            raise PreconditionFailedError(key)
        tmp = self._write_temp(path, data)
        try:
            if mode == "create":
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise PreconditionFailedError(key) from None
            elif isinstance(mode, Match):
                with self._locked(path):
                    try:
                        current = _etag(path.stat())
                    except FileNotFoundError:
                        raise PreconditionFailedError(key) from None
                    if current != mode.etag:
                        raise PreconditionFailedError(key)
                    os.replace(tmp, path)
            else:
                with self._locked(path):
                    os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self._sync_dir(path.parent)
        return PutResult(_etag(path.stat()))

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        fd = os.open(path.parent / f"{_LOCK}{path.name}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC), _etag(st))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        base = prefix.rpartition("/")[0]
        start = self._path(base) if base else self.root
        if not start.is_dir():
            return
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.startswith("."):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if not key.startswith(prefix):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(os.path.join(dirpath, name))
                    found.append(ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC), _etag(st)))
        found.sort(key=lambda info: info.key)
        yield from found

    def list_dirs(self, prefix: str) -> Iterator[str]:
        directory = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        try:
            names = sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))
        except FileNotFoundError:
            return
        yield from names

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
        (path.parent / f"{_LOCK}{path.name}").unlink(missing_ok=True)
