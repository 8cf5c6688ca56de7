"""Every backend against the one conformance class shipped in s3ckpt.testing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.config
import pytest
from moto import mock_aws

from s3ckpt.backends import Backend, FsspecBackend, LocalBackend, MemoryBackend, S3Backend
from s3ckpt.errors import UnsupportedBackendError
from s3ckpt.testing.backend_conformance import BackendConformance, ServerFaults, StorageFaults
from s3ckpt.testing.plugin import S3Bucket


class TestMemory(BackendConformance):
    model_examples = 80

    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        name = uuid.uuid4().hex
        yield MemoryBackend(name)
        MemoryBackend.wipe(name)

    @pytest.fixture
    def peer(self, backend: MemoryBackend) -> Backend:
        return MemoryBackend(backend.url.removeprefix("memory://"))


class TestLocal(BackendConformance):
    model_examples = 60

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Backend:
        return LocalBackend(tmp_path / "store")

    @pytest.fixture
    def peer(self, tmp_path: Path) -> Backend:
        return LocalBackend(tmp_path / "store")


class TestMotoInProcess(BackendConformance):
    model_examples = 15

    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        with mock_aws():
            boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="conformance")
            yield S3Backend("conformance", "pre/fix", region="us-east-1")

    @pytest.fixture
    def peer(self, backend: Backend) -> Backend:
        return S3Backend("conformance", "pre/fix", region="us-east-1")


def _s3_on(bucket: S3Bucket, **options: Any) -> S3Backend:
    return S3Backend(bucket.bucket, "pre", endpoint_url=bucket.endpoint_url, region="us-east-1", **options)


class TestMotoServer(BackendConformance):
    model_examples = 12

    @pytest.fixture
    def backend(self, moto_s3: S3Bucket) -> Backend:
        return _s3_on(moto_s3)

    @pytest.fixture
    def peer(self, moto_s3: S3Bucket) -> Backend:
        return _s3_on(moto_s3)

    @pytest.fixture
    def faults(self, moto_s3: S3Bucket) -> StorageFaults:
        # botocore's own retries off: each injected fault reaches the backend's error mapping.
        config = botocore.config.Config(retries={"total_max_attempts": 1})
        client = boto3.client("s3", endpoint_url=moto_s3.endpoint_url, region_name="us-east-1", config=config)
        return ServerFaults(moto_s3.server, moto_s3.bucket, _s3_on(moto_s3, client=client))


def test_fsspec_memory_declares_no_atomic_create_and_refuses_create() -> None:
    backend = FsspecBackend(f"memory://fs-{uuid.uuid4().hex}")
    assert not backend.capabilities.atomic_create
    with pytest.raises(UnsupportedBackendError, match="cannot create objects atomically"):
        backend.put("k", b"x", mode="create")
    backend.put("k", b"x")
    assert backend.get("k").data == b"x"


def test_local_create_is_atomic_across_processes(tmp_path: Path) -> None:
    """Processes (not threads) racing link(2)-based creates: exactly one wins each key."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    root = tmp_path / "store"
    with ctx.Pool(4) as pool:
        results = pool.starmap(_create_many, [(str(root), worker) for worker in range(4)])
    for key_index in range(50):
        winners = [w for w, won in enumerate(results) if key_index in won]
        assert len(winners) == 1, (key_index, winners)
        assert LocalBackend(root).get(f"k/{key_index}").data == str(winners[0]).encode()


def _create_many(root: str, worker: int) -> list[int]:
    from s3ckpt.errors import PreconditionFailedError

    backend = LocalBackend(root)
    won = []
    for i in range(50):
        try:
            backend.put(f"k/{i}", str(worker).encode(), mode="create")
            won.append(i)
        except PreconditionFailedError:
            pass
    return won


def _fsspec_on(bucket: S3Bucket, *, retries: bool = True) -> FsspecBackend:
    """s3fs on the moto server. Each one has its own filesystem object (no instance cache), as
    another process would; ``retries=False`` turns off botocore's and s3fs's own retries."""
    options: dict[str, Any] = {
        "endpoint_url": bucket.endpoint_url,
        "key": "testing",
        "secret": "testing",
        "skip_instance_cache": True,
    }
    if not retries:
        options["config_kwargs"] = {"retries": {"total_max_attempts": 1}}
    backend = FsspecBackend(f"s3://{bucket.bucket}/fs", storage_options=options)
    if not retries:
        backend.fs.retries = 1  # s3fs's loop around botocore's: a class attribute, not an option
    return backend


class TestFsspecS3(BackendConformance):
    """fsspec's s3fs against moto's server: the generic fsspec path with a real atomic create."""

    model_examples = 12

    @pytest.fixture
    def backend(self, moto_s3: S3Bucket) -> Backend:
        return _fsspec_on(moto_s3)

    @pytest.fixture
    def peer(self, moto_s3: S3Bucket) -> Backend:
        return _fsspec_on(moto_s3)

    @pytest.fixture
    def faults(self, moto_s3: S3Bucket) -> StorageFaults:
        return ServerFaults(moto_s3.server, moto_s3.bucket, _fsspec_on(moto_s3, retries=False))


def test_store_commits_through_fsspec_s3(moto_s3: S3Bucket) -> None:
    import s3ckpt

    options = {"endpoint_url": moto_s3.endpoint_url, "key": "testing", "secret": "testing", "skip_instance_cache": True}
    key = s3ckpt.generate_key()
    backend = FsspecBackend(f"s3://{moto_s3.bucket}/fs", storage_options=options)
    store = s3ckpt.open_store(backend=backend, key=key)
    writer = store.run("r").claim()
    writer.commit({"n": 1}, artifacts={"a": b"payload" * 1000})
    old = store.run("r").claim()
    store.run("r").claim()
    with pytest.raises(s3ckpt.FencedError):
        old.commit({"n": 2})
    latest = s3ckpt.open_store(backend=FsspecBackend(f"s3://{moto_s3.bucket}/fs", storage_options=options), key=key)
    cp = latest.run("r").latest()
    assert cp is not None
    assert cp.state == {"n": 1}
    assert cp.read_artifact("a") == b"payload" * 1000


def test_fsspec_without_atomic_create_refuses_to_commit() -> None:
    import s3ckpt

    backend = FsspecBackend(f"memory://plain-{uuid.uuid4().hex}")
    with pytest.raises(UnsupportedBackendError, match="atomically"):
        s3ckpt.open_store(backend=backend, key=s3ckpt.generate_key())
