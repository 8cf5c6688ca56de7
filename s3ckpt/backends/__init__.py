"""Storage backends behind one small contract (see ``_base``), chosen by URL."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..errors import ConfigurationError
from ._base import Backend, Capabilities, GetResult, Match, ObjectInfo, PutMode, PutResult
from ._local import LocalBackend
from ._memory import MemoryBackend

if TYPE_CHECKING:
    from ._fsspec import FsspecBackend
    from ._s3 import S3Backend


def __getattr__(name: str) -> Any:
    # boto3 and fsspec cost ~0.3 s to import; a local or memory store never needs them.
    if name == "S3Backend":
        from ._s3 import S3Backend

        return S3Backend
    if name == "FsspecBackend":
        from ._fsspec import FsspecBackend

        return FsspecBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_URL",
    "Backend",
    "Capabilities",
    "FsspecBackend",
    "GetResult",
    "LocalBackend",
    "Match",
    "MemoryBackend",
    "ObjectInfo",
    "PutMode",
    "PutResult",
    "S3Backend",
    "open_backend",
]

#: The embedded default: a directory in the working directory, no cloud needed.
DEFAULT_URL = "./.s3ckpt"

_S3_OPTIONS = ("endpoint_url", "region", "credentials", "retry_mode", "max_attempts", "max_pool_connections")


def open_backend(url: str | None = None, **options: Any) -> Backend:
    """Open the backend for ``url`` (default ``$S3CKPT_URL``, else ``./.s3ckpt``)."""
    url = url or os.environ.get("S3CKPT_URL") or DEFAULT_URL
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = unquote(parts.path) if scheme == "file" else url
        _reject_unknown(options, ("fsync",), url)
        return LocalBackend(path, fsync=bool(options.get("fsync", True)))
    if scheme == "memory":
        _reject_unknown(options, (), url)
        return MemoryBackend((parts.netloc + parts.path).strip("/") or "default")
    if scheme in ("s3", "s3a"):
        if not parts.netloc:
            raise ConfigurationError(f"{url!r} names no bucket: use s3://bucket/prefix")
        _reject_unknown(options, _S3_OPTIONS, url)
        from ._s3 import S3Backend

        return S3Backend(parts.netloc, parts.path, **{k: v for k, v in options.items() if v is not None})
    _reject_unknown(options, ("storage_options",), url)
    storage_options: Mapping[str, Any] = options.get("storage_options") or {}
    from ._fsspec import FsspecBackend

    return FsspecBackend(url, storage_options=storage_options)


def _reject_unknown(options: Mapping[str, Any], allowed: tuple[str, ...], url: str) -> None:
    # region also serves kms: keys, so it is welcome whatever the backend.
    unknown = sorted(k for k, v in options.items() if k not in (*allowed, "region") and v is not None)
    if unknown:
        raise ConfigurationError(
            f"option(s) {', '.join(unknown)} do not apply to {url!r}; this backend takes: {', '.join(allowed) or 'no options'}"
        )
