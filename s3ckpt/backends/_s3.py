"""S3 through boto3, with real conditional headers.

Create is ``If-None-Match: *`` and compare-and-swap is ``If-Match: <etag>``. botocore retries 5xx
and timeouts by itself (standard or adaptive mode), so a PUT that landed can come back as 412 on
its retry; the log layer resolves that with the write id it puts in every record. A 409
ConditionalRequestConflict means a concurrent conditional write won the race on S3's side and
ours did not land: it surfaces as TransientBackendError, which is safe to retry.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import boto3
import botocore.config
import botocore.exceptions
import botocore.loaders
import botocore.session

from ..errors import (
    AccessDeniedError,
    BackendError,
    ObjectNotFoundError,
    PreconditionFailedError,
    TransientBackendError,
)
from ._base import Backend, Capabilities, GetResult, Match, ObjectInfo, PutMode, PutResult, check_key, check_prefix

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_TRANSIENT_NETWORK = (
    botocore.exceptions.ConnectionError,
    botocore.exceptions.HTTPClientError,
    botocore.exceptions.ReadTimeoutError,
)


_LOADER_LOCK = threading.Lock()
_LOADER: botocore.loaders.Loader | None = None


def _botocore_session() -> botocore.session.Session:
    """A fresh botocore session (its own credentials and config) sharing one data loader: a new
    boto3 Session otherwise re-parses botocore's JSON service models, 0.2-0.7 s per open_store."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = botocore.loaders.create_loader()
    session = botocore.session.get_session()
    session.register_component("data_loader", _LOADER)
    return session


def _status(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3Backend(Backend):
    capabilities = Capabilities(atomic_create=True, compare_and_swap=True, metadata=True)

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        credentials: Mapping[str, str] | None = None,
        retry_mode: Literal["standard", "adaptive", "legacy"] = "standard",
        max_attempts: int = 5,
        max_pool_connections: int = 16,
        client: S3Client | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}"
        if client is None:
            config = botocore.config.Config(
                retries={"mode": retry_mode, "max_attempts": max_attempts},
                max_pool_connections=max_pool_connections,
            )
            session = boto3.session.Session(botocore_session=_botocore_session(), **dict(credentials or {}))
            client = session.client(
                "s3",
                endpoint_url=endpoint_url,  # None lets botocore read AWS_ENDPOINT_URL(_S3)
                region_name=region,
                config=config,
            )
        self.client: S3Client = client

    def _k(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _translate(self, exc: Exception, key: str) -> Exception:
        if isinstance(exc, botocore.exceptions.ClientError):
            status, code = _status(exc), _code(exc)
            if status == 412 or code == "PreconditionFailed":
                return PreconditionFailedError(key)
            if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
                return ObjectNotFoundError(key)
            if status == 409 or status >= 500 or code in ("SlowDown", "RequestTimeout"):
                return TransientBackendError(f"S3 {code or status} on {key}: safe to retry")
            if status == 403 or code in ("AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return AccessDeniedError(
                    f"S3 refused access to {self.url}{key} ({code or status}): the credentials in use, or the bucket "
                    "policy, do not allow it. Check the IAM role (terraform/ has least-privilege ones)."
                )
            return BackendError(f"S3 {code or status} on {self.url}{key}: {exc}")
        if isinstance(exc, _TRANSIENT_NETWORK):
            return TransientBackendError(f"network error on {key}: {exc}")
        return exc

    def get(self, key: str) -> GetResult:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key))
            data = resp["Body"].read()
        except (botocore.exceptions.ClientError, *_TRANSIENT_NETWORK) as exc:
            raise self._translate(exc, key) from exc
        return GetResult(data, resp.get("ETag"), resp.get("Metadata", {}))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key), Range=f"bytes={start}-{start + length - 1}")
            return resp["Body"].read()
        except (botocore.exceptions.ClientError, *_TRANSIENT_NETWORK) as exc:
            if isinstance(exc, botocore.exceptions.ClientError) and _status(exc) == 416:
                return b""  # the range starts past the end
            raise self._translate(exc, key) from exc

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        body = data if isinstance(data, bytes) else bytes(data)  # botocore wants bytes or a file
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._k(key), "Body": body}
        if metadata:
            kwargs["Metadata"] = dict(metadata)
        if mode == "create":
            kwargs["IfNoneMatch"] = "*"
        elif isinstance(mode, Match):
            kwargs["IfMatch"] = mode.etag
        try:
            resp = self.client.put_object(**kwargs)
        except (botocore.exceptions.ClientError, *_TRANSIENT_NETWORK) as exc:
            err = self._translate(exc, key)
            if isinstance(mode, Match) and isinstance(err, ObjectNotFoundError):
                err = PreconditionFailedError(key)
            raise err from exc
        return PutResult(resp.get("ETag"))

    def head(self, key: str) -> ObjectInfo | None:
        try:
            resp = self.client.head_object(Bucket=self.bucket, Key=self._k(key))
        except (botocore.exceptions.ClientError, *_TRANSIENT_NETWORK) as exc:
            err = self._translate(exc, key)
            if isinstance(err, ObjectNotFoundError):
                return None
            raise err from exc
        return ObjectInfo(key, int(resp["ContentLength"]), resp["LastModified"], resp.get("ETag"))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + check_prefix(prefix)):
                for item in page.get("Contents", []):
                    key = item["Key"][len(self.prefix) :]
                    yield ObjectInfo(key, int(item["Size"]), item["LastModified"], item.get("ETag"))
        except (botocore.exceptions.ClientError, *_TRANSIENT_NETWORK) as exc:
            raise self._translate(exc, prefix) from exc

    def list_dirs(self, prefix: str) -> Iterator[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        full = self.prefix + check_prefix(prefix)
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    yield common["Prefix"][len(full) :].rstrip("/")
        except (botocore.exceptions.ClientError, *_TRANSIENT_NETWORK) as exc:
            raise self._translate(exc, prefix) from exc

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._k(key))
        except (botocore.exceptions.ClientError, *_TRANSIENT_NETWORK) as exc:
            err = self._translate(exc, key)
            if not isinstance(err, ObjectNotFoundError):
                raise err from exc

    def close(self) -> None:
        self.client.close()
