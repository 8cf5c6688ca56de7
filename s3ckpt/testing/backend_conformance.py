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

import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

import pytest

from ..backends import Backend, LocalBackend, Match, PutMode
from ..backends._retry import RetryingBackend
from ..errors import (
    BackendError,
    ObjectNotFoundError,
    PreconditionFailedError,
    S3ckptError,
    TransientBackendError,
    UnsupportedBackendError,
)
from .faulty import FaultyBackend

if TYPE_CHECKING:
    from .moto_server import MotoServer, RequestInfo

#: What S3 does on a bad day, as the moto server reproduces it: refuse before the request is
#: served (503 SlowDown, 500, 409 ConditionalRequestConflict), or serve it and lose the answer.
Fault = Literal["before-503", "before-500", "after-500", "before-409"]
FAULT_KINDS: tuple[Fault, ...] = ("before-503", "before-500", "after-500", "before-409")


class StorageFaults(Protocol):
    """Breaks the storage under a backend. ``backend`` is a backend object on the same storage as
    the ``backend`` fixture whose requests the faults hit (configured not to retry by itself, so
    that one fault is one failed call)."""

    backend: Backend

    def inject(self, fault: Fault, times: int | None = 1) -> None:
        """Fail the next ``times`` requests with ``fault`` (every request when None)."""

    def clear(self) -> None:
        """No more faults."""


class ContractFaults:
    """Faults raised by a :class:`FaultyBackend` around the backend's calls: for backends with no
    server between them and their data (memory, a local directory), where there is nothing else
    to break. "after" faults let the call happen and lose its answer."""

    _AS_FAULTY: ClassVar[dict[str, str]] = {
        "before-503": "503",
        "before-500": "500",
        "before-409": "reset",
        "after-500": "timeout-after-write",
    }

    def __init__(self, inner: Backend) -> None:
        self._faulty = FaultyBackend(inner, rate=0.0)
        self.backend: Backend = self._faulty

    def inject(self, fault: Fault, times: int | None = 1) -> None:
        self._faulty.fail_next(self._AS_FAULTY[fault], times)

    def clear(self) -> None:
        self._faulty.clear()


class ServerFaults:
    """Faults at the moto HTTP server, on requests for one bucket: the backend meets real HTTP
    errors and must map them itself."""

    def __init__(self, server: MotoServer, bucket: str, backend: Backend) -> None:
        self.server, self.bucket, self.backend = server, bucket, backend
        self._lock = threading.Lock()

    def inject(self, fault: Fault, times: int | None = 1) -> None:
        left = [times]

        def decide(info: RequestInfo) -> Fault | None:
            if not info.path.startswith(f"/{self.bucket}"):
                return None
            with self._lock:
                if left[0] is None:
                    return fault
                if left[0] <= 0:
                    return None
                left[0] -= 1
                return fault

        self.server.inject = decide

    def clear(self) -> None:
        self.server.inject = None


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
        for index, case in enumerate(_fault_cases(raw)):
            for through_retry in (False, True):
                for times in (1, None):
                    prefix = f"f{index}{'r' if through_retry else ''}{'p' if times is None else ''}/"
                    _check_case(case, backend, faults, retrying if through_retry else raw, prefix, fault, times, through_retry)

    def test_operations_under_faults_match_a_model(self, backend: Backend, faults: StorageFaults) -> None:
        """Generated sequences of puts (each mode), gets, ranges, heads, deletes and listings, each
        maybe under a fault for one or two requests or for good, through the RetryingBackend,
        against a dict: a passing fault changes nothing the caller sees; a lasting one is a
        TransientBackendError that leaves the object as it was ("before") or as written ("after")."""
        _run_model(self, backend, faults)

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
        _check_directory_durability(backend, root, monkeypatch)


# -- the fault table ---------------------------------------------------------------------------------

_PAYLOAD = b"payload:0123456789"
_NEW = b"new bytes, not the payload"
_Expected = object | type[S3ckptError]


@dataclass(frozen=True)
class _Case:
    """One operation: what it returns without faults, and which key it writes (with what)."""

    name: str
    #: (backend, key prefix, etag of the prefix's "obj") -> result
    call: Callable[[Backend, str, str], object]
    expected: Callable[[str], _Expected]
    writes: str | None = None
    #: the written key's content after the operation (None: absent); only when ``writes``
    after: bytes | None = None
    #: a compare-and-swap whose answer was lost may be reported as refused though it landed: the
    #: retry layer reads creates back, not swaps (their callers re-read the object anyway)
    lost_answer_may_refuse: bool = False


def _range_into(b: Backend, p: str, etag: str) -> tuple[int, bytes]:
    out = bytearray(6)
    n = b.get_range_into(p + "obj", 2, memoryview(out))
    return n, bytes(out[:n])


def _fault_cases(backend: Backend) -> list[_Case]:
    cases = [
        _Case("get", lambda b, p, e: b.get(p + "obj").data, lambda p: _PAYLOAD),
        _Case("get missing", lambda b, p, e: b.get(p + "none").data, lambda p: ObjectNotFoundError),
        _Case("get_range", lambda b, p, e: b.get_range(p + "obj", 3, 4), lambda p: _PAYLOAD[3:7]),
        _Case("get_range_into", _range_into, lambda p: (6, _PAYLOAD[2:8])),
        _Case("head", lambda b, p, e: _size(b.head(p + "obj")), lambda p: len(_PAYLOAD)),
        _Case("head missing", lambda b, p, e: b.head(p + "none"), lambda p: None),
        _Case("exists", lambda b, p, e: b.exists(p + "obj"), lambda p: True),
        _Case("list", lambda b, p, e: [i.key for i in b.list(p)], lambda p: [p + "obj", p + "sub/x"]),
        _Case("list_dirs", lambda b, p, e: list(b.list_dirs(p)), lambda p: ["sub"]),
        _Case("put overwrite", lambda b, p, e: _ok(b.put(p + "obj", _NEW)), lambda p: True, "obj", _NEW),
        _Case("delete", lambda b, p, e: b.delete(p + "obj"), lambda p: None, "obj", None),
        _Case("delete missing", lambda b, p, e: b.delete(p + "none"), lambda p: None, "none", None),
    ]
    if backend.capabilities.atomic_create:
        cases += [
            _Case("put create", lambda b, p, e: _ok(b.put(p + "new", _NEW, mode="create")), lambda p: True, "new", _NEW),
            _Case(
                "put create existing",
                lambda b, p, e: b.put(p + "obj", _NEW, mode="create"),
                lambda p: PreconditionFailedError,
                "obj",
                _PAYLOAD,
            ),
        ]
    if backend.capabilities.compare_and_swap:
        cases += [
            _Case(
                "put match",
                lambda b, p, e: _ok(b.put(p + "obj", _NEW, mode=Match(e))),
                lambda p: True,
                "obj",
                _NEW,
                lost_answer_may_refuse=True,
            ),
            _Case(
                "put match stale",
                lambda b, p, e: b.put(p + "obj", _NEW, mode=Match('"stale"')),
                lambda p: PreconditionFailedError,
                "obj",
                _PAYLOAD,
            ),
        ]
    return cases


def _size(info: object) -> int | None:
    return getattr(info, "size", None)


def _ok(result: object) -> bool:
    return result is not None


def _outcome(call: Callable[[], object], what: str) -> tuple[bool, object]:
    """(True, value) or (False, the S3ckptError); any other exception fails the test."""
    try:
        return True, call()
    except S3ckptError as exc:
        return False, exc
    except Exception as exc:  # noqa: BLE001 - the point: nothing but S3ckptError may escape
        pytest.fail(f"{what}: a raw {type(exc).__module__}.{type(exc).__qualname__} escaped: {exc!r}")


def _matches(expected: _Expected, ok: bool, value: object) -> bool:
    if isinstance(expected, type) and issubclass(expected, S3ckptError):
        return not ok and isinstance(value, expected)
    return ok and value == expected


def _stored(backend: Backend, key: str) -> bytes | None:
    try:
        return backend.get(key).data
    except ObjectNotFoundError:
        return None


def _check_case(
    case: _Case,
    clean: Backend,
    faults: StorageFaults,
    target: Backend,
    prefix: str,
    fault: Fault,
    times: int | None,
    through_retry: bool,
) -> None:
    clean.put(prefix + "obj", _PAYLOAD)
    clean.put(prefix + "sub/x", b"x")
    info = clean.head(prefix + "obj")
    etag = (info.etag if info is not None else None) or '"none"'
    before = _stored(clean, prefix + case.writes) if case.writes else None
    what = f"{case.name} with {fault} {'once' if times else 'always'} {'through RetryingBackend' if through_retry else 'raw'}"
    faults.inject(fault, times)
    try:
        ok, value = _outcome(lambda: case.call(target, prefix, etag), what)
    finally:
        faults.clear()
    expected = case.expected(prefix)
    # The write landed, its answer was lost, and a retry met the write itself: a refusal that a
    # caller resolves by reading the object (S3 clients retry inside; swaps are not read back).
    landed_anyway = (
        not ok
        and isinstance(value, PreconditionFailedError)
        and fault.startswith("after")
        and case.writes is not None
        and _stored(clean, prefix + case.writes) == case.after
    )
    if times is None:
        assert not ok, f"{what}: a lasting fault cannot succeed, got {value!r}"
        assert isinstance(value, TransientBackendError), f"{what}: a lasting fault must end typed, got {value!r}"
    elif through_retry:
        assert _matches(expected, ok, value) or (case.lost_answer_may_refuse and landed_anyway), (
            f"{what}: expected {expected!r}, got {value!r}"
        )
    else:
        assert _matches(expected, ok, value) or isinstance(value, TransientBackendError) or landed_anyway, (
            f"{what}: expected {expected!r} or a TransientBackendError, got {value!r}"
        )
    if case.writes is not None:
        now = _stored(clean, prefix + case.writes)
        if ok or (isinstance(value, PreconditionFailedError) and _matches(expected, ok, value)):
            assert now == case.after, f"{what}: the call answered {value!r} but the object holds {now!r}"
        elif fault.startswith("before"):
            assert now == before, f"{what}: failed before the request was served, yet the object changed to {now!r}"
        else:
            assert now == case.after, f"{what}: the request was served, so the object must be {case.after!r}: {now!r}"


# -- the model ----------------------------------------------------------------------------------------


def _run_model(suite: BackendConformance, clean: Backend, faults: StorageFaults) -> None:
    # Hypothesis is a test dependency, not a runtime one.
    from hypothesis import settings
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

    retrying = RetryingBackend(faults.backend, attempts=3, base_delay=0)
    caps = faults.backend.capabilities
    keys = st.sampled_from(["a", "b/c", "b/d", "e/f/g", "e/h"])
    # None: no fault; (fault, 1 or 2): passes within the retries; (fault, None): lasts.
    plans = st.none() | st.tuples(st.sampled_from(FAULT_KINDS), st.sampled_from([1, 2, None]))
    modes = ["overwrite"] + (["create"] if caps.atomic_create else []) + (["match"] if caps.compare_and_swap else [])

    class Model(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.prefix = f"model-{uuid.uuid4().hex[:12]}/"
            self.model: dict[str, bytes] = {}
            self.writes = 0

        def _call(self, plan: tuple[Fault, int | None] | None, call: Callable[[], object], what: str) -> tuple[bool, object]:
            if plan is not None:
                faults.inject(*plan)
            try:
                return _outcome(call, f"{what} under {plan}")
            finally:
                faults.clear()

        def _expect(
            self, plan: tuple[Fault, int | None] | None, ok: bool, value: object, expected: _Expected, what: str
        ) -> bool:
            """True when the call went through as without faults; False when a lasting fault stopped it."""
            if plan is not None and plan[1] is None:
                assert not ok, f"{what} under {plan}: a lasting fault cannot succeed, got {value!r}"
                assert isinstance(value, TransientBackendError), f"{what} under {plan}: got {value!r}"
                return False
            assert _matches(expected, ok, value), f"{what} under {plan}: expected {expected!r}, got {value!r}"
            return True

        def _settle(self, plan: tuple[Fault, int | None] | None, key: str, old: bytes | None, new: bytes | None) -> None:
            """After a write that a lasting fault stopped: before it was served nothing changed;
            after, it landed as the fault-free call would have."""
            assert plan is not None
            now = _stored(clean, self.prefix + key)
            assert now == (new if plan[0].startswith("after") else old), f"put {key} under {plan}: holds {now!r}"
            self._set(key, now)

        def _set(self, key: str, value: bytes | None) -> None:
            if value is None:
                self.model.pop(key, None)
            else:
                self.model[key] = value

        @rule(key=keys, mode=st.sampled_from(modes), fresh_etag=st.booleans(), plan=plans)
        def put(self, key: str, mode: str, fresh_etag: bool, plan: tuple[Fault, int | None] | None) -> None:
            self.writes += 1
            data = f"{self.writes}:".encode() * (1 + self.writes % 4)  # unique: read-backs are exact
            old = self.model.get(key)
            put_mode: PutMode
            if mode == "overwrite":
                put_mode, wins = "overwrite", True
            elif mode == "create":
                put_mode, wins = "create", old is None
            else:
                info = clean.head(self.prefix + key)
                etag = info.etag if info is not None and info.etag and fresh_etag else '"stale"'
                put_mode, wins = Match(etag), info is not None and fresh_etag
            expected: _Expected = True if wins else PreconditionFailedError
            ok, value = self._call(plan, lambda: _ok(retrying.put(self.prefix + key, data, mode=put_mode)), f"put {key} {mode}")
            new = data if wins else old
            lost_answer = plan is not None and plan[0].startswith("after") and plan[1] is not None
            if mode == "match" and wins and lost_answer and isinstance(value, PreconditionFailedError):
                # A swap whose answer was lost may come back refused though it landed (see
                # _Case.lost_answer_may_refuse); then the object must hold our bytes.
                assert _stored(clean, self.prefix + key) == data, f"put {key} match under {plan}: refused, not ours"
                ok, value = True, True
            if self._expect(plan, ok, value, expected, f"put {key} {mode}"):
                self._set(key, new)
            else:
                self._settle(plan, key, old, new)

        @rule(key=keys, plan=plans)
        def get(self, key: str, plan: tuple[Fault, int | None] | None) -> None:
            expected = self.model.get(key, ObjectNotFoundError)
            ok, value = self._call(plan, lambda: retrying.get(self.prefix + key).data, f"get {key}")
            self._expect(plan, ok, value, expected, f"get {key}")

        @rule(key=keys, start=st.integers(0, 40), length=st.integers(1, 40), plan=plans)
        def get_range(self, key: str, start: int, length: int, plan: tuple[Fault, int | None] | None) -> None:
            data = self.model.get(key)
            expected: _Expected = ObjectNotFoundError if data is None else data[start : start + length]
            ok, value = self._call(plan, lambda: retrying.get_range(self.prefix + key, start, length), f"get_range {key}")
            self._expect(plan, ok, value, expected, f"get_range {key} {start}+{length}")

        @rule(key=keys, plan=plans)
        def head(self, key: str, plan: tuple[Fault, int | None] | None) -> None:
            data = self.model.get(key)
            ok, value = self._call(plan, lambda: _size(retrying.head(self.prefix + key)), f"head {key}")
            self._expect(plan, ok, value, None if data is None else len(data), f"head {key}")

        @rule(key=keys, plan=plans)
        def delete(self, key: str, plan: tuple[Fault, int | None] | None) -> None:
            old = self.model.get(key)
            ok, value = self._call(plan, lambda: retrying.delete(self.prefix + key), f"delete {key}")
            if self._expect(plan, ok, value, None, f"delete {key}"):
                self._set(key, None)
            else:
                self._settle(plan, key, old, None)

        @rule(sub=st.sampled_from(["", "b/", "e/", "e/f"]), plan=plans)
        def listing(self, sub: str, plan: tuple[Fault, int | None] | None) -> None:
            expected = sorted(self.prefix + k for k in self.model if k.startswith(sub))
            ok, value = self._call(plan, lambda: [i.key for i in retrying.list(self.prefix + sub)], f"list {sub!r}")
            self._expect(plan, ok, value, expected, f"list {sub!r}")

        @rule(sub=st.sampled_from(["", "b/", "e/"]), plan=plans)
        def listing_dirs(self, sub: str, plan: tuple[Fault, int | None] | None) -> None:
            below = [k[len(sub) :] for k in self.model if k.startswith(sub)]
            expected = sorted({k.split("/", 1)[0] for k in below if "/" in k})
            ok, value = self._call(plan, lambda: sorted(retrying.list_dirs(self.prefix + sub)), f"list_dirs {sub!r}")
            self._expect(plan, ok, value, expected, f"list_dirs {sub!r}")

        @invariant()
        def storage_is_the_model(self) -> None:
            stored = {i.key[len(self.prefix) :]: i.size for i in clean.list(self.prefix)}
            assert stored == {k: len(v) for k, v in self.model.items()}

        def teardown(self) -> None:
            faults.clear()
            for key in self.model:
                clean.delete(self.prefix + key)

    run_state_machine_as_test(  # type: ignore[no-untyped-call]  # untyped in Hypothesis
        Model,
        settings=settings(
            max_examples=suite.model_examples,
            stateful_step_count=suite.model_steps,
            deadline=None,
            database=None,
        ),
    )


# -- directories --------------------------------------------------------------------------------------


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


def _check_directory_durability(backend: Backend, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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
