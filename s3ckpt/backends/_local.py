"""A local directory: the embedded default. Atomic create by link(2), never exists-then-write.

Every write goes to a temporary file in the target directory, is flushed with fsync, and then
appears under its name in one step: ``link`` for create (fails with EEXIST if another process won)
and ``rename`` for overwrite. A reader never sees a partial object. Compare-and-swap holds an
``flock`` on a lock file beside the object, which serialises writers across processes on one host.

Durability covers directories too. A file's name lives in its directory, and that directory's name
in its parent: on ext4, XFS and most other filesystems an fsynced file in a directory whose own
entry was never fsynced can vanish, directory and all, after a power cut. So every directory this
backend creates (the store root and any missing level above it, ``runs/<run>/log/``,
``packs/<aa>/``, ``keys/``) has its parent fsynced right after the mkdir, level by level, before
the write that needed it returns. A directory inside the store that some other process created is
synced the same way the first time this object writes into it (its creator may have died before
syncing). ``fsync=False`` turns every fsync off, for tests and benchmarks that say so.

Errors from the filesystem come out as s3ckpt errors: a missing file or a path through a file is
ObjectNotFoundError on read, permissions are AccessDeniedError, anything else BackendError.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

from ..errors import (
    AccessDeniedError,
    BackendError,
    ConfigurationError,
    ObjectNotFoundError,
    PreconditionFailedError,
    S3ckptError,
    TransientBackendError,
)
from ._base import Backend, Capabilities, GetResult, Match, ObjectInfo, PutMode, PutResult, check_key, check_prefix

_TMP = ".tmp-"
_LOCK = ".lock-"


# Failures a retry can cure (a busy NFS server, a signal); everything else needs a person.
_TRANSIENT_ERRNOS = frozenset(
    getattr(errno, n) for n in ("EAGAIN", "EBUSY", "EINTR", "ETIMEDOUT", "ESTALE") if hasattr(errno, n)
)
_NO_SPACE = frozenset(getattr(errno, n) for n in ("ENOSPC", "EDQUOT") if hasattr(errno, n))


def _etag(st: os.stat_result) -> str:
    # A rename gives a new inode, so any replacement changes the etag even within one mtime tick.
    return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


def _typed(exc: OSError | ValueError, where: str) -> BackendError:
    if isinstance(exc, PermissionError):
        return AccessDeniedError(
            f"{where}: {exc.strerror or exc}; the store directory must be readable and writable by this user"
        )
    if isinstance(exc, ValueError):  # for example a NUL byte in a key
        return BackendError(f"{where}: {exc}")
    if exc.errno in _TRANSIENT_ERRNOS:
        return TransientBackendError(f"{where}: {exc.strerror or exc}; safe to retry")
    if exc.errno in _NO_SPACE:
        return BackendError(f"{where}: {exc.strerror or exc}; free some space on the filesystem and try again")
    if exc.errno == errno.EROFS:
        return BackendError(f"{where}: the filesystem is read-only; open the store on a writable one")
    if isinstance(exc, NotADirectoryError | FileExistsError):
        return BackendError(f"{where}: a file stands where a directory of the store should be ({exc})")
    return BackendError(f"{where} failed: {exc}")


def _raise(exc: OSError) -> None:
    """os.walk's onerror: a directory it cannot read is an error, not an empty directory."""
    if not isinstance(exc, FileNotFoundError | NotADirectoryError):  # removed while we walked
        raise exc


def _holds_object(directory: Path) -> bool:
    """True when an object lies somewhere below ``directory``: an object store knows a "directory"
    only while it holds objects, so a directory emptied by deletes is not one. Stops at the first."""
    pending = [directory]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_file():
                    return True
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
    return False


class LocalBackend(Backend):
    capabilities = Capabilities(atomic_create=True, compare_and_swap=True, metadata=False)

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = self.root.as_uri()
        self._fsync = fsync
        #: Directories this object created or synced (with every level up to the root): writes
        #: into them need no mkdir and no directory fsync beyond the file's own directory.
        self._durable: set[Path] = set()
        with self._errors("", "open"):
            if self.root.exists() and not self.root.is_dir():
                raise ConfigurationError(f"{self.root} exists and is not a directory; choose another path")

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    @contextlib.contextmanager
    def _errors(self, key: str, action: str, *, read: bool = False) -> Iterator[None]:
        """OSErrors as s3ckpt errors; on a read, a missing file, a file where a directory should be
        or a directory where the object should be all mean the object does not exist."""
        try:
            yield
        except S3ckptError:
            raise
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            if read:
                raise ObjectNotFoundError(key) from None
            raise _typed(exc, f"{action} {key} in {self.root}") from exc
        except (OSError, ValueError) as exc:
            raise _typed(exc, f"{action} {key} in {self.root}") from exc

    def get(self, key: str) -> GetResult:
        path = self._path(key)
        with self._errors(key, "get", read=True), open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            return GetResult(fh.read(), _etag(st))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        buffer = bytearray(max(0, length))
        return bytes(buffer[: self.get_range_into(key, start, memoryview(buffer))])

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        path = self._path(key)
        with self._errors(key, "get", read=True):
            fd = os.open(path, os.O_RDONLY)
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

    # -- writing ---------------------------------------------------------------------------------

    def _write_temp(self, path: Path, data: bytes | bytearray | memoryview) -> Path:
        directory = path.parent
        if directory not in self._durable:
            self._make_durable_dir(directory)
        tmp = directory / f"{_TMP}{secrets.token_hex(8)}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileNotFoundError:
            # Someone removed the directory since this object made it: make it (durably) again.
            self._durable.discard(directory)
            self._make_durable_dir(directory)
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

    def _make_durable_dir(self, directory: Path) -> None:
        """Create ``directory`` with any missing level above it, and fsync the parent of every level
        that was created here (or that a concurrent process created as we looked), top down.
        Levels inside the store that existed already are synced once per object too; the store
        root's own entry only when this object (or a racing one) created it, since its parent is
        the user's directory, not ours."""
        levels = [directory, *directory.parents]
        inside = {level for level in levels if level == self.root or self.root in level.parents}
        missing = []
        for level in levels:
            if level.is_dir():
                break
            missing.append(level)
        created = set()
        for level in reversed(missing):
            # FileExistsError: a concurrent writer made it, and its entry may not be on disk yet either.
            with contextlib.suppress(FileExistsError):
                os.mkdir(level)
            created.add(level)
        for level in reversed(levels):
            if level in created or (level in inside and level != self.root and level not in self._durable):
                self._sync_dir(level.parent)
        self._durable.update(inside)

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
        with self._errors(key, "put"):
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

    # -- reading metadata ----------------------------------------------------------------------

    def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        try:
            with self._errors(key, "head", read=True):
                st = path.stat()
        except ObjectNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None  # a directory is a prefix of other keys, not an object
        return ObjectInfo(key, st.st_size, datetime.fromtimestamp(st.st_mtime, UTC), _etag(st))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        base = prefix.rpartition("/")[0]
        start = self._path(base) if base else self.root
        found: list[ObjectInfo] = []
        with self._errors(prefix, "list"):
            if not start.is_dir():
                return
            for dirpath, dirnames, filenames in os.walk(start, onerror=_raise):
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
        check_prefix(prefix)
        directory = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        try:
            with self._errors(prefix, "list", read=True):
                subdirs = [Path(e.path) for e in os.scandir(directory) if e.is_dir() and not e.name.startswith(".")]
        except ObjectNotFoundError:
            return
        # Deleting a run's objects leaves its directories behind; S3 forgets a prefix with its last
        # object, and so does this listing.
        with self._errors(prefix, "list"):
            names = sorted(d.name for d in subdirs if _holds_object(d))
        yield from names

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            with self._errors(key, "delete", read=True):
                if path.is_dir():
                    return  # a prefix of other keys: there is no object to remove
                path.unlink()
        except ObjectNotFoundError:
            return
        with self._errors(key, "delete"):
            (path.parent / f"{_LOCK}{path.name}").unlink(missing_ok=True)
