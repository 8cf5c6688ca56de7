"""The local directory backend beyond the conformance suite: directory durability for any layout
of keys, across backend objects and threads; filesystem errors typed. The fsync calls are observed
as they pass through to the real ones; no test can cut the power, so what is checked is that
every fsync a power cut would need happened, in the right order, before the write returned."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3ckpt.backends import LocalBackend
from s3ckpt.errors import AccessDeniedError, BackendError, ConfigurationError, ObjectNotFoundError, S3ckptError
from s3ckpt.testing.backend_durability import _observe, _Syscalls

# Directory names and file names never collide, as in a store ("runs", "log" vs record names).
_DIRS = st.sampled_from(["runs", "packs", "keys", "log", "ab", "cd", "r1", "r2"])
_KEYS = st.builds(
    lambda dirs, leaf: "/".join([*dirs, leaf]),
    st.lists(_DIRS, min_size=0, max_size=4),
    st.sampled_from(["f1", "f2", "f3", "config"]),
)


def _check_put_was_durable(seen: _Syscalls, start: int, end: int, store: Path, key: str) -> None:
    """Every directory on the key's path was created, and then its parent fsynced, before the put
    that wrote below it returned; the object's own directory was fsynced last."""
    events = seen.events
    target = store.joinpath(*key.split("/"))
    levels = [level for level in target.parents if level == store or store in level.parents]
    for level in levels:
        made = [i for i, event in enumerate(events[:end]) if event == ("mkdir", level)]
        assert len(made) == 1, f"{level} made {len(made)} times (observation started with no store)"
        synced = [i for i, event in enumerate(events[:end]) if event == ("fsync", level.parent) and i > made[0]]
        assert synced, f"put {key}: {level} was created, but its parent was not fsynced before the put returned"
    assert ("fsync", target.parent) in events[start:end]
    last_sync = max(i for i in range(start, end) if events[i][0] == "fsync")
    assert events[last_sync] == ("fsync", target.parent)


@settings(max_examples=40, deadline=None)
@given(
    keys=st.lists(_KEYS, min_size=1, max_size=12),
    writers=st.lists(st.integers(0, 2), min_size=12, max_size=12),
)
def test_every_directory_is_durable_before_a_put_into_it_returns(keys: list[str], writers: list[int]) -> None:
    """Any layout of keys, written by up to three backend objects on one store (as processes
    would be), in any interleaving, under a store root whose parents do not exist yet."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        store = Path(tmp) / "a" / "b" / "store"
        backends = [LocalBackend(store) for _ in range(3)]
        seen = _observe(monkeypatch)
        for key, writer in zip(keys, writers, strict=False):
            start = len(seen.events)
            backends[writer].put(key, key.encode())
            _check_put_was_durable(seen, start, len(seen.events), store, key)
        for level in (store.parent.parent, store.parent):  # above the root: made, and synced
            assert ("mkdir", level) in seen.events
            assert ("fsync", level.parent) in seen.events
        for key in keys:
            assert backends[0].get(key).data == key.encode()


def test_directories_made_by_racing_threads_are_durable_before_each_put_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads writing into the same new directories through one object and through two: a thread
    that finds a directory another thread just made does not return before that directory's
    entry is synced (by either of them)."""
    for round_ in range(5):
        store = tmp_path / f"store{round_}"
        shared, other = LocalBackend(store), LocalBackend(store)
        seen = _observe(monkeypatch)
        barrier = threading.Barrier(8)
        spans: list[tuple[str, int, int]] = []
        threads = [
            threading.Thread(
                target=_write, args=(shared if i % 2 else other, f"runs/r{i % 3}/log/{i:04d}", seen, barrier, spans)
            )
            for i in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(spans) == 8
        for key, _start, end in spans:
            target = store.joinpath(*key.split("/"))
            for level in [p for p in target.parents if p == store or store in p.parents]:
                made = [i for i, event in enumerate(seen.events) if event == ("mkdir", level)]
                assert len(made) == 1, (level, made)
                assert any(e == ("fsync", level.parent) for e in seen.events[made[0] + 1 : end]), (key, level)
        monkeypatch.undo()


def _write(
    backend: LocalBackend, key: str, seen: _Syscalls, barrier: threading.Barrier, spans: list[tuple[str, int, int]]
) -> None:
    barrier.wait()
    start = len(seen.events)
    backend.put(key, b"x", mode="create")
    spans.append((key, start, len(seen.events)))


def test_a_directory_removed_under_a_live_backend_is_made_again_durably(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "store" / "runs"
    backend = LocalBackend(tmp_path / "store")
    backend.put("runs/r/log/1", b"1")
    shutil.rmtree(runs / "r")  # an operator deleting a run by hand
    seen = _observe(monkeypatch)
    backend.put("runs/r/log/2", b"2", mode="create")
    assert backend.get("runs/r/log/2").data == b"2"
    for level in (runs / "r", runs / "r" / "log"):
        made = seen.events.index(("mkdir", level))
        assert ("fsync", level.parent) in seen.events[made + 1 :]
    assert seen.events[-1] == ("fsync", runs / "r" / "log")


def test_a_file_in_the_way_and_a_nul_byte_are_typed(tmp_path: Path) -> None:
    """S3 lets "a" and "a/b" both exist; a filesystem cannot. s3ckpt's layout never asks for it,
    and when something does, the answer is a BackendError, not a raw OSError."""
    backend = LocalBackend(tmp_path / "store")
    backend.put("a", b"file")
    with pytest.raises(BackendError, match="a file stands where a directory"):
        backend.put("a/b", b"below a file")
    with pytest.raises(ObjectNotFoundError):
        backend.get("a/b")
    with pytest.raises(ObjectNotFoundError):
        backend.get_range("a/b", 0, 1)
    assert backend.head("a/b") is None
    backend.delete("a/b")
    assert [i.key for i in backend.list("a/")] == []
    assert list(backend.list_dirs("a/")) == []
    for call in (lambda: backend.put("nul\x00", b"."), lambda: backend.get("nul\x00"), lambda: backend.head("nul\x00")):
        with pytest.raises(BackendError):
            call()
    with pytest.raises(ConfigurationError):
        LocalBackend(tmp_path / "store" / "a")  # a file, not a directory


def _unreadable_store(root: str) -> list[str]:
    """In a child process without the rights to the store: every operation's error, by type."""
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)  # nobody: root ignores permission bits
    backend = LocalBackend(root)
    calls = {
        "open": lambda: LocalBackend(Path(root) / "inside"),  # cannot even look: refused when opened
        "get": lambda: backend.get("runs/r/log/1"),
        "get_range": lambda: backend.get_range("runs/r/log/1", 0, 1),
        "head": lambda: backend.head("runs/r/log/1"),
        "put": lambda: backend.put("runs/r/log/2", b"."),
        "create": lambda: backend.put("runs/r/log/3", b".", mode="create"),
        "list": lambda: list(backend.list("runs/")),
        "list_dirs": lambda: list(backend.list_dirs("runs/")),
        "delete": lambda: backend.delete("runs/r/log/1"),
    }
    outcomes = []
    for name, call in calls.items():
        try:
            call()
            outcomes.append(f"{name}: ok")
        except S3ckptError as exc:
            outcomes.append(f"{name}: {type(exc).__name__}")
        except Exception as exc:  # reported back, so the test says which escaped
            outcomes.append(f"{name}: raw {type(exc).__name__}")
    return outcomes


def test_no_permission_is_access_denied_on_every_operation() -> None:
    base = Path(tempfile.mkdtemp(prefix="s3ckpt-denied-"))  # not under pytest's root-only directory
    base.chmod(0o755)
    root = base / "store"
    LocalBackend(root).put("runs/r/log/1", b"1")
    root.chmod(0o000)
    try:
        with mp.get_context("fork").Pool(1) as pool:
            outcomes = pool.apply(_unreadable_store, (str(root),))
    finally:
        root.chmod(0o755)
        shutil.rmtree(base)
    assert outcomes == [
        f"{name}: AccessDeniedError"
        for name in ("open", "get", "get_range", "head", "put", "create", "list", "list_dirs", "delete")
    ]
    assert issubclass(AccessDeniedError, PermissionError)
