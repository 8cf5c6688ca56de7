"""A backend that fails on purpose: 500s, 503 SlowDown, reset connections, slow answers, and
timeouts after a write landed, at a seeded rate.

Wrap any backend and open a store on it (``open_store(backend=FaultyBackend(inner))``): the store
must turn every one of these into either a retry that succeeds or a clear error, and never into a
corrupt record, a lost commit or a duplicate effect. The faults are the backend contract's own
(TransientBackendError: "may or may not have happened, safe to retry"), raised where S3 raises
them, so a store that survives this survives S3 on a bad day.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping

from ..backends import Backend, GetResult, ObjectInfo, PutMode, PutResult
from ..errors import TransientBackendError

#: ``500``/``503``/``reset`` fail before the operation; ``slow`` delays it; ``timeout-after-write``
#: lets a write land and then fails (the case that makes retried writes ambiguous).
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

    def _fault(self, write: bool) -> str | None:
        with self._lock:
            self.operations += 1
            if not self.enabled or self._rng.random() >= self.rate:
                return None
            choices = [f for f in self.faults if write or f != "timeout-after-write"]
            if not choices:
                return None
            fault = self._rng.choice(choices)
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

    def get(self, key: str) -> GetResult:
        self._before(self._fault(False), f"get {key}")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self._before(self._fault(False), f"get {key}")
        return self.inner.get_range(key, start, length)

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        self._before(self._fault(False), f"get {key}")
        return self.inner.get_range_into(key, start, out)

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        fault = self._fault(True)
        self._before(fault, f"put {key}")
        result = self.inner.put(key, data, mode=mode, metadata=metadata)
        if fault == "timeout-after-write":
            raise TransientBackendError(f"injected read timeout after put {key} landed")
        return result

    def head(self, key: str) -> ObjectInfo | None:
        self._before(self._fault(False), f"head {key}")
        return self.inner.head(key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._before(self._fault(False), f"list {prefix}")
        return self.inner.list(prefix)

    def list_dirs(self, prefix: str) -> Iterator[str]:
        self._before(self._fault(False), f"list {prefix}")
        return self.inner.list_dirs(prefix)

    def delete(self, key: str) -> None:
        fault = self._fault(True)
        self._before(fault, f"delete {key}")
        self.inner.delete(key)
        if fault == "timeout-after-write":
            raise TransientBackendError(f"injected read timeout after delete {key} landed")

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"FaultyBackend({self.inner!r}, rate={self.rate})"
