"""The backend contract as a test class: subclass it with a ``backend`` fixture to test a backend.

class TestMyBackend(BackendConformance):
    @pytest.fixture
    def backend(self): return MyBackend(...)
"""

from __future__ import annotations

import threading

import pytest

from ..backends import Backend, Match
from ..errors import BackendError, ObjectNotFoundError, PreconditionFailedError, UnsupportedBackendError


class BackendConformance:
    """Behaviour every backend must show; where a capability is not declared, using it must raise
    UnsupportedBackendError rather than fake it."""

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

    def test_delete_is_idempotent(self, backend: Backend) -> None:
        backend.put("d", b".")
        backend.delete("d")
        backend.delete("d")
        assert backend.head("d") is None

    def test_keys_cannot_escape(self, backend: Backend) -> None:
        for bad in ["../x", "a/../../x", "/abs", "a//b", "", "a/./b"]:
            with pytest.raises(BackendError):
                backend.put(bad, b".")
            with pytest.raises(BackendError):
                backend.get(bad)

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
