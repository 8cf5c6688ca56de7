"""The LangGraph saver is built on the public core only (issue 12: "integrations use only the
public core").

Every module of ``s3ckpt/integrations/langgraph/`` is parsed: what it imports from s3ckpt must be a
public name of a public module, and it must not reach into the store's or a run's internals by
attribute (``store.backend``, ``store.cipher``, ``run._log_key``, ...). The checker is tested too,
on the private uses the saver had before it moved onto the public primitives.
"""

from __future__ import annotations

import ast
import importlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import s3ckpt
from s3ckpt import codec
from s3ckpt.errors import IntegrityError, InvalidArgumentError
from s3ckpt.integrations.langgraph import WRITES_KIND
from s3ckpt.names import encode_segment

PACKAGE = Path(s3ckpt.__file__).parent / "integrations" / "langgraph"
PACKAGE_NAME = "s3ckpt.integrations.langgraph"

#: Core modules an integration may import from (each a public module: no leading underscore).
PUBLIC_MODULES = frozenset(
    {
        "s3ckpt",
        "s3ckpt.errors",
        "s3ckpt.log",
        "s3ckpt.names",
        "s3ckpt.records",
        "s3ckpt.redaction",
        "s3ckpt.references",
        "s3ckpt.store",
    }
)
#: Attributes that are the store's machinery, not its API: the backend, cipher, chunk store,
#: thread pool, run naming, seen tails, config. The public primitives stand for them
#: (``Store.upload``/``read_value``/``name_digest``/``submit``, ``Run.listing``/``put_document``/
#: ``get_document``/``open_document``/``log_key``).
INTERNAL_ATTRIBUTES = frozenset({"backend", "blobs", "cipher", "pool", "names", "seen", "config", "migrations"})


def _resolve(node: ast.ImportFrom, module: str) -> str:
    """The absolute module an ``ImportFrom`` in ``module`` (a module of the package) names."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join(base + ([node.module] if node.module else []))


def _exported(module: str) -> set[str] | None:
    """The module's ``__all__``, or None when it has none (then every public name counts)."""
    names = getattr(importlib.import_module(module), "__all__", None)
    return None if names is None else set(names)


def private_uses(source: str, module: str) -> list[str]:
    """What ``source`` (the text of ``module``, a module of the package) uses of the core that is
    not its public API."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "s3ckpt" and not alias.name.startswith(PACKAGE_NAME):
                    found.append(f"line {node.lineno}: import {alias.name} (import names from a public module)")
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, module)
            if target.split(".")[0] != "s3ckpt" or target.startswith(PACKAGE_NAME):
                continue  # a third-party module, or a module of the package itself
            if target not in PUBLIC_MODULES or any(part.startswith("_") for part in target.split(".")):
                found.append(f"line {node.lineno}: from {target} import ... (not a public core module)")
                continue
            exported = _exported(target)
            for alias in node.names:
                if alias.name.startswith("_") or (exported is not None and alias.name not in exported):
                    found.append(f"line {node.lineno}: {target}.{alias.name} is not a public name of {target}")
        elif isinstance(node, ast.Attribute):
            attr = node.attr
            owner = node.value
            if attr in INTERNAL_ATTRIBUTES:
                found.append(f"line {node.lineno}: .{attr} (the core's machinery, not its API)")
            elif (
                attr.startswith("_")
                and not (attr.startswith("__") and attr.endswith("__"))
                and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls"))
            ):
                found.append(f"line {node.lineno}: .{attr} of another object (a private name)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and (name.value.startswith("_") or name.value in INTERNAL_ATTRIBUTES)
            ):
                found.append(f"line {node.lineno}: {node.func.id}(..., {name.value!r})")
    return found


def _modules() -> list[Path]:
    paths = sorted(PACKAGE.glob("*.py"))
    assert len(paths) >= 10, f"the saver's package moved? found {paths}"
    return paths


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_the_saver_uses_only_the_public_core(path: Path) -> None:
    module = f"{PACKAGE_NAME}.{path.stem}" if path.stem != "__init__" else f"{PACKAGE_NAME}.__init__"
    found = private_uses(path.read_text(), module)
    assert not found, f"{path.name} uses private core names:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("from ..._names import encode_run_id", "s3ckpt._names"),
        ("from ... import codec", "s3ckpt.codec is not a public name"),
        ("from ...blobs import Upload", "s3ckpt.blobs"),
        ("from ...log import _find_effect", "_find_effect"),
        ("from ...names import encode_run_id", "s3ckpt.names.encode_run_id"),
        ("from s3ckpt.codec import seal_document", "s3ckpt.codec"),
        ("import s3ckpt.crypto", "import s3ckpt.crypto"),
        ("self.store.backend.list(prefix)", ".backend"),
        ("self.store.pool.submit(f)", ".pool"),
        ("store.cipher.name_digest(run_id)", ".cipher"),
        ("self.store.blobs.read_all(m)", ".blobs"),
        ("self.store.names.prefix(run_id)", ".names"),
        ("key = lg.run._log_key(seq)", "._log_key"),
        ("getattr(run, '_load')(1)", "'_load'"),
    ],
)
def test_the_check_finds_private_uses(source: str, says: str) -> None:
    found = private_uses(source, f"{PACKAGE_NAME}.saver")
    assert any(says in f for f in found), found


def test_the_check_allows_the_public_core() -> None:
    source = (
        "from ...errors import ConflictError\nfrom ...names import encode_segment\nfrom ... import Manifest\n"
        "from .ids import _where\nfrom langgraph.checkpoint.base import WRITES_IDX_MAP\n"
        "self._logs.get(x)\nstore.upload(known)\nrun.put_document(n, d, kind=k)\n"
    )
    assert private_uses(source, f"{PACKAGE_NAME}.saver") == []


# -- the primitives the saver is built on ------------------------------------------------------


@pytest.fixture
def store() -> Iterator[s3ckpt.Store]:
    with s3ckpt.open_store(f"memory://public-core-{uuid.uuid4().hex}", key=s3ckpt.generate_key()) as opened:
        yield opened


def test_documents_are_created_once_and_open_only_as_their_kind_and_name(store: s3ckpt.Store) -> None:
    run = store.run("langgraph/t/")
    first = run.put_document("writes/a/b", b'{"x": 1}', kind="test-doc")
    assert first is not None
    assert first.data == b'{"x": 1}'
    assert run.put_document("writes/a/b", b"other", kind="test-doc") is None  # create-if-absent
    got = run.get_document("writes/a/b", kind="test-doc")
    assert got is not None
    assert got.data == b'{"x": 1}'
    assert got.etag == first.etag
    assert run.get_document("writes/a/c", kind="test-doc") is None
    with pytest.raises(IntegrityError):
        run.get_document("writes/a/b", kind="another-kind")
    sealed = store.backend.get(f"{run.prefix}writes/a/b").data
    with pytest.raises(IntegrityError):
        run.open_document("writes/a/c", sealed, kind="test-doc")  # bound to its key
    with pytest.raises(IntegrityError):
        store.run("langgraph/u/").open_document("writes/a/b", sealed, kind="test-doc")  # and its run
    replaced = run.put_document("writes/a/b", b"new", kind="test-doc", create=False)
    assert replaced is not None
    assert run.get_document("writes/a/b", kind="test-doc") == replaced
    listing = run.listing("writes/")
    assert listing.log == {}
    assert listing.documents == {"writes/a/b": replaced.etag}


@pytest.mark.parametrize("name", ["", "HEAD", "log/00000000000000000000", "a//b", "../x", "a/./b", "a\x00b", "\ud800"])
def test_a_document_name_stays_beside_the_log(store: s3ckpt.Store, name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        store.run("r").put_document(name, b"x", kind="test-doc")


@pytest.mark.parametrize("kind", ["", "log", "head", "blob", "config", "keyfile"])
def test_core_kinds_are_not_documents(store: s3ckpt.Store, kind: str) -> None:
    with pytest.raises(InvalidArgumentError):
        store.run("r").put_document("notes/a", b"x", kind=kind)


def test_writes_objects_are_sealed_as_before(store: s3ckpt.Store) -> None:
    """A writes object sealed the way the saver sealed it before (codec.seal_document with the key
    without ``runs/`` as name) opens with Run.open_document, and the reverse: stores written
    before the saver moved onto the public core read as they did."""
    run = store.run("langgraph/t/")
    key = f"{run.prefix}writes/c/t/w/0"
    old = codec.seal_document(store.cipher, WRITES_KIND, key[len("runs/") :], b"old")
    assert run.open_document(key[len(run.prefix) :], old, kind=WRITES_KIND) == b"old"
    assert run.put_document(key[len(run.prefix) :], b"new", kind=WRITES_KIND) is not None
    sealed = store.backend.get(key).data
    assert codec.open_document(store.cipher, WRITES_KIND, key[len("runs/") :], sealed, key=key) == b"new"


def test_values_by_reference_round_trip_and_reuse_chunks(store: s3ckpt.Store) -> None:
    data = os.urandom(300_000)
    with store.upload() as up:
        first = up.put(data)
    assert store.read_value(first) == data
    packs = {info.key for info in store.backend.list("packs/")}
    with store.upload([first]) as up:
        again = up.put(data, previous=first)
    assert again == first
    assert {info.key for info in store.backend.list("packs/")} == packs, "a reused value was uploaded again"
    with store.upload({c.id: c for c in first.chunks}) as up:
        assert up.put(data) == first


def test_an_error_in_an_upload_aborts_it(store: s3ckpt.Store) -> None:
    up = store.upload()

    def fail_inside() -> None:
        with up:
            up.put(os.urandom(10_000))
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        fail_inside()
    with pytest.raises(InvalidArgumentError):
        up.put(b"late")


def test_name_digest_and_encode_segment(store: s3ckpt.Store) -> None:
    assert store.name_digest("run-1") == store.cipher.name_digest("run-1")
    assert encode_segment("a/b") == "a~2Fb"
    assert encode_segment("..") == "~2E."
    assert store.submit(lambda x: x + 1, 1).result() == 2
