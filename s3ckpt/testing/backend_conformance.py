"""The backend contract as a test class: subclass it with fixtures to test a backend.

class TestMyBackend(BackendConformance):
    @pytest.fixture
    def backend(self): return MyBackend(...)

    @pytest.fixture
    def peer(self, backend): return MyBackend(...)   # a second object on the same storage

``faults`` (a :class:`StorageFaults`) defaults to :class:`ContractFaults`, which raises the
contract's TransientBackendError around the backend's own calls. A backend that talks to a server
should override it with faults at the server (:class:`ServerFaults` for the moto server), so that
the backend's own error mapping is what the fault tests exercise.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import ClassVar

import pytest

from ..backends import Backend, LocalBackend, Match
from ..backends._retry import RetryingBackend
from ..errors import (
    BackendError,
    ObjectNotFoundError,
    PreconditionFailedError,
    UnsupportedBackendError,
)
from .backend_durability import check_directory_durability
from .backend_faults import FAULT_KINDS, ContractFaults, Fault, ServerFaults, StorageFaults, check_case, fault_cases, run_model


def keeps_directories(backend: Backend) -> Path | None:
    """The local directory a backend keeps its objects in as files, whose directories must be made
    durable like the files; None for object stores, which have no directories."""
    return backend.root if isinstance(backend, LocalBackend) else None


class BackendConformance:
    """Behaviour every backend must show; where a capability is not declared, using it must raise
    UnsupportedBackendError rather than fake it."""

    #: Hypothesis examples (sequences of up to ``model_steps`` operations) for the model test.
    model_examples: ClassVar[int] = 40
    model_steps: ClassVar[int] = 20

    @pytest.fixture
    def peer(self) -> Backend:
        pytest.fail("define a `peer` fixture: a second backend object on the same storage as `backend`")

    @pytest.fixture
    def faults(self, backend: Backend) -> StorageFaults:
        return ContractFaults(backend)

    # -- the basics ------------------------------------------------------------------------------

    def test_get_missing_raises_not_found(self, backend: Backend) -> None:
        with pytest.raises(ObjectNotFoundError):
            backend.get("nothing/here")
        with pytest.raises(FileNotFoundError):  # the builtin it also inherits
            backend.get("nothing/here")

    def test_put_get_roundtrip_and_overwrite(self, backend: Backend) -> None:
        backend.put("a/b", b"one")
        assert backend.get("a/b").data == b"one"
        backend.put("a/b", b"two")
        assert backend.get("a/b").data == b"two"

    def test_empty_object(self, backend: Backend) -> None:
        backend.put("e/overwritten", b"")
        assert backend.get("e/overwritten").data == b""
        if backend.capabilities.atomic_create:
            backend.put("e/created", b"", mode="create")
            with pytest.raises(PreconditionFailedError):
                backend.put("e/created", b"", mode="create")
        info = backend.head("e/overwritten")
        assert info is not None
        assert info.size == 0
        assert backend.get_range("e/overwritten", 0, 10) == b""

    def test_get_range(self, backend: Backend) -> None:
        backend.put("r", bytes(range(200)))
        assert backend.get_range("r", 10, 5) == bytes(range(10, 15))
        assert backend.get_range("r", 195, 50) == bytes(range(195, 200))
        assert backend.get_range("r", 0, 200) == bytes(range(200))
        with pytest.raises(ObjectNotFoundError):
            backend.get_range("missing", 0, 1)
        out = bytearray(8)
        assert backend.get_range_into("r", 196, memoryview(out)) == 4
        assert out[:4] == bytes(range(196, 200))

    def test_get_range_at_and_past_the_end_is_empty(self, backend: Backend) -> None:
        backend.put("r", bytes(range(20)))
        assert backend.get_range("r", 20, 5) == b""
        assert backend.get_range("r", 100, 5) == b""
        assert backend.get_range("r", 3, 0) == b""
        assert backend.get_range_into("r", 25, memoryview(bytearray(4))) == 0

    def test_create_refuses_existing(self, backend: Backend) -> None:
        backend.put("k", b"first", mode="create")
        with pytest.raises(PreconditionFailedError):
            backend.put("k", b"second", mode="create")
        assert backend.get("k").data == b"first"

    def test_compare_and_swap(self, backend: Backend) -> None:
        if not backend.capabilities.compare_and_swap:
            # A backend without CAS must say so when asked, never silently overwrite.
            with pytest.raises(UnsupportedBackendError):
                backend.put("p", b"v1", mode=Match('"any"'))
            return
        etag = backend.put("p", b"v1").etag
        assert etag is not None
        new = backend.put("p", b"v2", mode=Match(etag)).etag
        assert new != etag
        with pytest.raises(PreconditionFailedError):
            backend.put("p", b"v3", mode=Match(etag))
        assert backend.get("p").data == b"v2"
        with pytest.raises(PreconditionFailedError):
            backend.put("missing", b"x", mode=Match(etag))

    def test_head(self, backend: Backend) -> None:
        assert backend.head("h") is None
        backend.put("h", b"12345")
        info = backend.head("h")
        assert info is not None
        assert info.size == 5
        assert info.last_modified.tzinfo is not None

    def test_list_is_sorted_and_prefixed(self, backend: Backend) -> None:
        for key in ["x/2", "x/1", "x/sub/3", "y/1", "xx/1"]:
            backend.put(key, b".")
        assert [i.key for i in backend.list("x/")] == ["x/1", "x/2", "x/sub/3"]
        assert sorted(backend.list_dirs("x/")) == ["sub"]
        assert [i.key for i in backend.list("nothing/")] == []
        assert [i.key for i in backend.list("x/s")] == ["x/sub/3"]  # a prefix need not end in "/"

    def test_delete_is_idempotent(self, backend: Backend) -> None:
        backend.put("d", b".")
        backend.delete("d")
        backend.delete("d")
        assert backend.head("d") is None

    def test_a_prefix_is_not_an_object(self, backend: Backend) -> None:
        """ "p" when only "p/q" exists: S3 has no such object, and no backend may pretend it has
        (a local directory or an fsspec "directory" entry is not an object)."""
        backend.put("p/q", b"data")
        assert backend.head("p") is None
        assert not backend.exists("p")
        with pytest.raises(ObjectNotFoundError):
            backend.get("p")
        with pytest.raises(ObjectNotFoundError):
            backend.get_range("p", 0, 1)
        backend.delete("p")  # nothing to delete, and the objects below it stay
        assert backend.get("p/q").data == b"data"
        assert [i.key for i in backend.list("p")] == ["p/q"]

    def test_an_emptied_directory_is_not_listed(self, backend: Backend) -> None:
        """On S3 a "directory" exists only while objects are below it; store.runs() relies on that
        to list the runs, so a run whose objects were all deleted is gone on every backend."""
        backend.put("runs/kept/log/1", b".")
        backend.put("runs/gone/log/1", b".")
        backend.put("runs/gone/log/sub/2", b".")
        backend.delete("runs/gone/log/1")
        backend.delete("runs/gone/log/sub/2")
        assert list(backend.list_dirs("runs/")) == ["kept"]
        assert list(backend.list_dirs("runs/gone/")) == []
        assert [i.key for i in backend.list("runs/gone/")] == []

    def test_keys_cannot_escape(self, backend: Backend) -> None:
        for bad in ["../x", "a/../../x", "/abs", "a//b", "", "a/./b"]:
            with pytest.raises(BackendError):
                backend.put(bad, b".")
            with pytest.raises(BackendError):
                backend.get(bad)
            with pytest.raises(BackendError):
                backend.get_range(bad, 0, 1)
            with pytest.raises(BackendError):
                backend.head(bad)
            with pytest.raises(BackendError):
                backend.delete(bad)
        for bad_prefix in ["../", "a/../../", "/abs/"]:
            with pytest.raises(BackendError):
                list(backend.list(bad_prefix))
            with pytest.raises(BackendError):
                list(backend.list_dirs(bad_prefix))

    def test_racing_creates_have_one_winner(self, backend: Backend) -> None:
        if not backend.capabilities.atomic_create:
            with pytest.raises(UnsupportedBackendError):
                backend.put("race/0", b".", mode="create")
            return
        for round_ in range(5):
            key = f"race/{round_}"
            winners = _race_creates(backend, key, 16)
            assert len(winners) == 1
            assert backend.get(key).data == str(winners[0]).encode()

    # -- another writer --------------------------------------------------------------------------

    def test_another_writers_changes_are_seen_at_once(self, backend: Backend, peer: Backend) -> None:
        """A reader that listed, headed and read before must see what another object on the same
        storage (another process, another host) did since: nothing may answer from a cache. A
        reader that misses a record another writer committed reports false damage."""
        assert peer is not backend
        backend.put("runs/r/log/1", b"first")
        assert [i.key for i in backend.list("runs/r/log/")] == ["runs/r/log/1"]
        assert list(backend.list_dirs("runs/")) == ["r"]
        assert backend.head("runs/r/log/2") is None
        assert not backend.exists("runs/r/log/2")
        with pytest.raises(ObjectNotFoundError):
            backend.get("runs/r/log/2")

        if peer.capabilities.atomic_create:
            peer.put("runs/r/log/2", b"second!", mode="create")
        else:
            peer.put("runs/r/log/2", b"second!")
        peer.put("runs/s/log/1", b"other run")
        info = backend.head("runs/r/log/2")
        assert info is not None
        assert info.size == len(b"second!")
        assert backend.exists("runs/r/log/2")
        assert backend.get("runs/r/log/2").data == b"second!"
        assert backend.get_range("runs/r/log/2", 1, 3) == b"eco"
        assert [i.key for i in backend.list("runs/r/log/")] == ["runs/r/log/1", "runs/r/log/2"]
        assert list(backend.list_dirs("runs/")) == ["r", "s"]

        peer.put("runs/r/log/2", b"replaced")
        assert backend.get("runs/r/log/2").data == b"replaced"
        replaced = backend.head("runs/r/log/2")
        assert replaced is not None
        assert replaced.size == len(b"replaced")

        peer.delete("runs/r/log/2")
        peer.delete("runs/s/log/1")
        assert backend.head("runs/r/log/2") is None
        with pytest.raises(ObjectNotFoundError):
            backend.get("runs/r/log/2")
        assert [i.key for i in backend.list("runs/r/log/")] == ["runs/r/log/1"]
        assert list(backend.list_dirs("runs/")) == ["r"]

    # -- faults ----------------------------------------------------------------------------------

    @pytest.mark.parametrize("fault", FAULT_KINDS)
    def test_every_operation_under_a_fault_is_retried_or_typed(
        self, backend: Backend, faults: StorageFaults, fault: Fault
    ) -> None:
        """Each operation kind, with ``fault`` on its first request and with ``fault`` on every
        request, called on the backend itself and through the RetryingBackend that open_store puts
        above every backend. Outcomes allowed: the fault-free answer, or an S3ckptError; never a
        raw OSError or library error. A fault that goes away is retried to the fault-free answer
        and state; one that persists ends in TransientBackendError; a write that failed "before"
        left nothing, one that failed "after" landed exactly as it would have."""
        raw = faults.backend
        retrying = RetryingBackend(raw, attempts=3, base_delay=0)
        for index, case in enumerate(fault_cases(raw)):
            for through_retry in (False, True):
                for times in (1, None):
                    prefix = f"f{index}{'r' if through_retry else ''}{'p' if times is None else ''}/"
                    check_case(case, backend, faults, retrying if through_retry else raw, prefix, fault, times, through_retry)

    def test_operations_under_faults_match_a_model(self, backend: Backend, faults: StorageFaults) -> None:
        """Generated sequences of puts (each mode), gets, ranges, heads, deletes and listings, each
        maybe under a fault for one or two requests or for good, through the RetryingBackend,
        against a dict: a passing fault changes nothing the caller sees; a lasting one is a
        TransientBackendError that leaves the object as it was ("before") or as written ("after")."""
        run_model(backend, faults, examples=self.model_examples, steps=self.model_steps)

    # -- directories -----------------------------------------------------------------------------

    def test_created_directories_are_durable(self, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
        """A backend that keeps objects as files fsyncs the parent of every directory it creates,
        after the mkdir and before the write returns, level by level from the store root's parent
        down; a directory of the store that another process created is synced the first time this
        object writes into it. (The fsync calls are observed, passing through to the real ones; a
        power cut is not something a test can cause.) An object store has no directories: there,
        the same writes leave no directory behind once their objects are deleted."""
        root = keeps_directories(backend)
        if root is None:
            backend.put("packs/ab/one", b".")
            backend.put("runs/r/log/1", b".")
            backend.delete("packs/ab/one")
            backend.delete("runs/r/log/1")
            assert list(backend.list_dirs("")) == []
            return
        check_directory_durability(backend, root, monkeypatch)


def _race_creates(backend: Backend, key: str, n: int) -> list[int]:
    """``n`` threads released together each try to create ``key``; returns who succeeded."""
    winners: list[int] = []
    barrier = threading.Barrier(n)

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            backend.put(key, str(i).encode(), mode="create")
            winners.append(i)
        except PreconditionFailedError:
            pass

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return winners


__all__ = [
    "FAULT_KINDS",
    "BackendConformance",
    "ContractFaults",
    "Fault",
    "ServerFaults",
    "StorageFaults",
    "keeps_directories",
]
