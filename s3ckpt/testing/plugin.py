"""pytest fixtures: ``moto_server`` (one per session), ``moto_s3`` (a fresh bucket per test), and
``s3ckpt_key``. moto is imported only when a fixture that needs it runs, so installing s3ckpt
without its dev extra never breaks a user's pytest.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ..crypto import generate_key
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
