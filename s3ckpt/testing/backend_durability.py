"""Whether a backend that keeps objects as files makes the directories it creates durable: the
fsync calls are observed as they pass through to the real ones (a test cannot cut power)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..backends import Backend, LocalBackend


@dataclass
class _Syscalls:
    """mkdir and fsync as they happened, in order, with the path each fsync'd descriptor names."""

    events: list[tuple[str, Path]]
    paths: dict[int, Path]


def _observe(monkeypatch: pytest.MonkeyPatch) -> _Syscalls:
    seen = _Syscalls([], {})
    real_open, real_mkdir, real_fsync = os.open, os.mkdir, os.fsync

    def observed_open(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        seen.paths[fd] = Path(os.fspath(path))
        return fd

    def observed_mkdir(path: str | os.PathLike[str], *args: int, **kwargs: int) -> None:
        real_mkdir(path, *args, **kwargs)
        seen.events.append(("mkdir", Path(os.fspath(path))))

    def observed_fsync(fd: int) -> None:
        real_fsync(fd)
        seen.events.append(("fsync", seen.paths.get(fd, Path("<not opened by os.open>"))))

    monkeypatch.setattr(os, "open", observed_open)
    monkeypatch.setattr(os, "mkdir", observed_mkdir)
    monkeypatch.setattr(os, "fsync", observed_fsync)
    return seen


def _synced_after_creation(events: list[tuple[str, Path]]) -> dict[Path, bool]:
    """For each directory created: was its parent fsynced after the mkdir?"""
    result: dict[Path, bool] = {}
    for index, (kind, path) in enumerate(events):
        if kind == "mkdir":
            result[path] = ("fsync", path.parent) in events[index + 1 :]
    return result


def check_directory_durability(backend: Backend, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A store root under directories that do not exist yet: every level is the backend's to make.
    nested = root.parent / "not" / "yet" / root.name
    fresh = LocalBackend(nested)
    seen = _observe(monkeypatch)
    keys = ["config", "keys/k1", "runs/r/log/0000000001", "packs/ab/pack-1", "runs/r/log/0000000002"]
    for key in keys:
        before = len(seen.events)
        fresh.put(key, b"data", mode="create")
        during = seen.events[before:]
        target = nested.joinpath(*key.split("/"))
        created = _synced_after_creation(during)
        assert all(created.values()), f"put {key}: directories created without their parent fsynced: {created}"
        # The object's own directory is synced after the object appeared in it.
        assert during[-1] == ("fsync", target.parent), f"put {key}: last fsync {during[-1]}"
    made = [path for kind, path in seen.events if kind == "mkdir"]
    expected = {
        root.parent / "not",
        root.parent / "not" / "yet",
        nested,
        nested / "keys",
        nested / "runs",
        nested / "runs" / "r",
        nested / "runs" / "r" / "log",
        nested / "packs",
        nested / "packs" / "ab",
    }
    assert set(made) == expected, f"mkdir calls: {made}"
    assert len(made) == len(expected), "no directory is made twice by one backend object"

    # A second object on the same store, as another process would be: directories of the store
    # that it finds already made are synced the first time it writes into them, and only then.
    other = LocalBackend(nested)
    before = len(seen.events)
    other.put("runs/r/log/0000000003", b"data", mode="create")
    synced = {path for kind, path in seen.events[before:] if kind == "fsync"}
    assert {nested, nested / "runs", nested / "runs" / "r", nested / "runs" / "r" / "log"} <= synced
    before = len(seen.events)
    other.put("runs/r/log/0000000004", b"data", mode="create")
    synced_again = [path for kind, path in seen.events[before:] if kind == "fsync"]
    assert nested / "runs" not in synced_again
    assert nested not in synced_again

    # fsync=False means no fsync at all (tests and benchmarks).
    quiet = LocalBackend(root.parent / "quiet" / "store", fsync=False)
    before = len(seen.events)
    quiet.put("runs/q/log/1", b"data", mode="create")
    quiet.put("packs/cd/pack", b"data")
    assert [kind for kind, _ in seen.events[before:] if kind == "fsync"] == []
    assert quiet.get("runs/q/log/1").data == b"data"
