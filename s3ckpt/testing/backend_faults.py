"""Faults for the backend contract: how they are injected (around a backend's own calls, or at
the moto server), the table of every operation under every fault, and a Hypothesis model of
operations under generated faults. backend_conformance.BackendConformance runs them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

import pytest

from ..backends import Backend, Match, PutMode
from ..backends._retry import RetryingBackend
from ..errors import (
    ObjectNotFoundError,
    PreconditionFailedError,
    S3ckptError,
    TransientBackendError,
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


def fault_cases(backend: Backend) -> list[_Case]:
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


def check_case(
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


def run_model(clean: Backend, faults: StorageFaults, *, examples: int, steps: int) -> None:
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

    # Typed through a variable: older Hypothesis releases leave this function untyped, newer type it.
    run: Callable[..., None] = run_state_machine_as_test
    run(
        Model,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
        ),
    )



__all__ = ["FAULT_KINDS", "ContractFaults", "Fault", "ServerFaults", "StorageFaults", "check_case", "fault_cases", "run_model"]
