"""S3 through boto3, with real conditional headers.

Create is ``If-None-Match: *`` and compare-and-swap is ``If-Match: <etag>``. botocore retries 5xx
and timeouts by itself (standard or adaptive mode), so a PUT that landed can come back as 412 on
its retry; the log layer resolves that with the write id it puts in every record. A 409
ConditionalRequestConflict means a concurrent conditional write won the race on S3's side and
ours did not land: it surfaces as TransientBackendError, which is safe to retry.

Every botocore exception becomes an s3ckpt error that says what to do (``_translate``): missing
or expired credentials, a bucket that does not exist, a wrong region or bucket name are
configuration problems; an endpoint that cannot be reached after botocore's own retries is
EndpointUnreachableError (nothing was sent, so there is nothing ambiguous to retry); a connection
lost mid-request is transient, because the request may have landed.
"""

from __future__ import annotations

import os
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
    BucketNotFoundError,
    ConfigurationError,
    CredentialsError,
    EndpointUnreachableError,
    ObjectNotFoundError,
    PreconditionFailedError,
    S3ckptError,
    TransientBackendError,
    describe,
)
from ._base import Backend, Capabilities, GetResult, Match, ObjectInfo, PutMode, PutResult, check_key, check_prefix

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_BOTO = (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)

#: Raised before a request is sent: the credential chain found nothing usable.
_NO_CREDENTIALS = (
    botocore.exceptions.NoCredentialsError,
    botocore.exceptions.PartialCredentialsError,
    botocore.exceptions.CredentialRetrievalError,
    botocore.exceptions.TokenRetrievalError,
    botocore.exceptions.NoAuthTokenError,
    botocore.exceptions.SSOError,
    botocore.exceptions.LoginError,
    botocore.exceptions.RefreshWithMFAUnsupportedError,
    botocore.exceptions.UnknownCredentialError,
    botocore.exceptions.ProfileNotFound,
    botocore.exceptions.ConfigNotFound,
    botocore.exceptions.ConfigParseError,
    botocore.exceptions.InvalidConfigError,
)
#: The connection was never made: nothing reached S3, and botocore already retried.
_UNREACHABLE = (botocore.exceptions.ConnectionError,)
#: The connection broke during the request: it may have landed, so retrying is the answer.
_MID_REQUEST = (botocore.exceptions.HTTPClientError, botocore.exceptions.IncompleteReadError)
#: Bad arguments that botocore checks locally (a bucket name, an ARN, a parameter).
_INVALID = (
    botocore.exceptions.ParamValidationError,
    botocore.exceptions.ValidationError,
    botocore.exceptions.InvalidDNSNameError,
    botocore.exceptions.UnsupportedS3ArnError,
    botocore.exceptions.UnsupportedS3ConfigurationError,
    botocore.exceptions.UnsupportedS3AccesspointConfigurationError,
    botocore.exceptions.UnsupportedOutpostResourceError,
    botocore.exceptions.BaseEndpointResolverError,
    botocore.exceptions.EndpointProviderError,
    botocore.exceptions.UnknownRegionError,
)

_CREDENTIALS_FIX = (
    "Configure AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), "
    "or AWS_PROFILE, or run `aws configure` / `aws sso login`, or run where an IAM role is attached"
)
_CREDENTIAL_CODES = frozenset(
    {"ExpiredToken", "ExpiredTokenException", "InvalidToken", "TokenRefreshRequired", "InvalidClientTokenId"}
)
_REGION_CODES = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException"})
_CREDENTIAL_FIELDS = frozenset(
    {"aws_access_key_id", "aws_secret_access_key", "aws_session_token", "profile_name", "aws_account_id"}
)
_RETRY_MODES = ("standard", "adaptive", "legacy")


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


_S3_ENDPOINT = "the endpoint (--endpoint-url, endpoint_url= or AWS_ENDPOINT_URL)"


def transport_error(exc: botocore.exceptions.BotoCoreError, what: str, *, endpoint: str = _S3_ENDPOINT) -> S3ckptError:
    """The s3ckpt error for a botocore failure that is not a service's answer, for any AWS service
    (``what``: "S3 for s3://bucket/key", "KMS key alias/x"; ``endpoint``: where its endpoint is set).
    Credentials, an endpoint that cannot be reached, arguments botocore refused locally, and the rest."""
    if isinstance(exc, _NO_CREDENTIALS):
        return CredentialsError(f"no usable AWS credentials for {what} ({exc}). {_CREDENTIALS_FIX}.")
    if isinstance(exc, _UNREACHABLE):
        return EndpointUnreachableError(
            f"cannot reach {what}: {exc}. Check {endpoint}, the region and the network, then try again."
        )
    if isinstance(exc, _MID_REQUEST):
        return TransientBackendError(f"network error on {what}: {exc}; safe to retry")
    if isinstance(exc, _INVALID):
        return ConfigurationError(f"the request for {what} was refused before it was sent: {exc}. Check the names and region.")
    return BackendError(f"the request for {what} failed: {exc}. Check {endpoint}, the region and the credentials.")


def _optional_str(name: str, value: object) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise ConfigurationError(f"{name} must be a non-empty str, not {describe(value)}")


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise ConfigurationError(f"{name} must be an int from 1 to 1000, not {describe(value)}")
    return value


def _check_credentials(credentials: object) -> dict[str, str]:
    if credentials is None:
        return {}
    if not isinstance(credentials, Mapping):
        raise ConfigurationError(
            f"credentials must be a dict such as {{'aws_access_key_id': ..., 'aws_secret_access_key': ...}}, "
            f"not {type(credentials).__name__}"
        )
    unknown = sorted(repr(k) for k in credentials if k not in _CREDENTIAL_FIELDS)
    if unknown:
        raise ConfigurationError(
            f"credentials has unknown field(s) {', '.join(unknown)}; the fields are {', '.join(sorted(_CREDENTIAL_FIELDS))}"
        )
    bad = sorted(k for k, v in credentials.items() if not isinstance(v, str) or not v)
    if bad:
        raise ConfigurationError(f"credentials field(s) {', '.join(bad)} must be non-empty strings")
    return dict(credentials)


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
        retry_mode: Literal["standard", "adaptive", "legacy"] | None = None,
        max_attempts: int | None = None,
        max_pool_connections: int = 16,
        client: S3Client | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}"
        if client is None:
            client = self._client(endpoint_url, region, credentials, retry_mode, max_attempts, max_pool_connections)
        self.client: S3Client = client

    def _client(
        self,
        endpoint_url: object,
        region: object,
        credentials: object,
        retry_mode: object,
        max_attempts: object,
        max_pool_connections: object,
    ) -> S3Client:
        """A boto3 client, with every option checked first: botocore would fail on a bad one with
        a TypeError or a bare ValueError, or not until the first request."""
        endpoint, region_name = _optional_str("endpoint_url", endpoint_url), _optional_str("region", region)
        # Unset options follow AWS's own variables, so an operator can tune the CLI without flags.
        if retry_mode is None:
            retry_mode = os.environ.get("AWS_RETRY_MODE") or "standard"
        if retry_mode not in _RETRY_MODES:
            raise ConfigurationError(
                f"retry_mode (or AWS_RETRY_MODE) must be one of {', '.join(_RETRY_MODES)}, not {describe(retry_mode)}"
            )
        retries: dict[str, Any] = {"mode": retry_mode}
        from_env = os.environ.get("AWS_MAX_ATTEMPTS")
        if max_attempts is None and from_env:
            # AWS_MAX_ATTEMPTS counts the first attempt too; the max_attempts option counts retries.
            retries["total_max_attempts"] = _count("AWS_MAX_ATTEMPTS", int(from_env) if from_env.isdigit() else from_env)
        else:
            retries["max_attempts"] = _count("max_attempts", 5 if max_attempts is None else max_attempts)
        creds = _check_credentials(credentials)
        try:
            pool = _count("max_pool_connections", max_pool_connections)
            config = botocore.config.Config(retries=retries, max_pool_connections=pool)  # type: ignore[arg-type]
            session = boto3.session.Session(botocore_session=_botocore_session(), **creds)
            # endpoint None lets botocore read AWS_ENDPOINT_URL(_S3)
            return session.client("s3", endpoint_url=endpoint, region_name=region_name, config=config)
        except _NO_CREDENTIALS as exc:  # a profile that does not exist, a broken config file
            raise CredentialsError(f"cannot load AWS credentials for {self.url}: {exc}. {_CREDENTIALS_FIX}.") from None
        except (botocore.exceptions.BotoCoreError, ValueError) as exc:  # "Invalid endpoint: ...", a bad region
            raise ConfigurationError(
                f"cannot make an S3 client for {self.url}: {exc}. Check endpoint_url and region."
            ) from None

    def _k(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _translate(self, exc: Exception, key: str) -> Exception:
        """The s3ckpt error for a botocore one; every message says what to do."""
        if isinstance(exc, botocore.exceptions.ClientError):
            return self._translate_response(exc, key)
        if isinstance(exc, _MID_REQUEST):
            return TransientBackendError(f"network error on {key}: {exc}; safe to retry")
        if isinstance(exc, botocore.exceptions.BotoCoreError):
            return transport_error(exc, f"S3 for {self.url}{key}")
        return exc

    def _translate_response(self, exc: botocore.exceptions.ClientError, key: str) -> S3ckptError:
        status, code = _status(exc), _code(exc)
        where = f"{self.url}{key}"
        if code == "NoSuchBucket":
            return BucketNotFoundError(self.bucket)
        if status == 412 or code == "PreconditionFailed":
            return PreconditionFailedError(key)
        if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
            return ObjectNotFoundError(key)
        if status == 409 or status >= 500 or code in ("SlowDown", "RequestTimeout"):
            return TransientBackendError(f"S3 {code or status} on {key}: safe to retry")
        if code in _CREDENTIAL_CODES:
            return CredentialsError(f"S3 rejected the credentials for {where} ({code}). {_CREDENTIALS_FIX}.")
        if status == 301 or code in _REGION_CODES:
            region = exc.response.get("Error", {}).get("Region") or exc.response.get("ResponseMetadata", {}).get(
                "HTTPHeaders", {}
            ).get("x-amz-bucket-region")
            hint = f"it is in {region}: pass --region {region}" if region else "pass the bucket's region with --region"
            return ConfigurationError(f"bucket {self.bucket!r} is in another region than the one in use ({code}); {hint}")
        if code == "InvalidBucketName":
            return ConfigurationError(f"{self.bucket!r} is not a valid S3 bucket name; fix the URL (s3://bucket/prefix)")
        if status == 403 or code in ("AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return AccessDeniedError(
                f"S3 refused access to {where} ({code or status}): the credentials in use, or the bucket "
                "policy, do not allow it. Check the IAM role (terraform/ has least-privilege ones)."
            )
        return BackendError(f"S3 {code or status} on {where}: {exc}")

    def get(self, key: str) -> GetResult:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key))
            data = resp["Body"].read()
        except _BOTO as exc:
            raise self._translate(exc, key) from exc
        return GetResult(data, resp.get("ETag"), resp.get("Metadata", {}))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._k(key), Range=f"bytes={start}-{start + length - 1}")
            return resp["Body"].read()
        except _BOTO as exc:
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
        except _BOTO as exc:
            err = self._translate(exc, key)
            if isinstance(mode, Match) and isinstance(err, ObjectNotFoundError):
                err = PreconditionFailedError(key)
            raise err from exc
        return PutResult(resp.get("ETag"))

    def head(self, key: str) -> ObjectInfo | None:
        try:
            resp = self.client.head_object(Bucket=self.bucket, Key=self._k(key))
        except _BOTO as exc:
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
        except _BOTO as exc:
            raise self._translate(exc, prefix) from exc

    def list_dirs(self, prefix: str) -> Iterator[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        full = self.prefix + check_prefix(prefix)
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    yield common["Prefix"][len(full) :].rstrip("/")
        except _BOTO as exc:
            raise self._translate(exc, prefix) from exc

    def deleted_keys(self, prefix: str) -> Iterator[str]:
        paginator = self.client.get_paginator("list_object_versions")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + check_prefix(prefix)):
                for marker in page.get("DeleteMarkers", []):
                    if marker.get("IsLatest"):
                        yield marker["Key"][len(self.prefix) :]
        except _BOTO as exc:
            raise self._translate(exc, prefix) from exc

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._k(key))
        except _BOTO as exc:
            err = self._translate(exc, key)
            if not isinstance(err, ObjectNotFoundError):
                raise err from exc

    def close(self) -> None:
        self.client.close()
