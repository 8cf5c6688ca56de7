"""S3ckptSaver stores no secret it was handed outside channel values.

LangGraph copies every string of ``configurable`` and of the config's ``metadata`` into checkpoint
metadata (an ``anthropic_api_key`` passed through ``configurable`` is a common pattern). The saver
builds its records itself, so it redacts what is not a channel value with the store's redactor:
checkpoint metadata (LangGraph's own keys are checked as names), task paths; and it refuses, with
InvalidArgumentError, a channel name, node name, task or checkpoint id in which the redactor finds a
secret, as LangGraph reads those back by name (docs/langgraph.md, "Redaction"). Channel values are
not redacted (documented), so no secret is planted in them here.

Every object of a local store is opened (records, writes objects, every chunk they reference, with
LangGraph's serialized values decoded) and searched for the planted secrets.
"""

from __future__ import annotations

import base64
import json
import operator
import secrets
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

import s3ckpt
from s3ckpt import codec
from s3ckpt._names import decode_run_id
from s3ckpt.errors import InvalidArgumentError
from s3ckpt.integrations.langgraph import WRITES_KIND, S3ckptSaver
from s3ckpt.records import Manifest
from tests.test_redaction import SECRET_KEYS, SECRETS
from tests.test_redaction_property import LABELS, PLAIN_KEY, SECRET_TEXT, Planted, json_objects, leaks

from .store_objects import assert_packs_covered

SERDE = JsonPlusSerializer(pickle_fallback=False)
#: The kinds of a serialized LangGraph value ([type, base64] in records, {"t", "b"} refs).
SERDE_TYPES = frozenset({"msgpack", "json", "bytes", "bytearray", "null"})


# -- every object of a local store, opened ------------------------------------------------------


def _plain(value: Any) -> Any:
    """A loaded value as JSON-like data: containers as dicts and lists, other objects as their repr."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, dict):
        return {(k if isinstance(k, str | int | float) else repr(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return repr(value)


def _decoded(value: Any, raw: list[str]) -> Any:
    """A record's or writes object's JSON with each serialized value decoded in place; the bytes of
    each, as text, are added to ``raw`` (a secret inside an object the decoder does not walk)."""
    if isinstance(value, list):
        if len(value) == 2 and isinstance(value[0], str) and value[0] in SERDE_TYPES and isinstance(value[1], str):
            data = base64.b64decode(value[1])
            raw.append(data.decode("utf-8", "replace"))
            return {"serialized": _plain(SERDE.loads_typed((value[0], data)))}
        return [_decoded(v, raw) for v in value]
    if isinstance(value, dict):
        if isinstance(value.get("t"), str) and value["t"] in SERDE_TYPES and isinstance(value.get("b"), str):
            data = base64.b64decode(value["b"])
            raw.append(data.decode("utf-8", "replace"))
            return {**value, "b": {"serialized": _plain(SERDE.loads_typed((value["t"], data)))}}
        return {k: _decoded(v, raw) for k, v in value.items()}
    return value


def opened_objects(root: Path, store: s3ckpt.Store) -> dict[str, tuple[Any, str]]:
    """Every object of a local store: (what it holds, with serialized values decoded; its text and
    the bytes of every serialized value in it). Records and writes objects are opened with the
    store's cipher, every chunk they reference read through the blob store. Fails on an object it
    cannot account for, and on bytes of a pack that nothing references (they could not be checked)."""
    out: dict[str, tuple[Any, str]] = {}
    packs: dict[str, int] = {}
    manifests: dict[str, Manifest] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = path.relative_to(root).as_posix()
        data = path.read_bytes()
        parts = key.split("/")
        raw: list[str] = []
        if key == "config" or parts[0] == "keys" or parts[-1].startswith(".lock-"):
            out[key] = (None, data.decode("utf-8", "replace"))
            continue
        if parts[0] == "packs":
            packs[key] = len(data)
            continue
        assert parts[0] == "runs", f"an object this test cannot open: {key}"
        run_id = decode_run_id(parts[1])
        assert run_id is not None
        if len(parts) == 4 and parts[2] == "log":
            record = codec.decode_record(
                store.cipher, data, run_id=run_id, seq=int(parts[3]), key=key, segment=store.names.segment(run_id)
            )
            text = record.model_dump_json()
            out[key] = (_decoded(record.model_dump(mode="json"), raw), "\n".join([text, *raw]))
            manifests.update({f"{key} {name}": m for name, m in record.artifacts.items()})
        elif len(parts) > 3 and parts[2] == "writes":
            plain = codec.open_document(store.cipher, WRITES_KIND, key[len("runs/") :], data, key=key)
            doc = json.loads(plain)
            out[key] = (_decoded(doc, raw), "\n".join([plain.decode("utf-8", "replace"), *raw]))
            manifests.update({f"{key} {name}": Manifest.model_validate(m) for name, m in doc.get("a", {}).items()})
        else:
            raise AssertionError(f"an object this test cannot open: {key}")
    for where, manifest in manifests.items():
        out[f"chunks of {where}"] = (None, store.blobs.read_all(manifest).decode("utf-8", "replace"))
    assert_packs_covered(packs, manifests)
    return out


def store_leaks(root: Path, store: s3ckpt.Store, found: Iterable[str], numbers: Iterable[int | float] = ()) -> list[str]:
    """Every place of every object (and object key) of a local store where one of these strings or
    numbers is found: in a decoded value (a string, a key, part of one) or in the raw text."""
    wanted, numbers = list(found), list(numbers)
    out: list[str] = []
    for key, (value, text) in opened_objects(root, store).items():
        out += [f"{key}: {place}" for place in leaks(value, wanted, numbers)]
        out += [f"{key}: {LABELS.get(s, 'secret')} (raw)" for s in wanted if s in text]
    for path in root.rglob("*"):
        out += [f"object key {path.name}: {LABELS.get(s, 'secret')}" for s in wanted if s in str(path)]
    return sorted(set(out))


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[Path, s3ckpt.Store]]:
    root = tmp_path / "store"
    with s3ckpt.open_store(str(root), key=s3ckpt.generate_key(), fsync=False) as store:
        yield root, store


@pytest.fixture
def two_opens(tmp_path: Path) -> Iterator[tuple[Path, s3ckpt.Store, s3ckpt.Store]]:
    """Two store objects on one directory (two hosts)."""
    root, key = tmp_path / "store", s3ckpt.generate_key()
    with s3ckpt.open_store(str(root), key=key, fsync=False) as one, s3ckpt.open_store(str(root), key=key) as other:
        yield root, one, other


# -- a graph run with secrets in configurable and metadata --------------------------------------

CASES = {c.name: c for c in SECRETS}


class State(TypedDict):
    log: Annotated[list[str], operator.add]


class Inner(TypedDict):
    log: list[str]  # no reducer: the subgraph answers with its one line, which the parent appends


def _graph(saver: S3ckptSaver, visible: str) -> CompiledStateGraph[Any]:
    """plan -> approve (an interrupt) -> act (a subgraph: its own namespace, metadata with parents)."""
    sub = StateGraph(Inner)
    sub.add_node("inner", lambda state: {"log": ["inner"]})
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)

    def approve(state: State) -> dict[str, Any]:
        return {"log": [f"approved:{interrupt('ok?')}"]}

    graph = StateGraph(State)
    graph.add_node("plan", lambda state: {"log": [visible]})
    graph.add_node("approve", approve)
    graph.add_node("act", sub.compile())
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "approve")
    graph.add_edge("approve", "act")
    graph.add_edge("act", END)
    return graph.compile(checkpointer=saver)


def test_secrets_in_configurable_and_metadata_reach_no_object(two_opens: tuple[Path, s3ckpt.Store, s3ckpt.Store]) -> None:
    root, store, other = two_opens
    planted = list(SECRETS)
    anthropic, aws = CASES["anthropic key"].secret, CASES["aws key id"].secret
    configurable: dict[str, Any] = {f"note_{i}": c.text for i, c in enumerate(planted)}
    configurable |= {"thread_id": "t", "anthropic_api_key": anthropic, "aws_key": aws}
    visible = "s3nt-visible-" + secrets.token_hex(4)  # plain text: it must be found where it is stored
    metadata = {"user": "ann", "client_secret": CASES["stripe live"].secret, "api_key": 987654321012345, "plain": visible}
    config: RunnableConfig = {"configurable": configurable, "metadata": metadata}
    app = _graph(S3ckptSaver(store), visible)
    app.invoke({"log": []}, config, durability="sync")
    app.invoke(Command(resume="yes"), config)  # the default durability: writes ride in puts
    app.update_state(config, {"log": ["edited"]})

    # A fresh saver (another host) replays the thread: every stored value still finds its checkpoint.
    fresh = S3ckptSaver(other)
    again = _graph(fresh, visible)
    state = again.get_state({"configurable": {"thread_id": "t"}})
    assert state.values == {"log": [visible, "approved:yes", "inner", "edited"]}
    assert state.next == ()
    history = list(again.get_state_history({"configurable": {"thread_id": "t"}}))
    assert [h.metadata["step"] for h in history if h.metadata] == list(range(len(history) - 2, -2, -1))
    assert {h.metadata["source"] for h in history if h.metadata} == {"input", "loop", "update"}
    for h in history:
        assert h.metadata is not None
        md: dict[str, Any] = dict(h.metadata)
        assert md["user"] == "ann"
        assert md["anthropic_api_key"] == "[REDACTED:secret-field]"
        assert md["aws_key"] == "[REDACTED:aws-access-key-id]"
        assert md["api_key"] == "[REDACTED:secret-field]"
    # the subgraph's checkpoints name their parent (metadata "parents"), kept as it was
    sub = [t for t in fresh.list(None) if t.config["configurable"]["checkpoint_ns"]]
    assert sub
    assert all(t.metadata and list(t.metadata["parents"].values()) for t in sub)
    # list's filter compares with the stored metadata
    root_ns: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    assert len(list(fresh.list(root_ns, filter={"user": "ann"}))) == len(history)
    assert len(list(fresh.list({"configurable": {"thread_id": "t"}}, filter={"source": "update"}))) == 1

    found = store_leaks(root, store, [c.secret for c in planted], [987654321012345])
    assert found == []
    # The search reads metadata and channel values: the plain sentinel is found in both.
    seen = store_leaks(root, store, [visible])
    assert any("/log/" in place for place in seen), seen


def test_the_search_finds_what_is_stored_unredacted(tmp_path: Path) -> None:
    """With redaction off, the same search finds the secrets of metadata and of task paths: the
    property below is not empty."""
    root = tmp_path / "store"
    with s3ckpt.open_store(str(root), key=s3ckpt.generate_key(), redactor=s3ckpt.NO_REDACTION) as store:
        saver = S3ckptSaver(store)
        meta_secret, path_secret = CASES["github classic"].secret, CASES["slack bot"].secret
        config = saver.put(_config("t"), _checkpoint("1"), _md(METADATA, k=meta_secret), {})
        saver.put_writes(config, [("x", 1)], "task", task_path=f"path {path_secret}")
        in_metadata = store_leaks(root, store, [meta_secret])
        assert any("/log/" in place and "['metadata']" in place for place in in_metadata), in_metadata
        in_path = store_leaks(root, store, [path_secret])
        assert any("/writes/" in place and "['path']" in place for place in in_path), in_path


# -- direct puts ------------------------------------------------------------------------------

METADATA: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}


def _md(*parts: Mapping[str, Any], **extra: Any) -> CheckpointMetadata:
    """Checkpoint metadata with keys of the caller's own (LangGraph's type names only its own)."""
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part)
    return cast(CheckpointMetadata, {**out, **extra})


def _config(thread: str, checkpoint_id: str | None = None, **configurable: Any) -> RunnableConfig:
    conf: dict[str, Any] = {**configurable, "thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _checkpoint(cid: str, **fields: Any) -> Checkpoint:
    checkpoint = Checkpoint(
        v=1,
        id=cid,
        ts="2026-01-01T00:00:00+00:00",
        channel_values={"x": 1},
        channel_versions={"x": "1"},
        versions_seen={"node": {"x": "1"}},
        updated_channels=["x"],
    )
    checkpoint.update(fields)  # type: ignore[typeddict-item]
    return checkpoint


def test_nested_metadata_and_objects_without_a_json_type(local: tuple[Path, s3ckpt.Store]) -> None:
    root, store = local
    saver = S3ckptSaver(store)
    aws, bearer, pem = CASES["aws key id"], CASES["bearer header"], CASES["rsa pem"]
    metadata: dict[str, Any] = {
        **METADATA,
        "headers": [["Authorization", "Bearer mF_9.B5f-4.1JqM"], ("X-Trace", "abc")],
        "creds": {"password": 123456789012345, "user": "ann"},
        "nested": {"deep": [{"why": pem.text}], "when": datetime(2026, 1, 2, tzinfo=UTC)},
        "raw": aws.text.encode(),  # bytes: no JSON type, scanned by its repr
        "tags": {"red", "blue"},
        "notes": (bearer.text, "plain"),
    }
    saver.put(_config("t"), _checkpoint("1"), _md(metadata), {"x": "1"})
    got = saver.get_tuple(_config("t"))
    assert got is not None
    md: dict[str, Any] = dict(got.metadata)
    assert md["headers"] == [["Authorization", "[REDACTED:secret-field]"], ["X-Trace", "abc"]]  # msgpack: lists
    assert md["creds"] == {"password": "[REDACTED:secret-field]", "user": "ann"}
    assert md["nested"]["when"] == datetime(2026, 1, 2, tzinfo=UTC)  # kept: its repr holds no secret
    assert "[REDACTED:private-key]" in md["nested"]["deep"][0]["why"]
    assert md["raw"] == repr(aws.text.encode()).replace(aws.secret, "[REDACTED:aws-access-key-id]")
    assert md["tags"] == {"red", "blue"}
    assert md["notes"][1] == "plain"
    assert md["step"] == 0
    assert md["source"] == "loop"
    secrets_ = [aws.secret, pem.secret, "mF_9.B5f-4.1JqM", bearer.secret]
    assert store_leaks(root, store, secrets_, [123456789012345]) == []


def test_run_ids_that_hold_a_secret_are_still_found(local: tuple[Path, s3ckpt.Store]) -> None:
    """A metadata run_id the redactor changes is stored redacted with a keyed digest of itself:
    delete_for_runs and list's filter find it, and another run id that redacts alike is another."""
    root, store = local
    saver = S3ckptSaver(store)
    first, second = "run AKIA" + "QWERTYUIOPASDFGH", "run AKIA" + "ZXCVBNMASDFGHJKL"
    assert store.options.redactor.redact_text(first) == store.options.redactor.redact_text(second)
    config = saver.put(_config("t"), _checkpoint("1"), _md(METADATA, run_id=first), {"x": "1"})
    config = saver.put(config, _checkpoint("2"), _md(METADATA, run_id=second), {})
    saver.put(config, _checkpoint("3"), _md(METADATA, run_id="plain"), {})
    matched = [t.checkpoint["id"] for t in saver.list(_config("t"), filter={"run_id": first})]
    assert matched == ["1"]
    saver.delete_for_runs([first])
    assert [t.checkpoint["id"] for t in S3ckptSaver(store).list(_config("t"))] == ["3", "2"]
    assert store_leaks(root, store, [first, second, "QWERTYUIOPASDFGH", "ZXCVBNMASDFGHJKL"]) == []


SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
REFUSED_PUTS = {
    "channel name": {"channel_versions": {SECRET: "1"}},
    "node name": {"versions_seen": {SECRET: {"x": "1"}}},
    "updated channel": {"updated_channels": [SECRET]},
    "channel a node saw": {"versions_seen": {"node": {SECRET: "1"}}},
    "checkpoint id": {"id": f"id-{SECRET}"},
}


@pytest.mark.parametrize("fields", REFUSED_PUTS.values(), ids=list(REFUSED_PUTS))
def test_a_name_that_holds_a_secret_is_refused_not_stored(local: tuple[Path, s3ckpt.Store], fields: dict[str, Any]) -> None:
    root, store = local
    saver = S3ckptSaver(store)
    with pytest.raises(InvalidArgumentError) as caught:
        saver.put(_config("t"), _checkpoint("1", **fields), METADATA, {})
    assert SECRET not in str(caught.value)
    assert "allow" in str(caught.value)
    assert not (root / "runs").exists()


@pytest.mark.parametrize(
    "metadata",
    [{**METADATA, "parents": {f"node:{SECRET}": "1"}}, {**METADATA, "counters_since_delta_snapshot": {SECRET: (1, 2)}}],
    ids=["parents", "delta counters"],
)
def test_langgraphs_own_metadata_is_checked_as_names(local: tuple[Path, s3ckpt.Store], metadata: dict[str, Any]) -> None:
    """LangGraph's loop reads these back by name (a channel named like a secret key would lose its
    counters to a redactor that hides every scalar under it): checked, never changed."""
    root, store = local
    with pytest.raises(InvalidArgumentError):
        S3ckptSaver(store).put(_config("t"), _checkpoint("1"), _md(metadata), {})
    assert not (root / "runs").exists()
    # A channel named like a secret field keeps its counters as they are.
    saver = S3ckptSaver(store)
    counters = {"api_key": [3, 4], "password": [1, 1]}
    saver.put(_config("t"), _checkpoint("1"), _md(METADATA, counters_since_delta_snapshot=counters), {})
    got = saver.get_tuple(_config("t"))
    assert got is not None
    assert dict(got.metadata)["counters_since_delta_snapshot"] == counters


def test_writes_channels_are_checked_and_task_paths_redacted(local: tuple[Path, s3ckpt.Store]) -> None:
    root, store = local
    saver = S3ckptSaver(store)
    config = saver.put(_config("t"), _checkpoint("1"), METADATA, {"x": "1"})
    with pytest.raises(InvalidArgumentError) as caught:
        saver.put_writes(config, [(SECRET, 1)], "task")
    assert SECRET not in str(caught.value)
    with pytest.raises(InvalidArgumentError):
        saver.put_writes(config, [("x", 1)], f"task {SECRET}")
    assert not (root / "runs" / "langgraph~2Ft~2F" / "writes").exists()
    slack = CASES["slack webhook"]
    saver.put_writes(config, [("x", 2)], "b", task_path=f"~__pregel_pull, {slack.text}")
    saver.put_writes(config, [("x", 3)], "a", task_path="~__pregel_pull, a")
    got = S3ckptSaver(store).get_tuple(config)
    assert got is not None
    assert got.pending_writes == [("b", "x", 2), ("a", "x", 3)]  # by path: "~__pregel_pull, POST ..." first
    assert store_leaks(root, store, [slack.secret]) == []


def test_a_name_the_redactor_allows_is_stored(tmp_path: Path) -> None:
    """The fix the refusal names: a name that is no secret, allowed in the store's redactor."""
    with s3ckpt.open_store(str(tmp_path / "s"), key=s3ckpt.generate_key(), redactor=s3ckpt.Redactor(allow=[SECRET])) as store:
        saver = S3ckptSaver(store)
        checkpoint = _checkpoint("1", channel_versions={SECRET: "1"}, channel_values={SECRET: 5})
        saver.put(_config("t"), checkpoint, METADATA, {SECRET: "1"})
        got = S3ckptSaver(store).get_tuple(_config("t"))
        assert got is not None
        assert got.checkpoint["channel_values"] == {SECRET: 5}


# -- a property: generated metadata and configurable --------------------------------------------

_CONF_KEY = st.one_of(PLAIN_KEY, st.sampled_from(SECRET_KEYS)).filter(
    lambda k: k not in ("thread_id", "checkpoint_ns", "checkpoint_id") and not k.startswith("__")
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    meta=json_objects(max_leaves=5),
    conf=st.lists(st.tuples(_CONF_KEY, SECRET_TEXT), max_size=3),
    path=SECRET_TEXT,
)
def test_no_planted_secret_reaches_the_store(meta: Planted, conf: list[tuple[str, Planted]], path: Planted) -> None:
    """Secrets planted anywhere in a put's metadata (random JSON: keys, values, header pairs,
    name/value objects, under secret-named keys), in strings of ``configurable`` and of the config's
    ``metadata``, and in a task path: none is in any object of the store, and the thread reads back."""
    with tempfile.TemporaryDirectory(prefix="s3ckpt-lg-redaction-") as tmp:
        root = Path(tmp) / "store"
        with s3ckpt.open_store(str(root), key=s3ckpt.generate_key(), fsync=False) as store:
            saver = S3ckptSaver(store)
            strings = {k: p.value for k, p in conf}
            config = _config("t", **strings)
            config["metadata"] = dict(strings)
            cid = str(uuid.uuid4())
            stored = saver.put(config, _checkpoint(cid), _md(meta.value, METADATA), {"x": "1"})
            saver.put_writes(stored, [("x", 2)], "task", task_path=path.value)
            got = S3ckptSaver(store).get_tuple(_config("t"))
            assert got is not None
            assert got.checkpoint["id"] == cid
            assert got.pending_writes == [("task", "x", 2)]
            planted = [meta, path, *(p for _, p in conf)]
            numbers = set().union(*(p.numbers for p in planted))
            assert store_leaks(root, store, set().union(*(p.secrets for p in planted)), numbers) == []
