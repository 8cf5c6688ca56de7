"""Storage backends behind one small contract (see ``_base``), chosen by URL."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..errors import BackendError, ConfigurationError, describe
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


def open_backend(url: str | os.PathLike[str] | None = None, **options: Any) -> Backend:
    """Open the backend for ``url`` (default ``$S3CKPT_URL``, else ``./.s3ckpt``).

    Every way a URL can be wrong is a ConfigurationError that says what to write instead; a
    filesystem package that is not installed is named, so the fix is one ``pip install``.
    """
    url = _check_url(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = unquote(parts.path) if scheme == "file" else url
        _reject_unknown(options, ("fsync",), url)
        return _open_local(path, fsync=bool(options.get("fsync", True)))
    if scheme == "memory":
        _reject_unknown(options, (), url)
        return MemoryBackend((parts.netloc + parts.path).strip("/") or "default")
    if scheme in ("s3", "s3a"):
        if not parts.netloc:
            raise ConfigurationError(f"{describe(url)} names no bucket: use s3://bucket/prefix")
        _reject_unknown(options, _S3_OPTIONS, url)
        from ._s3 import S3Backend

        return S3Backend(parts.netloc, parts.path, **{k: v for k, v in options.items() if v is not None})
    _reject_unknown(options, ("storage_options",), url)
    storage_options = options.get("storage_options") or {}
    if not isinstance(storage_options, Mapping):
        raise ConfigurationError(f"storage_options must be a dict of fsspec options, not {type(storage_options).__name__}")
    return _open_fsspec(url, storage_options)


def _check_url(url: object) -> str:
    if url is None or url == "":
        url = os.environ.get("S3CKPT_URL") or DEFAULT_URL
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        raise ConfigurationError(
            f"a store URL is a str (s3://bucket/prefix, file:///dir, a directory, memory://name), not {type(url).__name__}"
        )
    if "\x00" in url:
        raise ConfigurationError(f"store URL {describe(url)} contains a NUL character; remove it")
    try:
        # A local path may carry undecodable bytes (surrogate escapes); a URL sent over the wire may not.
        url.encode("utf-8", "surrogateescape" if "://" not in url else "strict")
    except UnicodeEncodeError:
        raise ConfigurationError(
            f"store URL {describe(url)} is not valid Unicode text (a lone surrogate); fix the URL"
        ) from None
    return url


def _open_local(path: str, *, fsync: bool) -> Backend:
    try:
        backend = LocalBackend(path, fsync=fsync)
        # A path below a regular file ("model.bin/store") fails only at the first write, with a
        # bare OSError; say so now.
        ancestor = backend.root
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
    except (OSError, RuntimeError) as exc:  # no permission, a name too long, an unknown ~user, ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigurationError(f"cannot use {describe(path)} as a store directory ({reason}); choose another path") from None
    if not ancestor.is_dir():
        raise ConfigurationError(f"cannot use {describe(path)} as a store directory: {ancestor} is a file; choose another path")
    return backend


# Not named _fsspec: importing the submodule s3ckpt.backends._fsspec binds that name on this package,
# which would replace a function of the same name after the first fsspec store was opened.
def _open_fsspec(url: str, storage_options: Mapping[str, Any]) -> Backend:
    import fsspec
    from fsspec.registry import known_implementations

    for piece in url.split("::"):
        protocol = piece.partition("://")[0].lower() if "://" in piece else piece.lower()
        try:
            fsspec.get_filesystem_class(protocol)
        except ImportError as exc:
            module = str(known_implementations.get(protocol, {}).get("class", "")).partition(".")[0]
            install = f"`pip install {module}`" if module and module != "fsspec" else "the package it names"
            raise ConfigurationError(
                f"{protocol}:// URLs need a filesystem package that is not installed ({exc}); install {install} and try again"
            ) from None
        except ValueError:
            raise ConfigurationError(
                f"unknown URL scheme {describe(protocol)} in {describe(url)}: use s3://bucket/prefix, file:///dir or a "
                "plain directory, "
                "memory://name, or the URL of an installed fsspec filesystem (gs://, az://, ...)"
            ) from None
    from ._fsspec import FsspecBackend

    try:
        return FsspecBackend(url, storage_options=storage_options)
    except ImportError as exc:
        raise ConfigurationError(
            f"{describe(url)} needs a package that is not installed: {exc}; install it and try again"
        ) from None
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"cannot open {describe(url)} with storage_options {sorted(storage_options)}: {exc}") from None
    except OSError as exc:
        raise BackendError(f"cannot open {describe(url)}: {exc}; check the URL, the network and the credentials") from None


def _reject_unknown(options: Mapping[str, Any], allowed: tuple[str, ...], url: str) -> None:
    # region also serves kms: keys, so it is welcome whatever the backend.
    unknown = sorted(k for k, v in options.items() if k not in (*allowed, "region") and v is not None)
    if unknown:
        raise ConfigurationError(
            f"option(s) {', '.join(unknown)} do not apply to {describe(url)}; "
            f"this backend takes: {', '.join(allowed) or 'no options'}"
        )
