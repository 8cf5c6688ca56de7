"""pytest fixtures: ``moto_server`` (one per session), ``moto_s3`` (a fresh bucket per test),
``s3ckpt_key``, ``s3ckpt_store`` (a store per backend), ``faulty`` (a backend that fails on
purpose) and ``kill_and_resume`` (the crash harness, under the test's tmp_path). moto is imported
only when a fixture that needs it runs, so installing s3ckpt without its dev extra never breaks a
user's pytest.
"""

from __future__ import annotations

import os
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..backends import Backend
from ..crypto import generate_key
from ..store import Store, open_store
from .faulty import FaultyBackend
from .kill import Report, StoreTarget
from .kill import kill_and_resume as _kill_and_resume
from .moto_server import MotoServer

_FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Bucket:
    """A bucket on the moto server, with everything a store or a boto3 client needs to reach it."""

    server: MotoServer
    bucket: str

    @property
    def endpoint_url(self) -> str:
        return self.server.endpoint_url

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/ckpt"

    def client(self) -> object:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """A moto server on a free loopback port for the whole session (fake credentials set)."""
    saved = {k: os.environ.get(k) for k in _FAKE_CREDENTIALS}
    os.environ.update(_FAKE_CREDENTIALS)
    with MotoServer() as server:
        yield server
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def moto_s3(moto_server: MotoServer) -> Iterator[S3Bucket]:
    """A fresh, empty bucket on the session's moto server; faults and counters reset."""
    import boto3

    name = f"s3ckpt-{uuid.uuid4().hex[:16]}"
    boto3.client("s3", endpoint_url=moto_server.endpoint_url, region_name="us-east-1").create_bucket(Bucket=name)
    moto_server.inject = None
    moto_server.log.reset()
    yield S3Bucket(moto_server, name)
    moto_server.inject = None


@pytest.fixture
def s3ckpt_key() -> str:
    return generate_key()


#: The backends ``s3ckpt_store`` runs on; narrow it with
#: ``@pytest.mark.parametrize("s3ckpt_store", ["local"], indirect=True)``.
STORE_BACKENDS = ("memory", "local", "moto")


@pytest.fixture(params=STORE_BACKENDS)
def s3ckpt_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, s3ckpt_key: str) -> Iterator[Store]:
    """A fresh, empty store on each backend: memory, a local directory, and S3 on the moto server."""
    kind = request.param
    if kind == "memory":
        store = open_store(f"memory://s3ckpt-{uuid.uuid4().hex}", key=s3ckpt_key)
    elif kind == "local":
        store = open_store(str(tmp_path_factory.mktemp("store") / "s3ckpt"), key=s3ckpt_key)
    elif kind == "moto":
        bucket: S3Bucket = request.getfixturevalue("moto_s3")
        store = open_store(bucket.url, key=s3ckpt_key, endpoint_url=bucket.endpoint_url, region="us-east-1")
    else:
        raise ValueError(f"s3ckpt_store runs on {', '.join(STORE_BACKENDS)}, not {kind!r}")
    with store:
        yield store


@pytest.fixture
def faulty(request: pytest.FixtureRequest) -> Callable[..., FaultyBackend]:
    """Wrap a backend in faults: ``open_store(backend=faulty(inner, rate=0.2))``. Seeded from the
    test's name unless ``seed=`` is given, so a failure reproduces."""

    def make(inner: Backend, *, rate: float = 0.2, seed: int | None = None, **options: Any) -> FaultyBackend:
        if seed is None:
            seed = zlib.crc32(request.node.nodeid.encode())
        return FaultyBackend(inner, rate=rate, seed=seed, **options)

    return make


@pytest.fixture
def kill_and_resume(tmp_path: Path) -> Callable[..., Report]:
    """``kill_and_resume(workload, store_target, ...)`` working under the test's tmp_path."""

    def run(workload: Any, store: StoreTarget, **options: Any) -> Report:
        options.setdefault("workdir", tmp_path / "kill-and-resume")
        return _kill_and_resume(workload, store, **options)

    return run
