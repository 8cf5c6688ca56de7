"""The fsspec backend over s3fs, against moto's HTTP server, where the conformance suite cannot
reach: a whole store with another writer and with faults, botocore's own retries, and setup errors."""

from __future__ import annotations

import socket
from typing import Any

import pytest

import s3ckpt
from s3ckpt.backends import FsspecBackend
from s3ckpt.backends._retry import RetryingBackend
from s3ckpt.errors import (
    BucketNotFoundError,
    ConfigurationError,
    EndpointUnreachableError,
    PreconditionFailedError,
    S3ckptError,
    TransientBackendError,
)
from s3ckpt.testing.moto_server import RequestInfo
from s3ckpt.testing.plugin import S3Bucket


def _options(endpoint_url: str, **more: Any) -> dict[str, Any]:
    return {"endpoint_url": endpoint_url, "key": "testing", "secret": "testing", **more}


def _backend(bucket: S3Bucket, **more: Any) -> FsspecBackend:
    """An s3fs backend with a filesystem object of its own, as in another process (the backend
    insists on that now; saying so keeps these tests meaningful for any version of it)."""
    options = _options(bucket.endpoint_url, skip_instance_cache=True, **more)
    return FsspecBackend(f"s3://{bucket.bucket}/fs", storage_options=options)


def test_a_reader_sees_records_another_writer_committed_after_it_listed(moto_s3: S3Bucket) -> None:
    """The issue's case: a store that read the log caches nothing, so a record committed since by
    another process is read, not reported as missing, and claim() builds on it."""
    key = s3ckpt.generate_key()
    reader = s3ckpt.open_store(backend=_backend(moto_s3), key=key)
    writer = s3ckpt.open_store(backend=_backend(moto_s3), key=key)
    first = writer.run("r").claim()
    first.commit({"n": 1})
    seen = reader.run("r").latest()
    assert seen is not None
    assert seen.state == {"n": 1}
    assert [h.seq for h in reader.run("r").history()] == [seen.seq]

    first.commit({"n": 2})  # the reader has listed the log; this record is new to it
    latest = reader.run("r").latest()
    assert latest is not None
    assert latest.state == {"n": 2}
    claimed = reader.run("r").claim()
    claimed.commit({"n": 3})
    after = writer.run("r").latest()
    assert after is not None
    assert after.state == {"n": 3}
    assert list(reader.runs()) == ["r"]


def test_a_store_rides_out_server_faults_and_only_typed_errors_escape(moto_s3: S3Bucket) -> None:
    """Every third request to the bucket fails (503, 500, 409, or a 500 after it was served):
    open_store's retry layer turns them into successes, with botocore's own retries on."""
    key = s3ckpt.generate_key()
    store = s3ckpt.open_store(backend=_backend(moto_s3), key=key)
    assert isinstance(store.backend, RetryingBackend)
    kinds = ["before-503", "before-500", "before-409", "after-500"]
    count = [0]

    def every_third(info: RequestInfo) -> Any:
        if not info.path.startswith(f"/{moto_s3.bucket}"):
            return None
        count[0] += 1
        return kinds[count[0] // 3 % len(kinds)] if count[0] % 3 == 0 else None

    moto_s3.server.inject = every_third
    try:
        writer = store.run("faulty").claim()
        for n in range(4):
            writer.commit({"n": n}, artifacts={"blob": bytes([n]) * 5000})
        latest = store.run("faulty").latest()
        assert latest is not None
        assert latest.state == {"n": 3}
        assert latest.read_artifact("blob") == bytes([3]) * 5000
    finally:
        moto_s3.server.inject = None
    assert sum(moto_s3.server.log.faults.values()) >= 8


def test_a_create_whose_answer_was_lost_and_retried_by_botocore_is_read_back(moto_s3: S3Bucket) -> None:
    """The PUT lands, its answer is lost, botocore retries it and meets its own object (412). The
    backend cannot tell that from another writer's object, so it says "transient", and the retry
    layer reads the object back: ours, so the create succeeded."""
    backend = _backend(moto_s3)  # botocore's retries on, as users run it
    lost = [True]

    def lose_first_put_answer(info: RequestInfo) -> Any:
        if info.method == "PUT" and lost[0]:
            lost[0] = False
            return "after-500"
        return None

    moto_s3.server.inject = lose_first_put_answer
    try:
        with pytest.raises(TransientBackendError, match="may have"):
            backend.put("raw/k", b"mine", mode="create")
        assert backend.get("raw/k").data == b"mine"
        lost[0] = True
        RetryingBackend(backend, attempts=3, base_delay=0).put("retried/k", b"mine", mode="create")
    finally:
        moto_s3.server.inject = None
    assert backend.get("retried/k").data == b"mine"
    # Another writer's object is still a refusal: nothing was ambiguous.
    with pytest.raises(PreconditionFailedError):
        RetryingBackend(backend, attempts=3, base_delay=0).put("retried/k", b"theirs", mode="create")


def test_the_listings_cache_cannot_be_turned_on_and_each_backend_has_its_own_filesystem(moto_s3: S3Bucket) -> None:
    with pytest.raises(ConfigurationError, match="use_listings_cache"):
        _backend(moto_s3, use_listings_cache=True)
    one, two = _backend(moto_s3), _backend(moto_s3)
    assert one.fs is not two.fs
    one.put("d/x", b"1")
    list(one.list("d/"))
    list(one.list_dirs(""))
    one.head("d/x")
    assert len(one.fs.dircache) == 0


def test_a_missing_bucket_and_an_unreachable_endpoint_are_typed(moto_s3: S3Bucket) -> None:
    missing = FsspecBackend("s3://s3ckpt-no-such-bucket/fs", storage_options=_options(moto_s3.endpoint_url))
    with pytest.raises(BucketNotFoundError):
        list(missing.list("runs/"))
    with pytest.raises(BucketNotFoundError):
        missing.put("k", b".")

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    nowhere = FsspecBackend(
        "s3://bucket/fs",
        storage_options=_options(f"http://127.0.0.1:{port}", config_kwargs={"retries": {"total_max_attempts": 1}}),
    )
    for call in (
        lambda: nowhere.get("k"),
        lambda: nowhere.head("k"),
        lambda: list(nowhere.list("")),
        lambda: nowhere.put("k", b"."),
    ):
        with pytest.raises(EndpointUnreachableError):
            call()


def test_every_error_is_an_s3ckpt_error_with_the_fitting_builtin(moto_s3: S3Bucket) -> None:
    backend = _backend(moto_s3, config_kwargs={"retries": {"total_max_attempts": 1}})  # a 503 at once
    with pytest.raises(FileNotFoundError) as missing:
        backend.get("nothing")
    assert isinstance(missing.value, S3ckptError)
    moto_s3.server.inject = lambda info: "before-503"
    try:
        with pytest.raises(OSError) as busy:
            backend.get_range("nothing", 0, 1)
    finally:
        moto_s3.server.inject = None
    assert isinstance(busy.value, TransientBackendError)
