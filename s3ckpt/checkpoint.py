"""The validated, decrypted view of one committed checkpoint."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import socket
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pydantic

from . import values
from .errors import IntegrityError, InvalidArgumentError, LocalPathError, S3ckptError, describe
from .records import CommitRecord, EffectRecord, Ledger, Manifest, StepRecord

if TYPE_CHECKING:
    from .blobs import BlobStore
    from .workflows import VersionChange


class ArtifactNotFoundError(S3ckptError, KeyError):
    """The checkpoint has no artifact of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Checkpoint:
    """One committed checkpoint of a run. ``state`` is already decoded; artifacts stream on demand."""

    def __init__(self, record: CommitRecord, state: Any, blobs: BlobStore, *, ledger: Ledger | None = None) -> None:
        self._record = record
        self._blobs = blobs
        self._ledger = ledger
        self.state = state
        #: Set when the checkpoint was resumed under another workflow version or provenance.
        self.version_change: VersionChange | None = None

    def evolved(self, *, state: Any, change: VersionChange) -> Checkpoint:
        """This checkpoint as seen by code of another version: migrated state, change recorded."""
        out = Checkpoint(self._record, state, self._blobs, ledger=self._ledger)
        out.version_change = change
        return out

    @property
    def run_id(self) -> str:
        return self._record.run_id

    @property
    def seq(self) -> int:
        return self._record.seq

    @property
    def epoch(self) -> int:
        return self._record.epoch

    @property
    def created_at(self) -> datetime:
        return self._record.created_at

    @property
    def schema_version(self) -> int:
        return self._record.schema_version

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self._record.meta)

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self._record.provenance)

    @property
    def artifacts(self) -> dict[str, int]:
        """Artifact names and their sizes in bytes."""
        return {name: manifest.size for name, manifest in self._record.artifacts.items()}

    @property
    def record(self) -> CommitRecord:
        return self._record

    def _manifest(self, name: str) -> Manifest:
        if not isinstance(name, str):
            raise InvalidArgumentError(
                f"an artifact name is a str, not {type(name).__name__}; this checkpoint has: {self._names()}"
            )
        manifest = self._record.artifacts.get(name)
        if manifest is None:
            raise ArtifactNotFoundError(
                f"checkpoint {self.run_id!r}@{self.seq} has no artifact {name!r}; it has: {self._names()}"
            )
        return manifest

    def _names(self) -> str:
        return ", ".join(repr(n) for n in sorted(self._record.artifacts)) or "none"

    def open_artifact(self, name: str) -> BinaryIO:
        """A binary file that streams the artifact, verifying every chunk as it arrives."""
        return self._blobs.open(self._manifest(name))

    def restore_artifact(
        self, name: str, path: str | os.PathLike[str], *, progress: Callable[[int, int], None] | None = None
    ) -> None:
        """Write the artifact to ``path``: chunks are fetched, verified and written in parallel.
        The file appears under ``path`` only when complete (a temporary file next to it,
        ``.<name>.s3ckpt-tmp-<host>-<pid>-<random>``, is renamed over it); it is not fsynced, as a
        restore that a crash interrupts is simply run again, and the next restore to the same path
        removes the temporary files that killed restores left. ``progress(bytes_done, bytes_total)``
        is called as chunks land (from this thread). A path that cannot take the file (a directory,
        a missing parent, no permission, a full disk) is LocalPathError, found before anything is
        downloaded where it can be."""
        manifest = self._manifest(name)
        report = values.callback(progress, "progress")
        target = _restore_target(path)
        shown = str(target)
        remove_stale_temps(target)
        tmp = target.with_name(temp_name(target.name))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LocalPathError(f"cannot restore to {shown!r}: {_os_reason(exc)}", path=shown) from None
        try:
            try:
                os.ftruncate(fd, manifest.size)
                if report is None:
                    self._blobs.read_into(manifest, fd)
                else:
                    self._write_reporting(manifest, fd, report)
            finally:
                os.close(fd)
            os.replace(tmp, target)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError) and not isinstance(exc, S3ckptError):
                raise LocalPathError(f"cannot restore to {shown!r}: {_os_reason(exc)}", path=shown) from exc
            raise

    def _write_reporting(self, manifest: Manifest, fd: int, progress: Callable[[int, int], None]) -> None:
        # Chunks are still fetched and verified ahead on the pool; only the writes are in order here,
        # so that progress counts bytes that are really in the file.
        done = 0
        progress(0, manifest.size)
        for chunk in self._blobs.iter_chunks(manifest):
            view = memoryview(chunk)
            while view:
                written = os.pwrite(fd, view, done)
                view, done = view[written:], done + written
            progress(done, manifest.size)

    def read_artifact(self, name: str) -> bytes:
        with self.open_artifact(name) as fh:
            return fh.read()

    @property
    def ledger(self) -> Ledger:
        """Steps, attempts, effects and budget recorded by sessions (empty for plain commits)."""
        if self._ledger is None:
            manifest = self._record.ledger_manifest
            if manifest is None:
                self._ledger = self._record.ledger or Ledger()
            else:
                try:
                    self._ledger = Ledger.model_validate_json(self._blobs.read_all(manifest))
                except pydantic.ValidationError as exc:
                    raise IntegrityError(f"{self!r}: the stored ledger is not valid: {exc}") from None
        return self._ledger

    @property
    def steps(self) -> dict[str, StepRecord]:
        return dict(self.ledger.steps)

    @property
    def effects(self) -> list[EffectRecord]:
        return list(self.ledger.effects.values())

    @property
    def budget(self) -> dict[str, int | float]:
        return dict(self.ledger.budget)

    def to_dict(self) -> dict[str, Any]:
        """The whole decoded record, with the state and ledger inline even when stored as chunks."""
        out = self._record.model_dump(mode="json", exclude={"state_manifest", "ledger", "ledger_manifest"})
        out["state"] = self.state
        out.update(self.ledger.model_dump(mode="json"))
        return out

    def __repr__(self) -> str:
        return f"Checkpoint(run_id={self.run_id!r}, seq={self.seq}, epoch={self.epoch})"


def _restore_target(path: object) -> Path:
    """``path`` as a file path that a restore can create, checked before anything is downloaded."""
    if not isinstance(path, str | os.PathLike) or path == "":
        raise InvalidArgumentError(f"restore_artifact needs a file path (str or os.PathLike), not {describe(path)}")
    try:
        target = Path(path)
        shown = str(target)
        if "\x00" in shown:
            raise ValueError("embedded null byte")
        os.fsencode(shown)  # a lone surrogate that is no escaped byte
        if target.is_dir():
            raise LocalPathError(
                f"cannot restore to {shown!r}: it is a directory; give a file path such as {str(target / 'artifact')!r}",
                path=shown,
            )
        if target.exists() and not target.is_file():  # a FIFO, a socket, a device: never replaced by a file
            raise LocalPathError(
                f"cannot restore to {shown!r}: it is not a regular file (a FIFO, socket or device); give a file path",
                path=shown,
            )
        parent = target.parent
        if not parent.is_dir():
            why = "does not exist" if not parent.exists() else "is not a directory"
            raise LocalPathError(
                f"cannot restore to {shown!r}: its directory {str(parent)!r} {why}; create it first (mkdir -p)", path=shown
            )
    except (TypeError, ValueError) as exc:  # a NUL byte, a lone surrogate, a bad __fspath__
        raise InvalidArgumentError(f"restore_artifact: {describe(path)} is not a usable path ({exc})") from None
    except OSError as exc:  # a name too long, a loop of symlinks, ...
        raise LocalPathError(f"cannot restore to {describe(path)}: {_os_reason(exc)}", path=describe(path)) from None
    return target


#: Marks a restore's temporary file: ``.<name>.s3ckpt-tmp-<host>-<pid>-<random>``.
TEMP_MARK = ".s3ckpt-tmp-"
#: A temporary file untouched this long is stale whoever wrote it (a host that is gone, a reused pid).
STALE_AFTER = 24 * 3600.0
_TEMP_TAIL = re.compile(r"([0-9a-f]{8})-([0-9]{1,10})-[0-9a-f]{8}")
#: Temporary files of restores before they named their host and pid: only their age tells.
_OLD_TEMP_TAIL = re.compile(r"[0-9a-f]{8}")


def _host_tag() -> str:
    # Short and filename-safe; tells this host's temporary files from those of another host that
    # shares the directory (NFS), whose pids mean nothing here.
    return hashlib.sha256(socket.gethostname().encode("utf-8", "backslashreplace")).hexdigest()[:8]


def temp_name(name: str) -> str:
    """The name of a restore's temporary file for the file ``name``, in the same directory."""
    return f".{name}{TEMP_MARK}{_host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # no cheap probe: age alone decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's
        return True
    return True


def _is_stale(tail: str, mtime: float) -> bool:
    if time.time() - mtime > STALE_AFTER:
        return True
    found = _TEMP_TAIL.fullmatch(tail)
    if found is None:
        return False
    host, pid = found.group(1), int(found.group(2))
    return host == _host_tag() and pid != os.getpid() and not _pid_alive(pid)


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove the temporary files that killed restores to ``target`` left: this host's whose process
    is gone, and any untouched for STALE_AFTER. Best effort: a file that cannot be removed stays."""
    prefixes = (f".{target.name}{TEMP_MARK}", f".{target.name}.s3ckpt-")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    for entry in entries:
        tail = _temp_tail(entry.name, prefixes)
        if tail is None:
            continue
        try:
            if entry.is_file(follow_symlinks=False) and _is_stale(tail, entry.stat(follow_symlinks=False).st_mtime):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue  # gone meanwhile, or not ours to remove
    return removed


def _temp_tail(name: str, prefixes: tuple[str, str]) -> str | None:
    """What follows the prefix in a restore's temporary file name; None for any other file."""
    current, old = prefixes
    if name.startswith(current) and _TEMP_TAIL.fullmatch(name[len(current) :]):
        return name[len(current) :]
    if name.startswith(old) and _OLD_TEMP_TAIL.fullmatch(name[len(old) :]):
        return "old:" + name[len(old) :]  # matches no pattern: age alone decides
    return None


def _os_reason(exc: OSError) -> str:
    fixes = {
        errno.EACCES: "permission denied; choose a path you may write, or fix the permissions",
        errno.EPERM: "permission denied; choose a path you may write, or fix the permissions",
        errno.ENOSPC: "the disk is full; free space or restore elsewhere",
        errno.EDQUOT: "the disk quota is exceeded; free space or restore elsewhere",
        errno.EROFS: "the filesystem is read-only; restore elsewhere",
        errno.EISDIR: "it is a directory; give a file path",
        errno.ENOENT: "its directory does not exist; create it first",
        errno.ENOTDIR: "a part of the path is a file, not a directory; check the path",
        errno.ENAMETOOLONG: "the name is too long; choose a shorter path",
    }
    return fixes.get(exc.errno or 0, f"{exc.strerror or exc}; choose another path")
