"""Every backend against the one conformance class shipped in s3ckpt.testing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from s3ckpt.backends import Backend, FsspecBackend, LocalBackend, MemoryBackend, S3Backend
from s3ckpt.errors import UnsupportedBackendError
from s3ckpt.testing.backend_conformance import BackendConformance
from s3ckpt.testing.plugin import S3Bucket


class TestMemory(BackendConformance):
    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        name = uuid.uuid4().hex
        yield MemoryBackend(name)
        MemoryBackend.wipe(name)


class TestLocal(BackendConformance):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Backend:
        return LocalBackend(tmp_path / "store")


class TestMotoInProcess(BackendConformance):
    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        with mock_aws():
            boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="conformance")
            yield S3Backend("conformance", "pre/fix", region="us-east-1")


class TestMotoServer(BackendConformance):
    @pytest.fixture
    def backend(self, moto_s3: S3Bucket) -> Backend:
        return S3Backend(moto_s3.bucket, "pre", endpoint_url=moto_s3.endpoint_url, region="us-east-1")


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


class TestFsspecS3(BackendConformance):
    """fsspec's s3fs against moto's server: the generic fsspec path with a real atomic create."""

    @pytest.fixture
    def backend(self, moto_s3: S3Bucket) -> Backend:
        options = {"endpoint_url": moto_s3.endpoint_url, "key": "testing", "secret": "testing", "skip_instance_cache": True}
        return FsspecBackend(f"s3://{moto_s3.bucket}/fs", storage_options=options)


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
