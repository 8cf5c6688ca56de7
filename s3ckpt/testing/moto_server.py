"""A moto S3 (and KMS, IAM) server on a free loopback port, that counts and can break requests.

Counting happens at the server, so benchmarks see every request that crossed the wire, retries
included. ``inject`` decides per request whether to fail it before it reaches moto (the write did
not land) or after (the write landed but the client hears an error), which is how the real
"retry after success" and 409 cases are reproduced over HTTP.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Fault = Literal["before-503", "before-500", "before-409", "after-500"]

_ERROR_BODY = {
    "before-503": (503, "SlowDown", "Please reduce your request rate."),
    "before-500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "before-409": (409, "ConditionalRequestConflict", "A conflicting conditional operation is in progress."),
    "after-500": (500, "InternalError", "We encountered an internal error. Please try again."),
}


@dataclass(frozen=True)
class RequestInfo:
    method: str
    path: str
    query: str
    headers: dict[str, str]


@dataclass
class RequestLog:
    """What reached the server: per (method, kind) counts, and bytes in each direction."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    bytes_in: int = 0
    bytes_out: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.faults.clear()
            self.bytes_in = self.bytes_out = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def count(self, method: str | None = None) -> int:
        return sum(n for (m, _), n in self.counts.items() if method is None or m == method)


def _kind(info: RequestInfo) -> str:
    if "list-type" in info.query or info.query.startswith("prefix") or "delimiter" in info.query:
        return "LIST"
    return info.method


_ATOMIC_LOCK = threading.RLock()


def make_moto_conditional_writes_atomic() -> None:
    """Make moto's conditional writes atomic, as S3's are.

    moto checks If-None-Match / If-Match and then writes, with no lock in between (moto/s3/
    responses.py ``put_object``), so two racing creates can both succeed: a difference from S3 that
    would make race tests flaky for the wrong reason. Likewise an overwrite closes the old object's
    buffer while a concurrent GET may still be reading it ("I/O operation on closed file").
    Serialising moto's object handlers restores S3's semantics; it applies to the in-process mock
    and to the server alike. Idempotent.
    """
    from moto.s3.responses import S3Response

    for name in ("put_object", "delete_object", "get_object", "head_object"):
        method = getattr(S3Response, name)
        if getattr(method, "_s3ckpt_atomic", False):
            continue

        def atomic(self: Any, *args: Any, __method: Any = method, **kwargs: Any) -> Any:
            with _ATOMIC_LOCK:
                return __method(self, *args, **kwargs)

        atomic._s3ckpt_atomic = True  # type: ignore[attr-defined]
        setattr(S3Response, name, atomic)


class MotoServer:
    """``with MotoServer() as server: server.endpoint_url``; one per test session is plenty."""

    def __init__(self) -> None:
        self.log = RequestLog()
        self.inject: Callable[[RequestInfo], Fault | None] | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> MotoServer:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        make_moto_conditional_writes_atomic()
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", 0, self._wrap(app), threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-server", daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wrap(self, app: Any) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
        def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            info = RequestInfo(
                method=environ.get("REQUEST_METHOD", ""),
                path=environ.get("PATH_INFO", ""),
                query=environ.get("QUERY_STRING", ""),
                headers={k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")},
            )
            length = int(environ.get("CONTENT_LENGTH") or 0)
            with self.log.lock:
                self.log.counts[(info.method, _kind(info))] += 1
                self.log.bytes_in += length
            fault = self.inject(info) if self.inject is not None else None
            if fault is not None:
                with self.log.lock:
                    self.log.faults[fault] += 1
            if fault is not None and fault.startswith("before"):
                environ["wsgi.input"].read(length)
                return _error(start_response, fault, head=info.method == "HEAD")
            if fault is not None:  # "after": let the request land, then lose the response
                for _ in app(environ, lambda *a, **k: None):
                    pass
                return _error(start_response, fault, head=info.method == "HEAD")
            captured: dict[str, Any] = {}

            def counting_start(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
                captured["headers"] = headers
                return start_response(status, headers, *rest)

            body = list(app(environ, counting_start))
            with self.log.lock:
                self.log.bytes_out += sum(len(b) for b in body)
            return body

        return middleware


def _error(start_response: Callable[..., Any], fault: Fault, *, head: bool = False) -> list[bytes]:
    status, code, message = _ERROR_BODY[fault]
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>').encode()
    reasons = {500: "Internal Server Error", 503: "Service Unavailable", 409: "Conflict"}
    start_response(f"{status} {reasons[status]}", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [] if head else [body]  # a HEAD response has no body (one would corrupt the next on the connection)
