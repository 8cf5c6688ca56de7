"""Retries of transient backend failures, for every operation, in one place.

A backend raises TransientBackendError when an operation failed in a way that is safe to retry
(a 5xx or 409, a reset connection, a timeout). For a read, retrying is all there is to it. For a
write the failure is ambiguous: the bytes may have landed before the answer was lost, and botocore
retries S3 requests itself, so a PUT that landed can come back as 412 with nothing on this side to
say a retry happened. So every create-if-absent that meets "precondition failed" reads the object
back, and if it holds exactly our bytes, our write landed and the create succeeded. That is one
rule for every create s3ckpt makes (config, key files, packs, records, key-removal markers,
integration objects), and it is sound because every object s3ckpt creates is unique: each sealed
object has a random seed, records carry a random write id, packs and key files random ids, and the
config a random store id. Only a create that another writer won is reported as
PreconditionFailedError, with that writer's object attached (``existing``), so the caller does not
read it again.

This layer sits under every store; what reaches the store above is a failure that retrying did not
fix.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from ..errors import ObjectNotFoundError, PreconditionFailedError, TransientBackendError
from ._base import Backend, GetResult, ObjectInfo, PutMode, PutResult

log = logging.getLogger("s3ckpt")
T = TypeVar("T")


class RetryingBackend(Backend):
    """``inner`` with transient failures retried (``attempts`` tries, exponential backoff)."""

    def __init__(self, inner: Backend, *, attempts: int = 8, base_delay: float = 0.02, max_delay: float = 1.0) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.url = inner.url
        self.attempts = max(1, attempts)
        self.base_delay = base_delay
        self.max_delay = max_delay

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        for attempt in range(self.attempts):
            try:
                return fn()
            except TransientBackendError as exc:
                if attempt == self.attempts - 1:
                    raise
                log.info("retrying %s after %s", what, exc)
                self._sleep(attempt)
        raise AssertionError("unreachable")

    def _sleep(self, attempt: int) -> None:
        # Full jitter: concurrent writers that failed together do not retry together.
        time.sleep(random.uniform(0, min(self.max_delay, self.base_delay * 2**attempt)))

    def get(self, key: str) -> GetResult:
        return self._call(f"get {key}", lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call(f"get {key}", lambda: self.inner.get_range(key, start, length))

    def get_range_into(self, key: str, start: int, out: memoryview) -> int:
        return self._call(f"get {key}", lambda: self.inner.get_range_into(key, start, out))

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        for attempt in range(self.attempts):
            try:
                return self.inner.put(key, data, mode=mode, metadata=metadata)
            except TransientBackendError as exc:
                if attempt == self.attempts - 1:
                    raise
                log.info("retrying put %s after %s", key, exc)
                self._sleep(attempt)
            except PreconditionFailedError as lost:
                if mode != "create":
                    raise
                return self._landed(key, data, lost)
        raise AssertionError("unreachable")

    def _landed(self, key: str, data: bytes | bytearray | memoryview, lost: PreconditionFailedError) -> PutResult:
        """A create met an existing object: ours, if it holds our bytes (our write landed and its
        answer was lost); else the winner's, attached to the error."""
        try:
            stored = self.get(key)
        except ObjectNotFoundError:
            raise lost from None  # removed since: the caller decides whether to create again
        if stored.data == bytes(data):
            return PutResult(etag=stored.etag)
        raise PreconditionFailedError(key, existing=stored) from None

    def head(self, key: str) -> ObjectInfo | None:
        return self._call(f"head {key}", lambda: self.inner.head(key))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # A listing that fails halfway is started again, so it is read whole before it is returned.
        return iter(self._call(f"list {prefix}", lambda: list(self.inner.list(prefix))))

    def list_dirs(self, prefix: str) -> Iterator[str]:
        return iter(self._call(f"list {prefix}", lambda: list(self.inner.list_dirs(prefix))))

    def deleted_keys(self, prefix: str) -> Iterator[str]:
        return iter(self._call(f"list versions {prefix}", lambda: list(self.inner.deleted_keys(prefix))))

    def delete(self, key: str) -> None:
        self._call(f"delete {key}", lambda: self.inner.delete(key))

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"RetryingBackend({self.inner!r})"
