"""Shared fixtures: a store factory over every backend the core must work on.

``backend_kind`` runs a test on memory, a local directory, moto in-process and moto's HTTP server
(the session server from s3ckpt.testing.plugin, which pytest loads through its entry point).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

import s3ckpt
from s3ckpt.backends import Backend, MemoryBackend, open_backend
from s3ckpt.testing import MotoServer, make_moto_conditional_writes_atomic

# moto's in-process mock checks conditions and writes without a lock; S3 does both atomically.
make_moto_conditional_writes_atomic()

BACKENDS = ["memory", "local", "moto", "moto_http"]

StoreFactory = Callable[..., s3ckpt.Store]


class StoreEnv:
    """Where a test's store lives: its URL, backend options, and a raw view of its objects."""

    def __init__(self, kind: str, url: str, options: dict[str, Any], server: MotoServer | None = None) -> None:
        self.kind = kind
        self.url = url
        self.options = options
        self.server = server
        self.key = s3ckpt.generate_key()
        self._stores: list[s3ckpt.Store] = []

    def open(self, **kw: Any) -> s3ckpt.Store:
        kw.setdefault("key", self.key)
        store = s3ckpt.open_store(self.url, **{**self.options, **kw})
        self._stores.append(store)
        return store

    def raw(self) -> Backend:
        """A backend on the same objects, for tests that tamper with storage directly."""
        return open_backend(self.url, **self.options)

    def close(self) -> None:
        for store in self._stores:
            store.close()


@pytest.fixture(params=BACKENDS)
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def env(backend_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StoreEnv]:
    if backend_kind == "memory":
        name = f"test-{uuid.uuid4().hex}"
        e = StoreEnv("memory", f"memory://{name}", {})
        yield e
        e.close()
        MemoryBackend.wipe(name)
    elif backend_kind == "local":
        e = StoreEnv("local", str(tmp_path / "store"), {})
        yield e
        e.close()
    elif backend_kind == "moto":
        with mock_aws():
            bucket = f"s3ckpt-{uuid.uuid4().hex[:12]}"
            boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
            e = StoreEnv("moto", f"s3://{bucket}/prefix", {"region": "us-east-1"})
            yield e
            e.close()
    else:
        bucket_fixture = request.getfixturevalue("moto_s3")
        e = StoreEnv(
            "moto_http",
            f"s3://{bucket_fixture.bucket}/prefix",
            {"endpoint_url": bucket_fixture.endpoint_url, "region": "us-east-1"},
            server=bucket_fixture.server,
        )
        yield e
        e.close()


@pytest.fixture
def store(env: StoreEnv) -> s3ckpt.Store:
    return env.open()
