"""Retry after success, 409s, and writers racing from separate processes.

The HTTP cases run against moto's server with faults injected at the server: "after-500" lets the
PUT land and then answers 500, so botocore retries by itself and the retry meets 412, exactly the
production failure that the write id in every record resolves.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
import botocore.awsrequest
import pytest
from moto import mock_aws

import s3ckpt
from s3ckpt.backends import Backend, MemoryBackend, PutMode, PutResult
from s3ckpt.backends._base import GetResult, ObjectInfo
from s3ckpt.errors import TransientBackendError
from s3ckpt.testing import RequestInfo
from s3ckpt.testing.plugin import S3Bucket


def _is_log_put(info: RequestInfo) -> bool:
    return info.method == "PUT" and "/log/" in info.path


def _open(bucket: S3Bucket, key: str, **kw: Any) -> s3ckpt.Store:
    return s3ckpt.open_store(bucket.url, key=key, endpoint_url=bucket.endpoint_url, region="us-east-1", **kw)


def _assert_log_is_clean(run: s3ckpt.Run, expected_states: list[Any]) -> None:
    records = list(run.records())
    assert [r.seq for r in records] == list(range(len(records)))
    assert [c.state for c in run.history()] == expected_states


def test_put_that_landed_but_reported_500_commits_once(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    store = _open(moto_s3, s3ckpt_key)
    writer = store.run("r").claim()
    injected: list[str] = []

    def inject(info: RequestInfo) -> Any:
        if _is_log_put(info) and not injected:
            injected.append(info.path)
            return "after-500"
        return None

    moto_s3.server.inject = inject
    cp = writer.commit({"n": 1})
    moto_s3.server.inject = None
    assert injected, "the fault was not injected"
    assert moto_s3.server.log.faults["after-500"] == 1
    assert cp.seq == 1
    assert writer.commit({"n": 2}).seq == 2
    _assert_log_is_clean(store.run("r"), [{"n": 1}, {"n": 2}])


def test_every_log_put_landing_then_failing_still_commits_once(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    store = _open(moto_s3, s3ckpt_key)
    writer = store.run("r").claim()
    seen: set[str] = set()

    def inject(info: RequestInfo) -> Any:
        # The first attempt at each log key lands and is reported as a failure.
        if _is_log_put(info) and info.path not in seen:
            seen.add(info.path)
            return "after-500"
        return None

    moto_s3.server.inject = inject
    seqs = [writer.commit({"n": i}).seq for i in range(5)]
    moto_s3.server.inject = None
    assert seqs == [1, 2, 3, 4, 5]
    assert moto_s3.server.log.faults["after-500"] == 5
    _assert_log_is_clean(store.run("r"), [{"n": i} for i in range(5)])


def test_409_conditional_conflict_is_retried(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    store = _open(moto_s3, s3ckpt_key, max_attempts=1)  # botocore does not retry: s3ckpt must
    writer = store.run("r").claim()
    count = {"n": 0}

    def inject(info: RequestInfo) -> Any:
        if _is_log_put(info) and count["n"] < 2:
            count["n"] += 1
            return "before-409"
        return None

    moto_s3.server.inject = inject
    cp = writer.commit({"n": 1})
    moto_s3.server.inject = None
    assert moto_s3.server.log.faults["before-409"] == 2
    assert cp.seq == 1
    _assert_log_is_clean(store.run("r"), [{"n": 1}])


def test_botocore_retry_hook_in_process(s3ckpt_key: str) -> None:
    """The same failure through botocore's own retry machinery, with moto in-process: a
    needs-retry hook forces a retry after the first successful log PUT."""
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="retry-hook")
        store = s3ckpt.open_store("s3://retry-hook/p", key=s3ckpt_key, region="us-east-1")
        writer = store.run("r").claim()
        forced: list[int] = []

        def force_retry(response: Any, attempts: int, request_dict: Mapping[str, Any], **_: Any) -> float | None:
            url = str(request_dict.get("url", ""))
            http = response[0] if response else None
            landed = isinstance(http, botocore.awsrequest.AWSResponse) and http.status_code == 200
            if "/log/" in url and not forced and landed:
                forced.append(attempts)
                return 0.0  # botocore sleeps 0 s and sends the same PUT again
            return None

        client = store.backend.inner.client  # type: ignore[attr-defined]
        client.meta.events.register_first("needs-retry.s3.PutObject", force_retry)
        cp = writer.commit({"n": 1})
        assert forced == [1]
        assert cp.seq == 1
        _assert_log_is_clean(store.run("r"), [{"n": 1}])


class _LandsThenFails(Backend):
    """Wraps a backend: the first create of each log key lands, then reports a transient error."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.url = inner.url
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def get(self, key: str) -> GetResult:
        return self.inner.get(key)

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        result = self.inner.put(key, data, mode=mode, metadata=metadata)
        with self.lock:
            first = "/log/" in key and key not in self.seen
            self.seen.add(key)
        if first:
            raise TransientBackendError(f"connection reset after writing {key}")
        return result

    def head(self, key: str) -> ObjectInfo | None:
        return self.inner.head(key)

    def list(self, prefix: str) -> Any:
        return self.inner.list(prefix)

    def list_dirs(self, prefix: str) -> Any:
        return self.inner.list_dirs(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_landed_write_reported_as_failure_on_local_backends(kind: str, tmp_path: Path, s3ckpt_key: str) -> None:
    inner: Backend = MemoryBackend(uuid.uuid4().hex) if kind == "memory" else s3ckpt.backends.LocalBackend(tmp_path / "s")
    backend = _LandsThenFails(inner)
    store = s3ckpt.open_store(backend=backend, key=s3ckpt_key)
    writer = store.run("r").claim()
    assert [writer.commit({"n": i}).seq for i in range(3)] == [1, 2, 3]
    assert "runs/r/log/00000000000000000000" in backend.seen
    _assert_log_is_clean(store.run("r"), [{"n": i} for i in range(3)])


def _process_writer(url: str, key: str, options: dict[str, Any], worker: int, rounds: int, q: Any) -> None:
    store = s3ckpt.open_store(url, key=key, **options)
    run = store.run("contended")
    out: list[tuple[str, Any]] = []
    for round_ in range(rounds):
        try:
            cp = run.claim(worker=worker).commit({"worker": worker, "round": round_})
            out.append(("ok", (worker, round_, cp.seq)))
        except s3ckpt.ConflictError as exc:
            out.append(("conflict", type(exc).__name__))
        except Exception as exc:
            out.append(("error", repr(exc)))
    store.close()
    q.put(out)


def _race_processes(url: str, key: str, options: dict[str, Any], n: int = 3, rounds: int = 6) -> None:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_process_writer, args=(url, key, options, w, rounds, q)) for w in range(n)]
    for p in procs:
        p.start()
    results = [item for _ in procs for item in q.get(timeout=240)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    errors = [r for r in results if r[0] == "error"]
    assert errors == []
    wins = [r[1] for r in results if r[0] == "ok"]
    assert len(results) == n * rounds
    assert wins
    seqs = [seq for _, _, seq in wins]
    assert len(seqs) == len(set(seqs))
    store = s3ckpt.open_store(url, key=key, **options)
    history = {cp.seq: cp.state for cp in store.run("contended").history()}
    assert history == {seq: {"worker": w, "round": r} for w, r, seq in wins}


def test_processes_race_on_local_directory(tmp_path: Path, s3ckpt_key: str) -> None:
    url = str(tmp_path / "store")
    s3ckpt.open_store(url, key=s3ckpt_key).close()
    _race_processes(url, s3ckpt_key, {})


def test_processes_race_on_moto_server(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    options = {"endpoint_url": moto_s3.endpoint_url, "region": "us-east-1"}
    s3ckpt.open_store(moto_s3.url, key=s3ckpt_key, **options).close()
    _race_processes(moto_s3.url, s3ckpt_key, options)
