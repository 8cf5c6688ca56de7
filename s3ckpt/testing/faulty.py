"""A backend that fails on purpose: 500s, 503 SlowDown, reset connections, slow answers, and
timeouts after a write landed, at a seeded rate.

Wrap any backend and open a store on it (``open_store(backend=FaultyBackend(inner))``): the store
must turn every one of these into either a retry that succeeds or a clear error, and never into a
corrupt record, a lost commit or a duplicate effect. The faults are the backend contract's own
(TransientBackendError: "may or may not have happened, safe to retry"), raised where S3 raises
them, so a store that survives this survives S3 on a bad day.
"""

from __future__ import annotations

import builtins
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from ..backends import Backend, GetResult, ObjectInfo, PutMode, PutResult
from ..errors import S3ckptError, TransientBackendError

T = TypeVar("T")

#: ``500``/``503``/``reset`` fail before the operation; ``slow`` delays it; ``timeout-after-write``
#: lets a write land and then loses its answer (the case that makes retried writes ambiguous).
FAULTS = ("500", "503", "reset", "slow", "timeout-after-write")


class FaultyBackend(Backend):
    """``inner`` with faults injected into about ``rate`` of the operations."""

    def __init__(
        self,
        inner: Backend,
        *,
        rate: float = 0.2,
        seed: int = 0,
        faults: tuple[str, ...] = FAULTS,
        slow_seconds: float = 0.01,
        max_streak: int = 4,
    ) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; choose from {FAULTS}")
        self.inner = inner
        self.capabilities = inner.capabilities
        self.url = inner.url
        self.rate, self.faults, self.slow_seconds = rate, faults, slow_seconds
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        #: operations seen, and faults injected by kind
        self.operations = 0
        self.injected: Counter[str] = Counter()
        self.enabled = True
        self._planned: str | None = None
        self._planned_left: int | None = 0
        #: Random faults never fail one operation more than this many times in a row, fewer than the
        #: store's retry layer tries (8): what a test proves then never hinges on an unlucky streak.
        self.max_streak = max_streak
        self._streak: Counter[str] = Counter()

    def fail_next(self, fault: str, times: int | None = 1) -> None:
        """Fail the next ``times`` operations with ``fault`` (every operation when None), whatever
        the rate: for tests that need a given fault on a given operation. ``timeout-after-write``
        also applies to reads here: the read happens and its answer is lost."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {FAULTS}")
        with self._lock:
            self._planned, self._planned_left = fault, times

    def clear(self) -> None:
        """Stop the faults planned by ``fail_next``."""
        with self._lock:
            self._planned, self._planned_left = None, 0

    def _fault(self, write: bool, what: str) -> str | None:
        with self._lock:
            self.operations += 1
            if self._planned is not None and (self._planned_left is None or self._planned_left > 0):
                if self._planned_left is not None:
                    self._planned_left -= 1
                self.injected[self._planned] += 1
                return self._planned
            if not self.enabled or self._rng.random() >= self.rate:
                self._streak.pop(what, None)
                return None
            choices = [f for f in self.faults if write or f != "timeout-after-write"]
            if not choices:
                return None
            fault = self._rng.choice(choices)
            if fault != "slow":  # slow is not a failure: it neither counts nor ends a streak
                if self._streak[what] >= self.max_streak:
                    self._streak.pop(what, None)
                    return None
                self._streak[what] += 1
            self.injected[fault] += 1
            return fault

    def _before(self, fault: str | None, what: str) -> None:
        if fault == "500":
            raise TransientBackendError(f"injected 500 InternalError on {what}")
        if fault == "503":
            raise TransientBackendError(f"injected 503 SlowDown on {what}")
        if fault == "reset":
            raise TransientBackendError(f"injected connection reset on {what}")
        if fault == "slow":
            time.sleep(self.slow_seconds)

    def _call(self, write: bool, what: str, operation: Callable[[], T]) -> T:
        fault = self._fault(write, what)
        self._before(fault, what)
        try:
            result = operation()
        except S3ckptError as exc:
            if fault == "timeout-after-write":  # the answer is lost, whatever it was
                raise TransientBackendError(f"injected read timeout after {what} happened") from exc
            raise
        if fault == "timeout-after-write":
            raise TransientBackendError(f"injected read timeout after {what} happened")
        return result

    def get(self, key: str) -> GetResult:
        return self._call(False, f"get {key}", lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call(False, f"get {key}", lambda: self.inner.get_range(key, start, length))

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        return self._call(False, f"get {key}", lambda: self.inner.get_range_into(key, start, out))

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        return self._call(True, f"put {key}", lambda: self.inner.put(key, data, mode=mode, metadata=metadata))

    def head(self, key: str) -> ObjectInfo | None:
        return self._call(False, f"head {key}", lambda: self.inner.head(key))

    # Listings are read whole inside the call, so a fault after them loses the whole answer.
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return iter(self._call(False, f"list {prefix}", lambda: builtins.list(self.inner.list(prefix))))

    def list_dirs(self, prefix: str) -> Iterator[str]:
        return iter(self._call(False, f"list {prefix}", lambda: builtins.list(self.inner.list_dirs(prefix))))

    def deleted_keys(self, prefix: str) -> Iterator[str]:
        return iter(self._call(False, f"list versions {prefix}", lambda: builtins.list(self.inner.deleted_keys(prefix))))

    def delete(self, key: str) -> None:
        self._call(True, f"delete {key}", lambda: self.inner.delete(key))

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"FaultyBackend({self.inner!r}, rate={self.rate})"
