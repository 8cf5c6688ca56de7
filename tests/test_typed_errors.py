"""Bad input to the public API is a typed error, everywhere.

Every public function and method (``s3ckpt.__all__``, Store, Run, Writer, Checkpoint, Session,
Redactor) is called with generated arguments of which at least one is bad: a wrong type, empty,
huge, NaN, a lone surrogate, a negative or fractional seq, a missing path or a directory, a hostile
run id, a bad URL or key, a JSON value no reader can read back. Whatever happens, the only
exceptions that may escape are S3ckptError subclasses that also inherit a fitting builtin
(ValueError, TypeError, KeyError, OSError, RuntimeError). A refusal must also not be a crash in
disguise: its message is one that names the problem (it is not empty).

``test_every_public_callable_is_covered`` fails when a public method is added without a spec here,
so the property keeps covering the whole API. The S3 edge (botocore's exceptions, a missing bucket,
no credentials, an endpoint that is down) is tested against moto's HTTP server and a dead port.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import math
import os
import re
import socket
import stat
import string
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3ckpt
from s3ckpt.backends import MemoryBackend, open_backend
from s3ckpt.backends._s3 import S3Backend, transport_error
from s3ckpt.errors import (
    BucketNotFoundError,
    ConfigurationError,
    CredentialsError,
    EndpointUnreachableError,
    InvalidArgumentError,
    InvalidArtifactError,
    LocalPathError,
    S3ckptError,
    StoreNotFoundError,
)
from s3ckpt.testing.plugin import S3Bucket

FITTING = (ValueError, TypeError, LookupError, OSError, RuntimeError)
EXAMPLES = int(os.environ.get("S3CKPT_TYPED_EXAMPLES", "25"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
DEAD_ENDPOINT = "http://127.0.0.1:1"


def _short(value: object) -> str:
    try:
        text = repr(value)
    except Exception:  # a value built to break repr (or nested too deep for it)
        return f"<{type(value).__name__}>"
    return text if len(text) <= 200 else text[:200] + f"... ({len(text)} chars)"


def expect_typed(what: str, call: Callable[[], object]) -> object:
    """Run ``call``; any exception must be a typed s3ckpt error with a message."""
    try:
        return call()
    except S3ckptError as exc:
        refused = exc
    except Exception as exc:
        raise AssertionError(f"{what} raised {type(exc).__module__}.{type(exc).__qualname__}: {_short(str(exc))}") from exc
    assert isinstance(refused, FITTING), f"{what} raised {type(refused).__name__}, which inherits no fitting builtin"
    assert str(refused).strip(), f"{what} raised {type(refused).__name__} with no message"
    return refused


# -- the places bad values come from ----------------------------------------------------------


@dataclass
class Paths:
    """Local paths that are wrong for a file: each exists (or not) for the whole module."""

    missing: str
    directory: str
    fifo: str
    under_file: str
    file: str
    out_dir: str

    def bad(self) -> list[object]:
        return [
            self.missing, self.directory, self.fifo, self.under_file, "", "\x00", "a\x00b", "\ud800",
            "/proc/self/mem", "/dev/zero", Path(self.directory), Path(self.missing), self.out_dir + "/" + "n" * 300,
        ]  # fmt: skip


class _Deep(list[object]):
    """A list nested ``depth`` deep. repr() of it still recurses past the limit (messages that repr
    a caller's value must survive that); hypothesis prints it short, so a failure report works."""

    depth = 0

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(f"<list nested {self.depth} deep>")


def _deep(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    top = _Deep([value])
    top.depth = depth
    return top


class _Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("<an object whose repr raises>")


def _pick(values: list[Any]) -> st.SearchStrategy[Any]:
    """One of ``values``, by index: neither the strategy's repr nor hypothesis's report of a draw
    reprs the list of hostile values (a bound ``values.__getitem__`` would)."""
    return st.integers(0, len(values) - 1).map(lambda i: values[i])


WRONG_TYPES: list[object] = [
    None, True, False, 0, -1, 1.5, -0.5, 10**30, -(10**30), math.nan, math.inf, -math.inf, b"", b"\xff" * 33,
    bytearray(b"x"), [], [1, 2], (1,), {}, {1: 2}, {1, 2}, object(), _Unprintable(), int, print, Ellipsis, 1j,
]  # fmt: skip
HOSTILE_TEXT: list[str] = [
    "", " ", "\x00", "\ud800", "a\udcffb", "\n", "../..", "..", ".", "/", "runs/../config", "~", "%2e%2e", "con",
    "a" * 5000, "\U0001f4a5" * 300, "\u202e", "\\", "*", "?", "s3c-", "-1", "1.5", "NaN",
]  # fmt: skip
HOSTILE_JSON: list[object] = [
    {"a": math.nan}, {"a": math.inf}, {1: "int key", "1": "str key"}, {"k": "\ud800"}, {"\udcff": 1},
    {(1, 2): 3}, {"a": object()}, {"a": b"bytes"}, {"a": {1, 2}}, 10**5000, _deep(10_000), {"d": _deep(300)},
    {"x": "y" * (3 << 20)}, [math.nan], {"a": [1, {"b": {2: 3}}]}, {"self": io.BytesIO(b"x")},
]  # fmt: skip
BAD_URLS: list[object] = [
    123, b"memory://x", "foo://bucket/x", "gs://bucket/x", "az://c/x", "simplecache::gs://b/x", "s3://",
    "s3://bad!bucket/x", "s3://Bad_Bucket/x", "s3a://b/\ud800", "file:///etc/passwd", "/etc/passwd/x",
    "/proc/x/y", "\x00", "a\x00b", "\ud800", "~nosuchuser/x", "/tmp/" + "n" * 5000, "memory://\ud800",
    "http://127.0.0.1:1/x", ":::", "s3://b/x?y#z",
]  # fmt: skip
BAD_KEYS: list[object] = [
    "", "not-a-key", "K" * 43, "env:S3CKPT_NO_SUCH_VARIABLE", "env:", "passphrase:", "passphrase:short", "kms:",
    "kms:alias/s3ckpt-test", b"x" * 31, b"x" * 33, 42, ["k"], "\ud800", "\x00" * 44,
]  # fmt: skip
BAD_SEQS: list[object] = [-1, 1.5, -0.0, math.nan, math.inf, 10**30, 2**63, True, "1", "0", None, b"1", [1]]


def relative_text() -> st.SearchStrategy[str]:
    # Never an absolute path: a generated URL or path must not create anything outside the sandbox.
    return st.text(max_size=30).map(lambda s: s.lstrip("/~"))


def bad_values(paths: Paths, *, callables: bool = True) -> st.SearchStrategy[Any]:
    """Anything but a good value. ``callables=False`` for a parameter that takes a callable: a
    callable that raises or takes other arguments would only show the user's own error."""
    wrong_types = WRONG_TYPES if callables else [v for v in WRONG_TYPES if not callable(v)]
    values = [
        _pick(wrong_types),
        _pick(HOSTILE_TEXT),
        relative_text(),
        _pick(HOSTILE_JSON),
        _pick(paths.bad()),
        _pick(BAD_URLS),
        _pick(BAD_KEYS),
        _pick(BAD_SEQS),
        st.dictionaries(_pick(HOSTILE_TEXT), _pick(WRONG_TYPES + HOSTILE_JSON), max_size=3),
    ]
    return st.one_of(*values, callables_returning_bad_values()) if callables else st.one_of(*values)


def restore_paths(paths: Paths) -> st.SearchStrategy[Any]:
    """Bad restore targets, all inside the sandbox: a restore writes, so no system path is drawn."""
    inside = [
        paths.missing + "/f",
        paths.directory,
        paths.fifo,
        paths.under_file,
        "",
        "\x00",
        "\ud800",
        paths.out_dir + "/" + "n" * 300,
    ]
    return st.one_of(_pick(WRONG_TYPES), _pick(inside), _pick([Path(paths.directory), Path(paths.out_dir)]))


def callables_returning_bad_values() -> st.SearchStrategy[Any]:
    """Functions a user might pass that return what cannot be stored (they never raise)."""
    returns = _pick([math.nan, object(), "\ud800", {1: 2, "1": 3}, _deep(5000), b"bytes", {"k": {1, 2}}])
    return returns.map(lambda value: lambda *args, **kwargs: value)


# -- the stores and objects the calls are made on ---------------------------------------------


@dataclass
class World:
    kind: str
    url: str
    key: str
    store: s3ckpt.Store
    paths: Paths
    base: s3ckpt.Checkpoint

    def fresh_run(self) -> s3ckpt.Run:
        return self.store.run(f"t-{uuid.uuid4().hex}")

    def run_with_checkpoint(self) -> s3ckpt.Run:
        run = self.fresh_run()
        run.claim(workflow="w", workflow_version="1").commit({"n": 1}, artifacts={"a.bin": b"a" * 100})
        return run

    def session(self) -> s3ckpt.Session:
        return self.store.resume(f"s-{uuid.uuid4().hex}", workflow="w", workflow_version="1")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The whole module runs in a scratch directory, with no store or key in the environment and
    every AWS endpoint pointed at a dead port, so a generated URL or kms: key can reach nothing
    real. Credentials are left alone: the session's moto server sets fake ones that other tests
    need, and with or without them a dead endpoint fails fast."""
    root = tmp_path_factory.mktemp("typed")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        for name in ("S3CKPT_URL", "S3CKPT_KEY", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
            mp.delenv(name, raising=False)
        for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_KMS", "AWS_ENDPOINT_URL_STS"):
            mp.setenv(name, DEAD_ENDPOINT)
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_MAX_ATTEMPTS", "1")
        yield root


@pytest.fixture(scope="module")
def paths(sandbox: Path) -> Paths:
    (sandbox / "a-directory").mkdir()
    (sandbox / "a-file").write_bytes(b"data")
    (sandbox / "out").mkdir()
    os.mkfifo(sandbox / "a-fifo")
    return Paths(
        missing=str(sandbox / "missing"),
        directory=str(sandbox / "a-directory"),
        fifo=str(sandbox / "a-fifo"),
        under_file=str(sandbox / "a-file" / "below"),
        file=str(sandbox / "a-file"),
        out_dir=str(sandbox / "out"),
    )


@pytest.fixture(scope="module", params=["memory", "local"])
def world(request: pytest.FixtureRequest, sandbox: Path, paths: Paths) -> Iterator[World]:
    key = s3ckpt.generate_key()
    url = f"memory://typed-{uuid.uuid4().hex}" if request.param == "memory" else str(sandbox / "store")
    store = s3ckpt.open_store(url, key=key)
    store.run("base").claim(workflow="w", workflow_version="1").commit({"n": 1}, artifacts={"a.bin": b"x" * 5000})
    base = store.run("base").latest()
    assert base is not None
    yield World(request.param, url, key, store, paths, base)
    store.close()
    if request.param == "memory":
        MemoryBackend.wipe(url.removeprefix("memory://"))


# -- what a good value is, per callable ---------------------------------------------------------

#: A good value for a parameter, made per call (some must be fresh: a new run id, a new path).
Good = Callable[[World], Any]


def just(value: object) -> Good:
    return lambda w: value


GOOD_STATE = just({"cursor": 3, "items": ["a", "b"]})


@dataclass
class Target:
    """One public callable: how to get the object it is called on, and a good value per parameter.
    ``**name`` stands for the callable's ``**kwargs``."""

    name: str
    bound: Callable[[World], Callable[..., Any]]
    good: dict[str, Good]

    def __repr__(self) -> str:
        return self.name


def _good_path(w: World) -> str:
    return os.path.join(w.paths.out_dir, f"restored-{uuid.uuid4().hex}")


def _session_state(w: World) -> Callable[..., Any]:
    session = w.session()

    def assign_and_commit(state: Any) -> Any:
        session.state = state
        return session.checkpoint()

    return assign_and_commit


def _redactor_method(name: str) -> Callable[[World], Callable[..., Any]]:
    return lambda w: getattr(s3ckpt.DEFAULT_REDACTOR, name)


def _open_and_close(**kwargs: Any) -> None:
    store = s3ckpt.open_store(**kwargs)
    store.close()


TARGETS = [
    Target(
        "open_store",
        lambda w: _open_and_close,
        {
            "url": lambda w: f"memory://open-{uuid.uuid4().hex}",
            "key": lambda w: w.key,
            "create": just(True),
            "chunker": just(None),
            "kms_endpoint_url": just(None),
            "concurrency": just(2),
            "inline_limit": just(None),
            "commit_attempts": just(None),
            "commit_deadline": just(None),
            "redactor": just(None),
            "backend": just(None),
            "**backend_options": just({}),
        },
    ),
    Target("Store.add_key", lambda w: w.store.add_key, {"key": lambda w: s3ckpt.generate_key(), "label": just("ops")}),
    Target("Store.remove_key", lambda w: w.store.remove_key, {"key_id": just("0" * 16)}),
    Target("Store.migrate", lambda w: w.store.migrate, {"dry_run": just(True)}),
    Target(
        "Store.register_migration",
        lambda w: w.store.register_migration,
        {"workflow": just("w"), "from_version": just("1"), "to_version": just("2"), "fn": just(lambda state: state)},
    ),
    Target("Store.run", lambda w: w.store.run, {"run_id": just("order-42")}),
    Target("Store.upload", lambda w: w.store.upload, {"reuse": just(())}),
    Target("Store.read_value", lambda w: w.store.read_value, {"manifest": lambda w: w.base.record.artifacts["a.bin"]}),
    Target("Store.name_digest", lambda w: w.store.name_digest, {"name": just("order-42")}),
    Target("Store.submit", lambda w: w.store.submit, {"fn": just(lambda: None)}),
    Target(
        "Store.verify", lambda w: w.store.verify, {"run_id": just("base"), "read_data": just(False), "progress": just(None)}
    ),
    Target("Store.delete_run", lambda w: w.store.delete_run, {"run_id": lambda w: w.run_with_checkpoint().run_id}),
    Target(
        "Store.prune",
        lambda w: w.store.prune,
        {
            "keep_last": just(1),
            "keep_within": just(None),
            "run_ids": lambda w: [w.run_with_checkpoint().run_id],
            "dry_run": just(False),
        },
    ),
    Target(
        "Store.gc", lambda w: w.store.gc, {"grace": just(timedelta(hours=2)), "dry_run": just(True), "progress": just(None)}
    ),
    Target(
        "Store.resume",
        lambda w: w.store.resume,
        {
            "run_id": lambda w: f"r-{uuid.uuid4().hex}",
            "workflow": just("w"),
            "workflow_version": just("1"),
            "provenance": just(None),
            "reconcile": just(None),
            "on_version_change": just("migrate"),
            "budget": just(None),
        },
    ),
    Target(
        "Run.claim",
        lambda w: w.fresh_run().claim,
        {"workflow": just("w"), "workflow_version": just("1"), "**provenance": just({})},
    ),
    Target("Run.get", lambda w: w.store.run("base").get, {"seq": just(1), "validate": just("exists")}),
    Target(
        "Run.latest",
        lambda w: w.store.run("base").latest,
        {
            "workflow_version": just(None),
            "provenance": just(None),
            "on_version_change": just("migrate"),
            "validate": just("exists"),
        },
    ),
    Target(
        "Run.resolve_effect",
        lambda w: w.run_with_checkpoint().resolve_effect,
        {"idempotency_key": just("s3c-none"), "sent": just(False), "reference": just(None), "force": just(False)},
    ),
    Target("Run.rollback", lambda w: w.run_with_checkpoint().rollback, {"seq": just(1)}),
    Target("Run.entry", lambda w: w.store.run("base").entry, {"seq": just(0)}),
    Target(
        "Run.append",
        lambda w: w.fresh_run().append,
        {
            "state": GOOD_STATE,
            "after": just(None),
            "writer_id": just("w"),
            "artifacts": just(None),
            "meta": just(None),
            "deletes": just(False),
            "started": just(None),
        },
    ),
    Target("Run.log_key", lambda w: w.store.run("base").log_key, {"seq": just(0)}),
    Target("Run.listing", lambda w: w.store.run("base").listing, {"documents": just("notes/")}),
    Target(
        "Run.put_document",
        lambda w: w.fresh_run().put_document,
        {"name": just("notes/a"), "data": just(b"x"), "kind": just("test-doc"), "create": just(True)},
    ),
    Target("Run.get_document", lambda w: w.store.run("base").get_document, {"name": just("notes/a"), "kind": just("test-doc")}),
    Target(
        "Run.open_document",
        lambda w: w.store.run("base").open_document,
        {"name": just("notes/a"), "sealed": just(b"x" * 64), "kind": just("test-doc")},
    ),
    Target(
        "Writer.commit",
        lambda w: w.fresh_run().claim().commit,
        {
            "state": GOOD_STATE,
            "artifacts": just({"a.bin": b"abc"}),
            "meta": just({"m": 1}),
            "ledger": just(None),
            "progress": just(None),
        },
    ),
    Target("Checkpoint.open_artifact", lambda w: w.base.open_artifact, {"name": just("a.bin")}),
    Target("Checkpoint.read_artifact", lambda w: w.base.read_artifact, {"name": just("a.bin")}),
    Target("Checkpoint.restore_artifact", lambda w: w.base.restore_artifact, {"name": just("a.bin"), "path": _good_path}),
    Target("Checkpoint.evolved", lambda w: w.base.evolved, {"state": GOOD_STATE, "change": just(None)}),
    Target(
        "Session.step",
        lambda w: w.session().step,
        {"name": just("fetch"), "fn": just(lambda: {"ok": True}), "accept": just(None)},
    ),
    Target(
        "Session.emit",
        lambda w: w.session().emit,
        {
            "kind": just("email"),
            "target": just("a@example.com"),
            "payload": just({"body": "hi"}),
            "send": just(lambda key: "ref-1"),
            "idempotency_key": just(None),
            "failed_on": just(()),
            "store_payload": just(False),
        },
    ),
    Target("Session.spend", lambda w: w.session().spend, {"**amounts": just({"usd": 0.5})}),
    Target(
        "Session.checkpoint",
        lambda w: w.session().checkpoint,
        {"artifacts": just(None), "meta": just(None), "progress": just(None)},
    ),
    Target("Session.state", _session_state, {"state": GOOD_STATE}),
    Target(
        "Redactor",
        lambda w: s3ckpt.Redactor,
        {"patterns": just(None), "extra_patterns": just(()), "allow": just(()), "secret_key_names": just(None)},
    ),
    Target(
        "SecretPattern",
        lambda w: s3ckpt.SecretPattern,
        {"kind": just("k"), "regex": just(re.compile("x")), "group": just(0), "anchors": just(("x",))},
    ),
    Target("Redactor.redact", _redactor_method("redact"), {"value": GOOD_STATE}),
    Target("Redactor.redact_text", _redactor_method("redact_text"), {"text": just("hello")}),
    Target("Redactor.found", _redactor_method("found"), {"value": GOOD_STATE}),
    Target("Redactor.is_secret_key", _redactor_method("is_secret_key"), {"key": just("password")}),
    Target("Redactor.is_allowed", _redactor_method("is_allowed"), {"text": just("hello")}),
]

#: Public callables with no argument to get wrong.
NO_ARGUMENTS = {
    "generate_key", "Store.close", "Store.key_files", "Store.runs", "Store.stats", "Run.exists", "Run.history", "Run.records",
    "Run.delete",
    "Writer.parent_checkpoint", "Checkpoint.to_dict", "Session.close",
}  # fmt: skip
#: Public names that are not callables taking user input: error classes, records (pydantic models
#: validate themselves and raise pydantic.ValidationError, a ValueError), constants, option holders.
NOT_CALLED = {"StoreOptions", "Ref", "Ledger", "StepRecord", "AttemptRecord", "EffectRecord", "Manifest", "ChunkRef"}
#: Parameters that take a callable: bad values there are also callables returning bad values.
CALLABLE_PARAMS = {"fn", "send", "accept"}


def _argument_strategy(target: Target, world: World, data: st.DataObject) -> dict[str, Any]:
    names = list(target.good)
    bad = data.draw(st.sets(st.sampled_from(names), min_size=1, max_size=len(names)), label="bad parameters")
    kwargs: dict[str, Any] = {}
    for name in names:
        if name not in bad:
            value = target.good[name](world)
        elif target.name == "Checkpoint.restore_artifact" and name == "path":
            value = data.draw(restore_paths(world.paths), label=name)
        elif name.startswith("**"):
            value = data.draw(
                st.dictionaries(
                    st.sampled_from(["x", "usd", "model", "a b", "\ud800", "_", "workflow"]),
                    bad_values(world.paths),
                    min_size=1,
                    max_size=3,
                ),
                label=name,
            )
        elif name in CALLABLE_PARAMS:
            # Not a callable, or one that returns what cannot be stored; never one that raises, or
            # takes the wrong arguments: what the user's own code raises is the user's to see.
            not_callable = bad_values(world.paths, callables=False)
            value = data.draw(st.one_of(not_callable, callables_returning_bad_values()), label=name)
        else:
            value = data.draw(bad_values(world.paths), label=name)
        if name.startswith("**"):
            kwargs.update(value)
        else:
            kwargs[name] = value
    return kwargs


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
@SETTINGS
@given(data=st.data())
def test_bad_arguments_are_typed_errors(world: World, target: Target, data: st.DataObject) -> None:
    kwargs = _argument_strategy(target, world, data)
    fn = expect_typed(f"setting up {target.name}", lambda: target.bound(world))
    assert callable(fn), f"setting up {target.name} failed: {fn!r}"
    shown = ", ".join(f"{k}={_short(v)}" for k, v in kwargs.items())
    expect_typed(f"{target.name}({shown}) on {world.kind}", lambda: fn(**kwargs))


def _public_callables() -> set[str]:
    found: set[str] = set()
    for name in s3ckpt.__all__:
        obj = getattr(s3ckpt, name)
        if inspect.isfunction(obj):
            found.add(name)
    classes = (s3ckpt.Store, s3ckpt.Run, s3ckpt.Writer, s3ckpt.Checkpoint, s3ckpt.Session, s3ckpt.Redactor)
    for cls in classes:
        for name, member in vars(cls).items():
            if not name.startswith("_") and inspect.isfunction(member):
                found.add(f"{cls.__name__}.{name}")
    return found


def test_every_public_callable_is_covered() -> None:
    """A public method added without a spec here would escape the property above."""
    covered = {t.name for t in TARGETS} | NO_ARGUMENTS
    missing = sorted(_public_callables() - covered)
    assert not missing, f"add a Target (or a NO_ARGUMENTS entry) for: {', '.join(missing)}"
    classes = {n for n in s3ckpt.__all__ if inspect.isclass(getattr(s3ckpt, n))}
    errors = {n for n in classes if issubclass(getattr(s3ckpt, n), BaseException)}
    assert classes - errors - NOT_CALLED <= {t.name for t in TARGETS} | {"Store", "Run", "Writer", "Checkpoint", "Session"}


@pytest.mark.parametrize(
    "target",
    [t for t in TARGETS if t.name.partition(".")[0] in ("Writer", "Session", "Checkpoint")],
    ids=lambda t: t.name,
)
def test_every_callable_takes_its_good_arguments(world: World, target: Target) -> None:
    """The good values are good: without them the property would only test refusals of refusals."""
    kwargs: dict[str, Any] = {}
    for name, good in target.good.items():
        value = good(world)
        if name.startswith("**"):
            kwargs.update(value)
        else:
            kwargs[name] = value
    target.bound(world)(**kwargs)


# -- the edges, case by case, with the messages they owe --------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (123, "not int"),
        ("foo://bucket/x", "unknown URL scheme"),
        ("gs://bucket/x", "pip install gcsfs"),
        ("az://container/x", "pip install adlfs"),
        ("simplecache::gs://b/x", "pip install gcsfs"),
        ("s3://", "names no bucket"),
        ("a\x00b", "NUL"),
        ("s3://b/\ud800", "lone surrogate"),
        ("/etc/passwd/store", "is a file"),
        ("/etc/passwd", "not a directory"),
    ],
)
def test_store_urls_are_configuration_errors(sandbox: Path, url: object, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        s3ckpt.open_store(url, key=s3ckpt.generate_key())  # type: ignore[arg-type]
    assert says in str(caught.value)


def test_a_path_object_is_a_store_url(tmp_path: Path) -> None:
    with s3ckpt.open_store(tmp_path / "store", key=s3ckpt.generate_key()) as store:  # type: ignore[arg-type]
        assert store.backend.url == (tmp_path / "store").as_uri()


def _artifact_cases(paths: Paths) -> list[tuple[str, object, str]]:
    closed = open(paths.file, "rb")  # noqa: SIM115
    closed.close()
    return [
        # paths.missing may have become a store by now (open_store(url=...) creates one): a fresh name
        ("missing", os.path.join(paths.out_dir, f"absent-{uuid.uuid4().hex}"), "does not exist"),
        ("directory", paths.directory, "is a directory"),
        ("fifo", paths.fifo, "not a regular file"),
        ("device", "/dev/zero", "not a regular file"),
        ("unreadable", "/proc/self/mem", "cannot be read"),
        ("below a file", paths.under_file, "is a file, not a directory"),
        ("empty path", "", "does not exist"),
        ("NUL", "a\x00b", "not a usable path"),
        ("text mode", open(paths.file), "binary mode"),
        ("closed", closed, "closed"),
        ("write only", open(os.path.join(paths.out_dir, "w"), "wb"), "not open for reading"),
        ("StringIO", io.StringIO("text"), "binary mode"),
        ("int", 5, "not int"),
        ("not contiguous", memoryview(b"abcdef")[::2], "pass bytes(view)"),
    ]


def test_bad_artifact_sources_are_refused_before_anything_is_written(world: World) -> None:
    writer = world.fresh_run().claim()
    for case, value, says in _artifact_cases(world.paths):
        with pytest.raises(InvalidArtifactError) as caught:
            writer.commit({"case": case}, artifacts={"a.bin": value})
        assert says in str(caught.value), case
        if isinstance(value, str) and value and "\x00" not in value:
            assert caught.value.path == value, case
    assert writer.run.latest() is None, "a refused commit left a checkpoint"
    assert writer.commit({"ok": True}, artifacts={"a.bin": world.paths.file}).read_artifact("a.bin") == b"data"


def test_a_typed_memoryview_is_stored_as_its_bytes(world: World) -> None:
    import array

    items = array.array("i", range(1000))
    checkpoint = world.fresh_run().claim().commit({}, artifacts={"ints": memoryview(items)})
    assert checkpoint.read_artifact("ints") == items.tobytes()


def test_a_stream_that_misbehaves_is_an_invalid_artifact(world: World) -> None:
    class Text:
        def read(self, n: int) -> str:
            return "text"

    class Failing:
        def readinto(self, buffer: memoryview) -> int:
            raise OSError(5, "Input/output error")

    class Lying:
        def readinto(self, buffer: memoryview) -> int:
            return len(buffer) + 1

    writer = world.fresh_run().claim()
    for stream, says in ((Text(), "not bytes"), (Failing(), "Input/output error"), (Lying(), "not a byte count")):
        with pytest.raises(InvalidArtifactError, match=says):
            writer.commit({}, artifacts={"a.bin": stream})


def test_restore_to_a_path_that_cannot_take_the_file(world: World) -> None:
    out = Path(world.paths.out_dir)
    listener = socket.socket(socket.AF_UNIX)
    with contextlib.suppress(OSError):
        (out / "a-socket").unlink()
    listener.bind(str(out / "a-socket"))
    cases: list[tuple[object, type[S3ckptError], str]] = [
        (world.paths.directory, LocalPathError, "is a directory"),
        (out / "no-such-dir" / "f.bin", LocalPathError, "mkdir -p"),
        (world.paths.under_file, LocalPathError, "is not a directory"),
        (world.paths.fifo, LocalPathError, "not a regular file"),
        (out / "a-socket", LocalPathError, "not a regular file"),
        (out / ("n" * 300), LocalPathError, "too long"),
        ("", InvalidArgumentError, "file path"),
        (7, InvalidArgumentError, "file path"),
        (None, InvalidArgumentError, "file path"),
        ("a\x00b", InvalidArgumentError, "not a usable path"),
        ("\ud800", InvalidArgumentError, "not a usable path"),
    ]
    for path, error, says in cases:
        with pytest.raises(error, match=says):
            world.base.restore_artifact("a.bin", path)  # type: ignore[arg-type]
    leftovers = [p.name for p in out.iterdir() if ".s3ckpt-" in p.name]
    assert not leftovers, f"a failed restore left temporary files: {leftovers}"
    assert stat.S_ISFIFO(os.stat(world.paths.fifo).st_mode), "a restore replaced a FIFO"
    assert stat.S_ISSOCK(os.stat(out / "a-socket").st_mode), "a restore replaced a socket"
    listener.close()
    with pytest.raises(InvalidArgumentError, match="artifact name is a str"):
        world.base.read_artifact(["a.bin"])  # type: ignore[arg-type]
    with pytest.raises(s3ckpt.ArtifactNotFoundError, match=r"'a\.bin'"):
        world.base.open_artifact("nope")


# -- S3: every botocore failure becomes an error that says what to do --------------------------


def _no_credentials(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        mp.delenv(name, raising=False)
    mp.setenv("AWS_CONFIG_FILE", str(tmp / "none"))
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp / "none"))
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_s3_without_credentials_says_how_to_configure_them(moto_s3: S3Bucket, tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        _no_credentials(mp, tmp_path)
        with pytest.raises(CredentialsError, match="AWS_ACCESS_KEY_ID") as caught:
            s3ckpt.open_store(moto_s3.url, key=s3ckpt.generate_key(), endpoint_url=moto_s3.endpoint_url)
        assert isinstance(caught.value, ValueError)
        with pytest.raises(CredentialsError, match="could not be found"):
            s3ckpt.open_store(moto_s3.url, key=s3ckpt.generate_key(), credentials={"profile_name": "no-such-profile"})


def test_a_missing_bucket_says_create_it_and_init_says_the_same(moto_s3: S3Bucket) -> None:
    url = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/prefix"
    for create in (False, True):
        with pytest.raises(BucketNotFoundError, match="aws s3 mb") as caught:
            s3ckpt.open_store(url, key=s3ckpt.generate_key(), endpoint_url=moto_s3.endpoint_url, create=create)
        assert isinstance(caught.value, StoreNotFoundError)
        assert isinstance(caught.value, FileNotFoundError)
    backend = open_backend(url, endpoint_url=moto_s3.endpoint_url)
    for operation in (
        lambda: backend.get("config"),
        lambda: backend.put("config", b"x", mode="create"),
        lambda: list(backend.list("runs/")),
        lambda: list(backend.list_dirs("runs/")),
        lambda: backend.get_range("config", 0, 10),
    ):
        with pytest.raises(BucketNotFoundError):
            operation()


def test_an_unreachable_endpoint_fails_fast_and_names_the_endpoint(moto_s3: S3Bucket) -> None:
    started = time.monotonic()
    with pytest.raises(EndpointUnreachableError, match="--endpoint-url") as caught:
        s3ckpt.open_store(moto_s3.url, key=s3ckpt.generate_key(), endpoint_url=DEAD_ENDPOINT, max_attempts=1)
    assert isinstance(caught.value, ConnectionError)
    # Nothing was sent, so the store's retry layer does not multiply botocore's retries.
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"endpoint_url": "not a url"}, "Invalid endpoint"),
        ({"endpoint_url": 5}, "endpoint_url must be"),
        ({"region": "bad region!"}, "region"),
        ({"credentials": {"password": "x"}}, "unknown field"),
        ({"credentials": "key:secret"}, "credentials must be a dict"),
        ({"credentials": {"aws_access_key_id": 5}}, "non-empty strings"),
        ({"retry_mode": "sometimes"}, "retry_mode"),
        ({"max_attempts": "5"}, "max_attempts"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_pool_connections": 1.5}, "max_pool_connections"),
        ({"storage_options": {}}, "do not apply"),
    ],
)
def test_bad_s3_options_are_configuration_errors(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        open_backend("s3://bucket/prefix", **options)


def test_bad_bucket_names_are_configuration_errors(moto_s3: S3Bucket) -> None:
    with pytest.raises(ConfigurationError, match="bucket name"):
        s3ckpt.open_store("s3://bad!bucket/x", key=s3ckpt.generate_key(), endpoint_url=moto_s3.endpoint_url)


@functools.cache
def _backend() -> S3Backend:
    """One S3 backend for the translation tests (making a boto3 client costs ~50 ms)."""
    return S3Backend("bucket", "prefix", region="us-east-1")


def _client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return botocore.exceptions.ClientError(response, "GetObject")


def _botocore_exceptions() -> list[type[Exception]]:
    out = []
    for obj in vars(botocore.exceptions).values():
        if inspect.isclass(obj) and issubclass(obj, botocore.exceptions.BotoCoreError):
            out.append(obj)
    return sorted(out, key=lambda c: c.__name__)


def _instance(cls: type[Exception]) -> Exception:
    fmt = getattr(cls, "fmt", "")
    fields = {name for _, name, _, _ in string.Formatter().parse(fmt) if name}
    required = {
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    return cls(**dict.fromkeys(fields | required, "x"))


@pytest.mark.parametrize("cls", _botocore_exceptions(), ids=lambda c: c.__name__)
def test_every_botocore_exception_becomes_a_typed_error(cls: type[Exception]) -> None:
    translated = _backend()._translate(_instance(cls), "config")
    assert isinstance(translated, S3ckptError), (cls, translated)
    assert isinstance(translated, FITTING), (cls, translated)


@settings(max_examples=200, deadline=None)
@given(
    code=st.one_of(
        st.sampled_from(["NoSuchBucket", "ExpiredToken", "PermanentRedirect", "InvalidBucketName"]), st.text(max_size=12)
    ),
    status=st.integers(0, 600),
)
def test_every_s3_error_response_becomes_a_typed_error(code: str, status: int) -> None:
    translated = _backend()._translate(_client_error(code, status), "config")
    assert isinstance(translated, S3ckptError)
    assert isinstance(translated, FITTING)
    assert str(translated)


@pytest.mark.parametrize(
    ("code", "status", "error", "says"),
    [
        ("NoSuchBucket", 404, BucketNotFoundError, "does not exist"),
        ("ExpiredToken", 400, CredentialsError, "aws sso login"),
        ("PermanentRedirect", 301, ConfigurationError, "--region"),
        ("AuthorizationHeaderMalformed", 400, ConfigurationError, "--region"),
        ("InvalidBucketName", 400, ConfigurationError, "not a valid S3 bucket name"),
        ("AccessDenied", 403, s3ckpt.AccessDeniedError, "IAM"),
        ("SlowDown", 503, s3ckpt.BackendError, "safe to retry"),
    ],
)
def test_s3_error_codes_say_what_to_do(code: str, status: int, error: type[Exception], says: str) -> None:
    translated = _backend()._translate(_client_error(code, status), "config")
    assert isinstance(translated, error)
    assert says in str(translated)


@SETTINGS
@given(
    options=st.fixed_dictionaries(
        {},
        optional={
            "endpoint_url": st.one_of(
                st.sampled_from([DEAD_ENDPOINT, "", "x", "http://", "ftp://h", "\ud800"]), _pick(WRONG_TYPES)
            ),
            "region": st.one_of(st.sampled_from(["us-east-1", "", "bad region", "\x00", "a" * 300]), _pick(WRONG_TYPES)),
            "credentials": st.one_of(
                st.dictionaries(
                    st.sampled_from(["aws_access_key_id", "profile_name", "x"]), st.sampled_from(["", "k", 5, None])
                ),
                _pick(WRONG_TYPES),
            ),
            "retry_mode": st.sampled_from(["standard", "x", None, 5]),
            "max_attempts": st.sampled_from([1, 0, -1, 10**9, 1.5, True, "2", None]),
            "max_pool_connections": st.sampled_from([1, 0, 10**9, 2.5, "4", None]),
        },
    )
)
def test_generated_s3_options_are_typed_errors(sandbox: Path, options: dict[str, Any]) -> None:
    options.setdefault("endpoint_url", DEAD_ENDPOINT)
    options.setdefault("max_attempts", 1)
    expect_typed(
        f"open_store(s3://bucket/p, {_short(options)})",
        lambda: _open_and_close(url="s3://bucket/p", key=s3ckpt.generate_key(), **options),
    )


def test_transport_errors_of_any_aws_service_say_where_to_look() -> None:
    """The same translation serves KMS (the keyring) as S3: what was asked and where its endpoint is set."""
    kms_endpoint = "kms_endpoint_url= or AWS_ENDPOINT_URL_KMS"
    down = transport_error(
        botocore.exceptions.EndpointConnectionError(endpoint_url=DEAD_ENDPOINT), "KMS key alias/x", endpoint=kms_endpoint
    )
    assert isinstance(down, EndpointUnreachableError)
    assert "KMS key alias/x" in str(down)
    assert kms_endpoint in str(down)
    missing = transport_error(botocore.exceptions.NoCredentialsError(), "KMS key alias/x", endpoint=kms_endpoint)
    assert isinstance(missing, CredentialsError)
    assert "aws configure" in str(missing)
