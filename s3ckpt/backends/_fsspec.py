"""Any fsspec filesystem. Atomic create is claimed only where fsspec's create mode is known to be a
real conditional write on the server (s3fs sends If-None-Match); elsewhere the backend says it
cannot create atomically, and commits refuse to run on it rather than risk two writers on one seq.

Three things fsspec does by default that a checkpoint store cannot live with are turned off here:

- The listings cache. A filesystem that listed ``runs/r/log/`` once answers later ``info``,
  ``exists`` and ``ls`` calls from that listing, so a record another writer committed since reads as
  missing ("HEAD names it, but it is missing": false damage). The filesystem is opened with
  ``use_listings_cache=False``, so every listing, head and existence check asks the server.
- Raw errors. s3fs turns S3 errors into bare OSErrors (errno EBUSY for 503, EREMOTEIO for 500, EIO
  for a 409) and lets network errors through as they are. Every operation maps them to s3ckpt's
  errors (see ``_typed``), so the retry layer above retries what is transient and callers see
  nothing but S3ckptError subclasses.
- s3fs's own retry loop around botocore's. It multiplies with botocore's retries and with the
  store's retry layer (a lasting 503 took 45 s per call before it surfaced), and it hides a lost
  answer: a create that landed, retried inside s3fs, comes back "already exists". s3ckpt's retry
  layer retries instead, and reads an ambiguous create back. botocore's retries stay; a 412 after
  one of them is reported as transient (it may be our own first attempt), for the same read-back.
  Each backend opens its own filesystem object (no fsspec instance cache), so these settings
  touch nobody else's.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import fsspec

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
    UnsupportedBackendError,
)
from ._base import Backend, Capabilities, GetResult, ObjectInfo, PutMode, PutResult, check_key, check_prefix

# Protocols whose pipe_file(mode="create") is a server-side create-if-absent.
_S3 = frozenset({"s3", "s3a"})

# S3 error codes that mean "try again": throttling, a server-side hiccup, a conditional write that
# raced another one (409 ConditionalRequestConflict: ours did not land).
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "ConditionalRequestConflict",
        "OperationAborted",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
    }
)
_ACCESS_CODES = frozenset({"AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch"})
# As the S3 backend reads them: the credentials themselves are no good (any more).
_CREDENTIAL_CODES = frozenset(
    {"ExpiredToken", "ExpiredTokenException", "InvalidToken", "TokenRefreshRequired", "InvalidClientTokenId"}
)
# What s3fs makes of a 503/SlowDown (EBUSY) and a 500 (EREMOTEIO), and what sockets say when the
# network drops; used when no HTTP status survives in the exception chain.
_TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EBUSY",
        "EREMOTEIO",
        "EAGAIN",
        "ETIMEDOUT",
        "ECONNRESET",
        "ECONNABORTED",
        "ECONNREFUSED",
        "EPIPE",
        "ENETDOWN",
        "ENETUNREACH",
        "EHOSTUNREACH",
    )
    if hasattr(errno, name)
)


def _mtime(info: Mapping[str, Any]) -> datetime:
    for field in ("LastModified", "mtime", "updated", "last_modified", "created"):
        value = info.get(field)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return datetime.fromtimestamp(0, UTC)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and every cause or context behind it (s3fs keeps botocore's error there)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _http(exc: BaseException) -> tuple[int, str]:
    """The HTTP status and error code of the first exception in the chain that carries them."""
    for link in _chain(exc):
        response = getattr(link, "response", None)
        if isinstance(response, Mapping):  # botocore's ClientError
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            return int(status or 0), str(response.get("Error", {}).get("Code", ""))
        # aiohttp's ClientResponseError, azure's HttpResponseError. Not ``code``: aiohttp's parser
        # errors carry code=400 for a response they could not read, which is a network failure.
        for attribute in ("status", "status_code"):
            value = getattr(link, attribute, None)
            if isinstance(value, int) and 100 <= value < 600:
                return value, ""
    return 0, ""


def _network_error_types() -> tuple[type[BaseException], ...]:
    """Connection-level failures of the HTTP stacks fsspec filesystems use (imported only when an
    error needs classifying, and only if installed)."""
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    with contextlib.suppress(ImportError):
        import botocore.exceptions

        found += [botocore.exceptions.HTTPClientError]  # the connection broke mid-request
    with contextlib.suppress(ImportError):
        import aiohttp

        found += [aiohttp.ClientConnectionError, aiohttp.ClientPayloadError]
    with contextlib.suppress(ImportError):
        import urllib3.exceptions

        found += [urllib3.exceptions.ProtocolError, urllib3.exceptions.TimeoutError]
    return tuple(found)


def _botocore_kind(exc: BaseException) -> str | None:
    """ "credentials" or "unreachable" for the botocore errors that say so (as the S3 backend reads
    them), else None."""
    try:
        import botocore.exceptions as bce
    except ImportError:
        return None
    credentials = (bce.NoCredentialsError, bce.PartialCredentialsError, bce.CredentialRetrievalError)
    if isinstance(exc, credentials):
        return "credentials"
    if isinstance(exc, bce.ConnectionError):  # refused, DNS, connect timeout, proxy: not mid-request
        return "unreachable"
    return None


def _retried_inside(exc: BaseException) -> bool:
    """Whether botocore retried the request before this answer (so an earlier attempt may have landed)."""
    for link in _chain(exc):
        response = getattr(link, "response", None)
        if isinstance(response, Mapping):
            return bool(response.get("ResponseMetadata", {}).get("RetryAttempts", 0))
    return False


def _typed(exc: Exception, key: str, where: str, bucket: str) -> S3ckptError:
    """The s3ckpt error for whatever a filesystem raised. Order matters: a status in the chain is
    more precise than the OSError subclass s3fs chose for it."""
    status, code = _http(exc)
    links = list(_chain(exc))
    kinds = {_botocore_kind(link) for link in links}
    if code == "NoSuchBucket":
        return BucketNotFoundError(bucket)
    if status == 404 or isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
        return ObjectNotFoundError(key)
    if status == 412 or isinstance(exc, FileExistsError):
        if _retried_inside(exc):
            return TransientBackendError(
                f"{where}: the object exists after botocore retried the write, so the first attempt may have "
                "landed; safe to retry (the retry layer reads it back)"
            )
        return PreconditionFailedError(key)
    if "credentials" in kinds or code in _CREDENTIAL_CODES:
        return CredentialsError(
            f"{where}: no usable credentials ({exc}). Pass key/secret (or a profile) in storage_options, or set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."
        )
    if "unreachable" in kinds:
        return EndpointUnreachableError(
            f"{where}: cannot reach the server ({exc}). Check endpoint_url in storage_options, the region and the network."
        )
    if status == 403 or code in _ACCESS_CODES or any(isinstance(e, PermissionError) for e in links):
        return AccessDeniedError(
            f"{where}: access refused ({code or status or exc}). Check the credentials in storage_options or "
            "the environment, and that the bucket policy or IAM role allows it."
        )
    network = _network_error_types()
    if (
        status in (409, 429)
        or status >= 500
        or code in _TRANSIENT_CODES
        or any(isinstance(e, network) for e in links)
        or any(isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS for e in links)
    ):
        return TransientBackendError(f"{where}: {code or status or type(exc).__name__} ({exc}); safe to retry")
    return BackendError(f"{where} failed: {type(exc).__name__}: {exc}")


class FsspecBackend(Backend):
    def __init__(self, url: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
        options = dict(storage_options or {})
        if options.get("use_listings_cache", False):
            raise ConfigurationError(
                "storage_options use_listings_cache=True would let this store miss records other writers "
                "committed since it last listed; leave it out (s3ckpt turns the cache off)"
            )
        options.update(use_listings_cache=False, skip_instance_cache=True)
        try:
            fs, path = fsspec.core.url_to_fs(url, **options)
        except (ImportError, ValueError, TypeError) as exc:
            raise ConfigurationError(f"cannot open {url!r} with fsspec: {exc}") from exc
        self.fs = fs
        self.root = path.rstrip("/")
        protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
        self._s3 = bool(protocols & _S3)
        if self._s3:
            fs.retries = 1  # s3fs's loop around botocore's (a class attribute, not an option)
        self.url = url
        self.capabilities = Capabilities(atomic_create=self._s3, compare_and_swap=False, metadata=False)

    def _p(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    @contextlib.contextmanager
    def _errors(self, key: str, action: str) -> Iterator[None]:
        try:
            yield
        except S3ckptError:
            raise
        except Exception as exc:
            raise _typed(exc, key, f"{action} {self.url.rstrip('/')}/{key}", self.root.split("/", 1)[0]) from exc

    def get(self, key: str) -> GetResult:
        path = self._p(key)
        # One GET: s3fs would otherwise HEAD first to decide on a parallel download.
        options: dict[str, Any] = {"max_concurrency": 1} if self._s3 else {}
        with self._errors(key, "get"):
            return GetResult(bytes(self.fs.cat_file(path, **options)))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        path = self._p(key)
        if length <= 0:
            return b""
        try:
            with self._errors(key, "get"):
                return bytes(self.fs.cat_file(path, start=start, end=start + length))
        except BackendError as exc:
            if _http(exc)[0] == 416:  # the range starts past the end, as a local file reads
                return b""
            raise

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        path = self._p(key)
        if mode == "create" and not self.capabilities.atomic_create:
            raise UnsupportedBackendError(
                f"{self.url} cannot create objects atomically, so two writers could both commit "
                "the same seq. Use s3://, a local directory or memory:// for commits."
            )
        if mode not in ("create", "overwrite"):
            raise UnsupportedBackendError(f"{self.url} has no compare-and-swap")
        with self._errors(key, "put"):
            # s3fs sends If-None-Match: * for mode="create" (also for empty objects, unlike open("xb")).
            out = self.fs.pipe_file(path, bytes(data), mode=mode)
        etag = out.get("ETag") if isinstance(out, Mapping) else None
        return PutResult(etag if isinstance(etag, str) else None)

    def head(self, key: str) -> ObjectInfo | None:
        path = self._p(key)
        try:
            with self._errors(key, "head"):
                info = self.fs.info(path)
        except ObjectNotFoundError:
            return None
        if info.get("type", "file") != "file":
            return None  # a "directory" is a prefix of other keys, not an object
        return ObjectInfo(key, int(info.get("size") or 0), _mtime(info), info.get("ETag"))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        base = prefix.rpartition("/")[0]
        start = f"{self.root}/{base}" if base else self.root
        try:
            with self._errors(prefix, "list"):
                if self._s3 and prefix:
                    # One LIST with the whole prefix, filtered by the server.
                    found = self.fs.find(self.root, prefix=prefix, detail=True)
                else:
                    found = self.fs.find(start, detail=True)
        except ObjectNotFoundError:
            return
        items = []
        for path, info in found.items():
            key = path[len(self.root) + 1 :] if path.startswith(self.root + "/") else path.lstrip("/")
            if key.startswith(prefix) and info.get("type", "file") == "file":
                items.append(ObjectInfo(key, int(info.get("size") or 0), _mtime(info), info.get("ETag")))
        yield from sorted(items, key=lambda i: i.key)

    def list_dirs(self, prefix: str) -> Iterator[str]:
        check_prefix(prefix)
        path = f"{self.root}/{prefix.rstrip('/')}" if prefix.strip("/") else self.root
        try:
            with self._errors(prefix, "list"):
                entries = self.fs.ls(path, detail=True)
        except ObjectNotFoundError:
            return
        yield from sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")

    def delete(self, key: str) -> None:
        path = self._p(key)
        with contextlib.suppress(ObjectNotFoundError), self._errors(key, "delete"):
            self.fs.rm_file(path)
