"""A LangGraph checkpointer on s3ckpt: ``S3ckptSaver(store)`` (docs/langgraph.md).

Each (thread_id, checkpoint_ns) is one s3ckpt run, ``langgraph/<thread>/<ns>`` (both parts
percent-encoded, so the run id parses back). Every checkpoint (``put``) and the markers of
``prune``/``delete_for_runs`` (``forget``) and ``delete_thread`` (``drop``) are records of that
run's log, created with create-if-absent at the next sequence number after the last record this
saver observed. If another writer appended since this saver last read the thread, the sequence
number is taken and the call raises :class:`s3ckpt.ConflictError`: two graphs (processes, or
savers) cannot fork one thread. A ``put_writes`` call is one sealed object beside the log,
``runs/<run>/writes/<checkpoint>/<task>/<writer>/<indexes>``, created with create-if-absent and
never overwritten: it takes no log position, so it overlaps the next ``put``. While puts of the
run are under way (LangGraph's async durability), a ``put_writes`` instead waits for the put whose
parent is its checkpoint and rides in that put's record (``pw``).

Several hosts may write pending writes of one checkpoint (two resumes of one interrupt, a resume
by id after another host ran some tasks). Every read lists the thread, so each host's writes are
seen; and a put names its writer and the other writers' writes it was computed from (``wr``,
``wf``), so once a checkpoint has a child its pending writes are that child's, never a losing
host's.

A thread's latest checkpoint (``get_tuple`` without an id, ``prune``'s keep_latest, ``list``'s
newest first) is the last put of its log, never the largest id: ids are uuid6 values of the
writing host's clock.

What the saver stores that is not a channel value goes through the store's redactor (checkpoint
metadata, task paths); names LangGraph reads back (channel and node names, ids) are checked and
refused when the redactor finds a secret in them (docs/langgraph.md, "Redaction").

Channel values are serialized with the saver's ``serde`` (LangGraph's JsonPlusSerializer, pickle
fallback off). A small value is stored in the record; a large one is an artifact of the record,
content-addressed and deduplicated by chunk. A channel whose version did not change is not stored
again: the record names the stored value of its parent (the large ones by manifest, no upload).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import hashlib
import json
import random
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast
from urllib.parse import quote, unquote

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ... import codec
from ..._names import encode_run_id, parse_seq
from ...blobs import Upload
from ...errors import (
    DAMAGE_FIX,
    ConflictError,
    FencedError,
    IntegrityError,
    InvalidArgumentError,
    InvalidArtifactError,
    ObjectNotFoundError,
    PreconditionFailedError,
    RunDeletedError,
)
from ...log import Entry, Run
from ...records import RECORD_SCHEMA_VERSION, ChunkRef, CommitRecord, Manifest
from ...redaction import MAX_DEPTH, Redactor
from ...store import Store

__all__ = ["S3ckptSaver", "parse_run_id", "run_id_for"]

#: Every run this saver writes has an id starting with this.
RUN_PREFIX = "langgraph/"
#: Serialized values up to this size live in the record; larger ones are chunked artifacts.
DEFAULT_INLINE_LIMIT = 4096
#: Runs whose index a saver keeps in memory (least recently used are dropped).
_MAX_CACHED_RUNS = 4096
#: The kind a writes object is sealed as (docs/langgraph.md, "Pending writes").
WRITES_KIND = "langgraph-writes"

_Ref = dict[str, Any]

#: Metadata LangGraph writes and reads back by name (its loop resumes from them): checked as names
#: are, never changed (docs/langgraph.md, "Redaction").
_LANGGRAPH_METADATA = frozenset({"source", "step", "parents", "counters_since_delta_snapshot"})
#: Names a saver remembers as checked (a graph repeats its channel and node names every step).
_MAX_CLEAN_NAMES = 4096


def run_id_for(thread_id: str, checkpoint_ns: str = "") -> str:
    """The s3ckpt run id of a LangGraph thread's namespace."""
    return f"{RUN_PREFIX}{quote(thread_id, safe='')}/{quote(checkpoint_ns, safe='')}"


def parse_run_id(run_id: str) -> tuple[str, str] | None:
    """(thread_id, checkpoint_ns) of a run written by the saver, or None for any other run."""
    if not run_id.startswith(RUN_PREFIX):
        return None
    parts = run_id[len(RUN_PREFIX) :].split("/")
    if len(parts) != 2:
        return None
    return unquote(parts[0]), unquote(parts[1])


def _put_writer(record: CommitRecord) -> str:
    """The writer whose pending writes a put record counts as its own: ``state.wr`` (kept when
    ``copy_thread`` copies the record), else the record's writer."""
    state = cast(dict[str, Any], record.state)
    return str(state.get("wr") or record.writer_id)


def _version_key(version: Any) -> str:
    return f"{type(version).__name__}:{version}"


def _ranges(seqs: Iterable[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for seq in sorted(seqs):
        if out and out[-1][1] == seq - 1:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


def _segment(text: str) -> str:
    """A key segment for a checkpoint or task id (injective; "~" alone for the empty string,
    which no escaped name can be)."""
    return encode_run_id(text) if text else "~"


def _idx_name(idxs: Sequence[int]) -> str:
    name = "_".join(str(i) for i in idxs)
    return name if len(name) <= 64 else "h" + hashlib.sha256(name.encode()).hexdigest()


def writes_prefix(run_prefix: str, checkpoint_id: str) -> str:
    """Where the writes objects of one checkpoint live, under the run's prefix (``Run.prefix``)."""
    return f"{run_prefix}writes/{_segment(checkpoint_id)}/"


def writes_key(run_prefix: str, checkpoint_id: str, task_id: str, idxs: Sequence[int], writer: str | None, t: int = 0) -> str:
    """The key of the writes object of one ``put_writes`` call (its writes' indexes, in order) by
    one writer (a saver's ``writer_id``), written at ``t``. A call with a special channel (negative
    index) is named by its time too: special writes supersede earlier ones by a newer object, so
    no object is ever overwritten, and what a key names never changes. ``writer=None`` is the
    layout before writers were named (read, never written)."""
    name = _idx_name(idxs)
    if writer is None:
        return f"{writes_prefix(run_prefix, checkpoint_id)}{_segment(task_id)}/{name}"
    if any(i < 0 for i in idxs):
        name = f"{name}.{t}"
    return f"{writes_prefix(run_prefix, checkpoint_id)}{_segment(task_id)}/{_segment(writer)}/{name}"


def _recorded_run_id(store: Store, run_id: str) -> str:
    """A metadata ``run_id`` as stored: redacted, and, when redaction changed it, followed by a
    keyed digest of itself (as s3ckpt records names), so ``delete_for_runs`` still finds it."""
    recorded = store.options.redactor.redact_text(run_id)
    return recorded if recorded == run_id else f"{recorded}~{store.cipher.name_digest(run_id)}"


def _redact_any(redactor: Redactor, value: Any) -> Any:
    """``redactor.redact`` of a value that may hold objects JSON has no type for (a datetime, a
    set, a model: metadata is serialized by LangGraph's serde). Each such object is scanned by its
    repr: kept when that holds no secret, else replaced by the redacted repr; under a secret-named
    key it is hidden like any scalar."""
    token = secrets.token_hex(8)
    objects: builtins.list[Any] = []

    def stand_in(obj: Any) -> str:
        objects.append(obj)
        return f"\x00s3ckpt-object-{token}-{len(objects) - 1}\x00"

    def shadow(v: Any, depth: int) -> Any:
        if v is None or isinstance(v, str | int | float):
            return v
        if depth >= MAX_DEPTH:
            raise InvalidArgumentError(f"cannot redact checkpoint metadata nested more than {MAX_DEPTH} levels deep")
        if isinstance(v, dict):
            return {
                (k if k is None or isinstance(k, str | int | float) else stand_in(k)): shadow(x, depth + 1)
                for k, x in v.items()
            }
        if isinstance(v, list):
            return [shadow(x, depth + 1) for x in v]
        if isinstance(v, tuple) and type(v) is tuple:
            return tuple(shadow(x, depth + 1) for x in v)
        return stand_in(v)

    def back(v: Any) -> Any:
        if isinstance(v, str):
            if v.startswith("\x00s3ckpt-object-") and v.endswith("\x00"):
                _, _, tail = v[:-1].rpartition("-")
                if v == f"\x00s3ckpt-object-{token}-{tail}\x00":
                    obj = objects[int(tail)]
                    text = repr(obj)
                    redacted = redactor.redact_text(text)
                    return obj if redacted == text else redacted
            return v
        if isinstance(v, dict):
            return {back(k): back(x) for k, x in v.items()}
        if isinstance(v, list):
            return [back(x) for x in v]
        if isinstance(v, tuple):
            return tuple(back(x) for x in v)
        return v

    return back(redactor.redact(shadow(value, 0)))


@dataclass(frozen=True)
class _Writes:
    """One writes object: the writes of one put_writes call of a task on a checkpoint."""

    key: str
    checkpoint_id: str
    task: str
    path: str
    #: [idx, channel, ref] for each write
    w: builtins.list[builtins.list[Any]]
    artifacts: dict[str, Manifest]
    #: when it was written (time_ns), the order in which writes of one (task, idx) apply
    t: int
    #: the saver (``writer_id``) that wrote it; None in objects written before writers were named
    writer: str | None
    etag: str | None = None

    def ident(self, run_prefix: str) -> str:
        """Its name whether it is an object or rides in a record: the key of its object."""
        return writes_key(run_prefix, self.checkpoint_id, self.task, [w[0] for w in self.w], self.writer, self.t)


@dataclass
class _Waiting:
    """A put_writes call waiting to ride in the record of the next put whose parent is its checkpoint."""

    checkpoint_id: str
    #: None while the put_writes call is still serializing its values
    wo: _Writes | None = None
    #: set by the put that took it, once its record is committed (stored) or failed (not stored)
    finished: bool = False
    stored: bool = False


#: How long a waiting put_writes gives LangGraph to start the next put once none is under way.
_WAIT_GRACE = 0.02
#: At most this many put_writes calls of a run wait at once (each holds one of LangGraph's
#: executor threads, which a fan-out's tasks need too); the others write alone at once.
_MAX_RIDERS = 3
#: Longest a put_writes waits for a put to carry its writes.
_WAIT_MAX = 5.0


@dataclass
class _Log:
    """What a saver knows of one run: its live records, indexed, and the last record observed
    (the position its next record is committed after)."""

    run: Run
    thread_id: str
    ns: str
    #: guards this index; held briefly (put_writes takes only this one)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: taken before ``lock`` by whatever moves the log position (put, reads of the log, deletion,
    #: copies); held across a record's PUT, while ``lock`` is released for it
    commit: threading.Lock = field(default_factory=threading.Lock)
    loaded: bool = False
    tail: Entry | None = None
    #: live put records by seq
    records: dict[int, CommitRecord] = field(default_factory=dict)
    #: checkpoint id -> seq of its put record
    puts: dict[str, int] = field(default_factory=dict)
    #: writes objects by key
    wobjs: dict[str, _Writes] = field(default_factory=dict)
    #: checkpoint id -> keys of its writes objects
    writes: dict[str, set[str]] = field(default_factory=dict)
    #: (channel, version) -> (seq of a put record storing it, its ref)
    values: dict[tuple[str, str], tuple[int, _Ref]] = field(default_factory=dict)
    forgotten: set[int] = field(default_factory=set)
    #: put calls under way (entered, maybe waiting for ``commit``)
    puts_active: int = 0
    #: checkpoint id -> artifacts of its put while the record's PUT is under way (so writes of
    #: that checkpoint reuse its chunks, as they would once it is committed)
    inflight: dict[str, dict[str, Manifest]] = field(default_factory=dict)
    #: checkpoint id -> put_writes calls of it uploading large values (its child put waits for
    #: them, to reuse their chunks as it would have in order)
    uploading: dict[str, int] = field(default_factory=dict)
    #: when the last put ended (time.monotonic)
    last_put_end: float = 0.0
    #: put_writes calls waiting to ride in the next put's record
    waiting: builtins.list[_Waiting] = field(default_factory=list)
    #: parent ids of the puts applied (a checkpoint listed here has its child: no put will
    #: carry its writes any more)
    parents: set[str] = field(default_factory=set)
    #: checkpoint id -> seqs of the live put records whose parent it is (the latest one says
    #: which of its pending writes count: docs/langgraph.md, "Pending writes of a checkpoint")
    children: dict[str, set[int]] = field(default_factory=dict)
    #: notified (on ``lock``) when a put ends or a waiting put_writes is finished
    changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    digests: dict[int, str] = field(default_factory=dict)


class S3ckptSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpointer storing every thread in an s3ckpt store (encrypted, deduplicated,
    committed with conditional puts). Thread-safe; the async methods run the sync ones in a thread.

    ``store``: an open :class:`s3ckpt.Store`. ``serde``: LangGraph's serializer (default
    JsonPlusSerializer without pickle fallback; a serializer that answers with pickle is refused).
    ``inline_limit``: serialized values up to this many bytes are stored inside the record.
    """

    def __init__(
        self, store: Store, *, serde: SerializerProtocol | None = None, inline_limit: int = DEFAULT_INLINE_LIMIT
    ) -> None:
        super().__init__(serde=serde or JsonPlusSerializer(pickle_fallback=False))
        self.store = store
        self.inline_limit = inline_limit
        self.writer_id = secrets.token_hex(8)
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self._logs_lock = threading.Lock()
        #: names checked against the store's redactor and found clean
        self._clean_names: dict[str, None] = {}

    # -- redaction (docs/langgraph.md, "Redaction") ---------------------------------------------

    def _check_name(self, text: str, what: str, *, remember: bool = True) -> None:
        """Refuse a name LangGraph reads back by name (a channel, a node, a task or checkpoint id)
        in which the store's redactor finds a secret: stored redacted, it would no longer name what
        it names; stored as it is, the secret would be in the store."""
        if text in self._clean_names:
            return
        redactor = self.store.options.redactor
        if redactor.redact_text(text) != text:
            kinds = ", ".join(sorted(set(redactor.found(text))))
            raise InvalidArgumentError(
                f"the LangGraph {what} {redactor.redact_text(text)!r} holds what the store's redactor takes for "
                f"a secret ({kinds}). S3ckptSaver stores such names as they are, because LangGraph finds channels, "
                "nodes, tasks and checkpoints by them, so it does not store this one: rename it, or, if it is no "
                "secret, allow it in the store's redactor (open_store(..., redactor=s3ckpt.Redactor(allow=[...])))."
            )
        if remember and len(self._clean_names) < _MAX_CLEAN_NAMES:
            self._clean_names[text] = None

    def _check_names(self, value: Any, what: str, depth: int = 0) -> None:
        """``_check_name`` for every string of a structure (dict keys too); other values are not text."""
        if isinstance(value, str):
            self._check_name(value, what, remember=False)
        elif depth >= MAX_DEPTH:
            raise InvalidArgumentError(f"cannot check a LangGraph {what} nested more than {MAX_DEPTH} levels deep")
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str):
                    self._check_name(k, what)
                self._check_names(v, what, depth + 1)
        elif isinstance(value, list | tuple):
            for v in value:
                self._check_names(v, what, depth + 1)

    def _redact_metadata(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Checkpoint metadata as stored: LangGraph's own keys checked as names, ``run_id`` in its
        recorded form, everything else (the strings LangGraph copies from ``configurable`` and the
        config's ``metadata``, a caller's own) through the store's redactor."""
        own = {k: v for k, v in metadata.items() if k in _LANGGRAPH_METADATA}
        self._check_names(own, "checkpoint metadata")
        rest = {k: v for k, v in metadata.items() if k not in _LANGGRAPH_METADATA}
        run_id = rest.pop("run_id", None)
        out = cast(dict[str, Any], _redact_any(self.store.options.redactor, rest))
        if isinstance(run_id, str):
            out["run_id"] = _recorded_run_id(self.store, run_id)
        elif run_id is not None:
            out["run_id"] = _redact_any(self.store.options.redactor, {"run_id": run_id})["run_id"]
        return {**own, **out}

    def _run_id_forms(self, wanted: Iterable[str]) -> set[str]:
        """What a metadata ``run_id`` of one of ``wanted`` may be stored as: its recorded form, or
        the raw id (written before run ids were redacted)."""
        return {form for w in map(str, wanted) for form in (w, _recorded_run_id(self.store, w))}

    @staticmethod
    def _is_run(stored: Any, forms: set[str]) -> bool:
        return isinstance(stored, str) and stored in forms

    # -- serialization -------------------------------------------------------------------------

    def _dump(self, value: Any) -> tuple[str, bytes]:
        type_, data = self.serde.dumps_typed(value)
        if type_ == "pickle":
            raise InvalidArtifactError(
                f"S3ckptSaver does not store pickles, and the serializer pickled a {type(value).__name__}; "
                "use JsonPlusSerializer(pickle_fallback=False) and values it can serialize"
            )
        return type_, data

    def _load(self, type_: str, data: bytes) -> Any:
        if type_ == "pickle":
            raise IntegrityError("S3ckptSaver never writes pickles, and found one: refusing to unpickle it")
        return self.serde.loads_typed((type_, data))

    def _dump_inline(self, value: Any) -> list[str]:
        type_, data = self._dump(value)
        return [type_, base64.b64encode(data).decode("ascii")]

    def _load_inline(self, typed: Any) -> Any:
        return self._load(typed[0], base64.b64decode(typed[1]))

    def _stash(self, upload: Upload, artifacts: dict[str, Manifest], name: str, value: Any, previous: Manifest | None) -> _Ref:
        type_, data = self._dump(value)
        if len(data) <= self.inline_limit:
            return {"t": type_, "b": base64.b64encode(data).decode("ascii")}
        artifacts[name] = upload.write(data, previous=previous)
        return {"t": type_, "a": name}

    def _value(self, where: str, artifacts: Mapping[str, Manifest], ref: _Ref) -> Any:
        if "b" in ref:
            return self._load(ref["t"], base64.b64decode(ref["b"]))
        manifest = artifacts.get(ref["a"])
        if manifest is None:
            raise IntegrityError(f"{where}: value {ref['a']!r} has no manifest")
        return self._load(ref["t"], self.store.blobs.read_all(manifest))

    @staticmethod
    def _record_value_where(record: CommitRecord) -> str:
        return f"run {record.run_id!r}@{record.seq}"

    # -- writes objects ------------------------------------------------------------------------

    @staticmethod
    def _writes_name(key: str) -> str:
        return key[len("runs/") :]

    def _seal_writes(self, run_id: str, wo: _Writes) -> bytes:
        document = {
            "lg": 1,
            "run": run_id,
            "id": wo.checkpoint_id,
            "task": wo.task,
            "path": wo.path,
            "w": wo.w,
            "t": wo.t,
            "a": {name: m.model_dump(mode="json") for name, m in wo.artifacts.items()},
        }
        if wo.writer is not None:
            document["wr"] = wo.writer
        return codec.seal_document(self.store.cipher, WRITES_KIND, self._writes_name(wo.key), json.dumps(document).encode())

    def _open_writes(self, run_id: str, key: str, sealed: bytes, etag: str | None) -> _Writes:
        plain = codec.open_document(self.store.cipher, WRITES_KIND, self._writes_name(key), sealed, key=key)
        try:
            doc = json.loads(plain)
            wo = _Writes(
                key=key,
                checkpoint_id=str(doc["id"]),
                task=str(doc["task"]),
                path=str(doc["path"]),
                w=[[int(idx), str(channel), dict(ref)] for idx, channel, ref in doc["w"]],
                artifacts={str(n): Manifest.model_validate_json(json.dumps(m)) for n, m in doc["a"].items()},
                t=int(doc["t"]),
                writer=None if doc.get("wr") is None else str(doc["wr"]),
                etag=etag,
            )
            run = doc["run"]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise IntegrityError(f"{key} is not a valid LangGraph writes object: {exc}", key=key) from None
        if run != run_id or wo.ident(self.store.names.prefix(run_id)) != key:
            raise IntegrityError(f"{key} holds the writes of another run, checkpoint or task", key=key)
        return wo

    def _fetch_writes(self, run_id: str, infos: Sequence[tuple[str, str | None]]) -> builtins.list[_Writes]:
        def one(key: str, etag: str | None) -> _Writes | None:
            try:
                got = self.store.backend.get(key)
            except ObjectNotFoundError:
                return None
            return self._open_writes(run_id, key, got.data, got.etag or etag)

        futures = [self.store.pool.submit(one, key, etag) for key, etag in infos]
        return [wo for wo in (f.result() for f in futures) if wo is not None]

    @staticmethod
    def _add_writes(lg: _Log, wo: _Writes) -> None:
        old = lg.wobjs.get(wo.key)
        if old is not None and old.checkpoint_id != wo.checkpoint_id:
            lg.writes.get(old.checkpoint_id, set()).discard(wo.key)
        lg.wobjs[wo.key] = wo
        lg.writes.setdefault(wo.checkpoint_id, set()).add(wo.key)

    @staticmethod
    def _objects(keys: Iterable[str]) -> set[str]:
        """The keys of writes objects among index keys (writes carried in a put record are "@seq/i")."""
        return {k for k in keys if not k.startswith("@")}

    @staticmethod
    def _remove_writes(lg: _Log, key: str) -> None:
        old = lg.wobjs.pop(key, None)
        if old is not None:
            keys = lg.writes.get(old.checkpoint_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del lg.writes[old.checkpoint_id]

    def _store_writes(self, lg: _Log, wo: _Writes) -> _Writes | None:
        """Write a writes object, create-if-absent (a repeat is a no-op: None)."""
        data = self._seal_writes(lg.run.run_id, wo)
        try:
            result = self.store.backend.put(wo.key, data, mode="create")
        except PreconditionFailedError:
            return None
        return replace(wo, etag=result.etag)

    # -- the log of a run ----------------------------------------------------------------------

    def _log_of(self, thread_id: str, ns: str) -> _Log:
        run_id = run_id_for(thread_id, ns)
        with self._logs_lock:
            lg = self._logs.get(run_id)
            if lg is None:
                lg = _Log(self.store.run(run_id), thread_id, ns)
                self._logs[run_id] = lg
                if len(self._logs) > _MAX_CACHED_RUNS:
                    for key, old in builtins.list(self._logs.items())[: len(self._logs) - _MAX_CACHED_RUNS]:
                        if not old.lock.locked() and not old.commit.locked():
                            del self._logs[key]
            else:
                self._logs.move_to_end(run_id)
            return lg

    def _fetch(self, run: Run, seqs: Sequence[int]) -> list[Entry]:
        futures = [self.store.pool.submit(run._load, seq) for seq in seqs]
        return [entry for entry in (f.result() for f in futures) if entry is not None]

    def _sync(self, lg: _Log) -> None:
        """Read what changed since this saver last looked (everything the first time): one LIST of
        the run's prefix (``log/`` and ``writes/``), then the new records and the new or changed
        writes objects, in parallel. Writes objects no longer listed (pruned) are dropped."""
        run = lg.run
        prefix = run.prefix
        seqs: builtins.list[int] = []
        listed: dict[str, str | None] = {}
        for info in self.store.backend.list(prefix):
            rest = info.key[len(prefix) :]
            if rest.startswith("log/"):
                seq = parse_seq(rest[len("log/") :])
                if seq is not None:
                    seqs.append(seq)
            elif rest.startswith("writes/"):
                listed[info.key] = info.etag
        after = lg.tail.record.seq if lg.loaded and lg.tail is not None else -1
        wanted = [
            (key, etag)
            for key, etag in listed.items()
            if key not in lg.wobjs or (etag is not None and lg.wobjs[key].etag != etag)
        ]
        futures = [self.store.pool.submit(run._load, s) for s in sorted(seqs) if s > after]
        found = self._fetch_writes(run.run_id, wanted)
        entries = [e for e in (f.result() for f in futures) if e is not None]
        lg.loaded = True
        for entry in sorted(entries, key=lambda e: e.record.seq):
            self._apply(lg, entry)
        for key in [k for k in self._objects(lg.wobjs) if k not in listed]:
            self._remove_writes(lg, key)
        for wo in found:
            self._add_writes(lg, wo)

    def _apply(self, lg: _Log, entry: Entry) -> None:
        record = entry.record
        seq = record.seq
        if lg.tail is not None and seq <= lg.tail.record.seq:
            return
        before = lg.digests.get(seq - 1)
        if before is not None and record.prev != before:
            raise IntegrityError(
                f"run {lg.run.run_id!r}: record {seq} does not chain to the record before it; {DAMAGE_FIX}",
                key=lg.run._log_key(seq),
            )
        lg.tail = entry
        lg.digests[seq] = entry.digest
        state: dict[str, Any] = record.state if isinstance(record.state, dict) else {}
        if record.kind == "deleted":  # a drop: everything before it is gone
            lg.records.clear()
            lg.puts.clear()
            lg.writes.clear()
            lg.wobjs.clear()
            lg.values.clear()
            lg.forgotten.clear()
            lg.children.clear()
            lg.digests = {seq: entry.digest}
            return
        if record.kind != "checkpoint" or state.get("lg") != 1 or seq in lg.forgotten:
            return
        op = state.get("op")
        if op == "put":
            lg.records[seq] = record
            lg.puts[state["id"]] = seq
            if state["parent"] is not None:
                lg.parents.add(state["parent"])
                lg.children.setdefault(state["parent"], set()).add(seq)
            for channel, ref in state["ch"].items():
                lg.values[(channel, _version_key(ref["v"]))] = (seq, ref)
            writer = _put_writer(record)
            for i, (task, path, t, w) in enumerate(state.get("pw") or ()):
                # pending writes of the parent checkpoint, carried by this record
                self._add_writes(lg, _Writes(f"@{seq}/{i}", state["parent"], task, path, w, {}, t, writer))
        elif op == "forget":
            for first, last in state["seqs"]:
                for gone in range(first, last + 1):
                    self._drop_record(lg, gone)

    @staticmethod
    def _drop_record(lg: _Log, seq: int) -> None:
        lg.forgotten.add(seq)
        record = lg.records.pop(seq, None)
        if record is None or not isinstance(record.state, dict):
            return
        state: dict[str, Any] = record.state
        cid: str = state["id"]
        if state["op"] == "put" and lg.puts.get(cid) == seq:
            del lg.puts[cid]
        siblings = lg.children.get(state.get("parent") or "")
        if siblings is not None:
            siblings.discard(seq)
            if not siblings:
                del lg.children[state["parent"]]
        for i in range(len(state.get("pw") or ())):
            S3ckptSaver._remove_writes(lg, f"@{seq}/{i}")

    def _append(self, lg: _Log, state: dict[str, Any], artifacts: Mapping[str, Manifest], *, drop: bool = False) -> Entry:
        """Commit ``state`` at the seq after the last record observed; ConflictError if taken.
        Call holding ``lg.commit`` and ``lg.lock``; ``lg.lock`` is released during the PUT (the
        position cannot move meanwhile: everything that moves it holds ``lg.commit``)."""
        tail = lg.tail
        seq = tail.record.seq + 1 if tail is not None else 0
        epoch = tail.record.epoch if tail is not None else 1
        record = CommitRecord(
            schema_version=RECORD_SCHEMA_VERSION,
            kind="deleted" if drop else "checkpoint",
            run_id=lg.run.run_id,
            seq=seq,
            epoch=epoch + 1 if drop else epoch,
            writer_id=self.writer_id,
            write_id=secrets.token_hex(16),
            prev=tail.digest if tail is not None else None,
            created_at=datetime.now(UTC),
            checkpoint_seq=None if drop else seq,
            state=state,
            artifacts=dict(artifacts),
            meta={"langgraph": state["op"]},
        )
        lg.lock.release()
        try:
            entry, ours = lg.run._put_record(record)
        finally:
            lg.lock.acquire()
        if not ours:
            raise self._conflict(lg, record, entry.record)
        self._apply(lg, entry)
        return entry

    @staticmethod
    def _conflict(lg: _Log, mine: CommitRecord | None, other: CommitRecord) -> ConflictError:
        epoch = mine.epoch if mine is not None else other.epoch
        if other.kind == "deleted":
            return RunDeletedError(run_id=lg.run.run_id, seq=other.seq, epoch=epoch, newer_epoch=other.epoch)
        if other.epoch > epoch:
            return FencedError(run_id=lg.run.run_id, seq=other.seq, epoch=epoch, newer_epoch=other.epoch)
        return ConflictError(
            f"LangGraph thread {lg.thread_id!r} (namespace {lg.ns!r}, run {lg.run.run_id!r}): seq {other.seq} was "
            "committed by another writer since this saver last read the thread, so two graphs are running the "
            "thread at once. This one stops here, and the thread does not fork; read the thread again "
            "(invoke, get_state) to continue from the other's checkpoint.",
            run_id=lg.run.run_id,
            seq=other.seq,
        )

    def _known(self, lg: _Log, checkpoint_id: str | None) -> tuple[dict[str, ChunkRef], CommitRecord | None]:
        """The chunks of a checkpoint and of its writes (reused, not uploaded again), and its record."""
        known: dict[str, ChunkRef] = {}
        parent = lg.records.get(lg.puts[checkpoint_id]) if checkpoint_id in lg.puts else None
        manifests = builtins.list(parent.artifacts.values()) if parent is not None else []
        if parent is None and checkpoint_id in lg.inflight:
            manifests += lg.inflight[checkpoint_id].values()
        for key in lg.writes.get(checkpoint_id or "", ()):
            manifests += lg.wobjs[key].artifacts.values()
        for manifest in manifests:
            known.update((c.id, c) for c in manifest.chunks)
        return known, parent

    def _find(self, lg: _Log, parent: CommitRecord | None, channel: str, version: Any) -> tuple[_Ref, Manifest | None] | None:
        """The stored value of ``channel`` at ``version``: the parent's, else any live checkpoint's."""
        hit: tuple[CommitRecord, _Ref] | None = None
        if parent is not None:
            ref = cast(dict[str, Any], parent.state)["ch"].get(channel)
            if ref is not None and _version_key(ref["v"]) == _version_key(version):
                hit = (parent, ref)
        if hit is None:
            found = lg.values.get((channel, _version_key(version)))
            if found is not None and found[0] in lg.records:
                hit = (lg.records[found[0]], found[1])
        if hit is None:
            return None
        record, ref = hit
        return dict(ref), (record.artifacts.get(ref["a"]) if "a" in ref else None)

    # -- the checkpointer ----------------------------------------------------------------------

    @staticmethod
    def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
        conf = config["configurable"]
        return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), conf.get("checkpoint_id")

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        thread_id, ns, parent_id = self._where(config)
        body: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values", None) or {}
        # Not redacted, checked: the checkpoint without its values is ids, versions, channel and
        # node names, which LangGraph reads back by name. pending_sends (format < 4) are values.
        self._check_names({k: v for k, v in body.items() if k != "pending_sends"}, "checkpoint")
        if parent_id is not None:
            self._check_name(str(parent_id), "checkpoint id")
        typed_checkpoint = self._dump_inline(body)
        typed_metadata = self._dump_inline(self._redact_metadata(get_checkpoint_metadata(config, metadata)))
        lg = self._log_of(thread_id, ns)
        with lg.lock:
            lg.puts_active += 1
        try:
            return self._put(lg, config, checkpoint, new_versions, values, typed_checkpoint, typed_metadata)
        finally:
            with lg.lock:
                lg.puts_active -= 1
                lg.last_put_end = time.monotonic()
                lg.changed.notify_all()

    def _put(
        self,
        lg: _Log,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
        values: dict[str, Any],
        typed_checkpoint: builtins.list[str],
        typed_metadata: builtins.list[str],
    ) -> RunnableConfig:
        thread_id, ns, parent_id = self._where(config)
        taken: builtins.list[_Waiting] = []
        with lg.commit, lg.lock:
            if not lg.loaded:
                self._sync(lg)
            deadline = time.monotonic() + _WAIT_MAX
            while parent_id is not None and lg.uploading.get(parent_id) and time.monotonic() < deadline:
                lg.changed.wait(0.1)  # large writes of the parent: reuse their chunks
            known, parent = self._known(lg, parent_id)
            parent_artifacts = parent.artifacts if parent is not None else {}
            refs: dict[str, _Ref] = {}
            artifacts: dict[str, Manifest] = {}
            upload = self.store.blobs.begin(known)
            try:
                for channel, version in checkpoint["channel_versions"].items():
                    name = f"c/{channel}"
                    found = None
                    if channel not in new_versions or channel not in values:
                        found = self._find(lg, parent, channel, version)
                    if found is not None:
                        ref, manifest = found
                        if manifest is not None:
                            artifacts[name] = manifest
                    elif channel in values:
                        ref = self._stash(upload, artifacts, name, values[channel], parent_artifacts.get(name))
                    else:
                        continue  # an empty channel
                    ref["v"] = version
                    refs[channel] = ref
                upload.finish()
            except BaseException:
                upload.abort()
                raise
            state = {
                "lg": 1,
                "op": "put",
                "id": checkpoint["id"],
                "parent": parent_id,
                "checkpoint": typed_checkpoint,
                "metadata": typed_metadata,
                "ch": refs,
            }
            if parent_id is not None:
                # The parent's pending writes this checkpoint was computed from: this saver's own
                # (named by "wr", whenever they land) and the others' it read ("wf").
                state["wr"] = self.writer_id
                state["wf"] = self._read_from(lg, parent_id)
            # put_writes calls waiting for this record: the pending writes of its parent ride in it
            taken = self._take(lg, parent_id)
            if taken:
                state["pw"] = [[w.wo.task, w.wo.path, w.wo.t, w.wo.w] for w in taken if w.wo is not None]
            lg.inflight[checkpoint["id"]] = artifacts
            lg.changed.notify_all()
            try:
                self._append(lg, state, artifacts)
                for w in taken:
                    w.stored = True
            finally:
                lg.inflight.pop(checkpoint["id"], None)
                for w in taken:
                    w.finished = True
                lg.changed.notify_all()
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _read_from(self, lg: _Log, parent_id: str) -> builtins.list[str]:
        """The other writers' writes of ``parent_id`` that count as this saver has read them: the
        ones a graph here was handed (the graph replaces a task's writes it ran again with its
        own). Kept as their idents below the parent's writes prefix."""
        prefix = writes_prefix(lg.run.prefix, parent_id)
        read = {wo.ident(lg.run.prefix) for _, _, _, _, wo, _ in self._pending(lg, parent_id) if wo.writer != self.writer_id}
        return sorted(ident[len(prefix) :] for ident in read)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        thread_id, ns, checkpoint_id = self._where(config)
        if checkpoint_id is None:
            raise ValueError("put_writes needs the checkpoint_id of the checkpoint the writes belong to")
        self._check_name(str(checkpoint_id), "checkpoint id")
        self._check_name(str(task_id), "task id")
        for channel, _ in writes:
            self._check_name(channel, "channel name")
        # A task's path only orders pending writes (writes_sort_key): redacted like text.
        task_path = self.store.options.redactor.redact_text(task_path)
        lg = self._log_of(thread_id, ns)
        # No log position and no read: the writes object is created beside the log, so this can
        # run while the next put commits (LangGraph's async durability submits both at once).
        me: _Waiting | None = None
        with lg.lock:
            # idempotent per writer: a repeat of this saver's own write is skipped; another
            # writer's write of the same (task, idx) does not stand in for it
            own = self._pending(lg, checkpoint_id, writer=self.writer_id)
            stored = {(task, idx) for task, _, idx, _, _, _ in own}
            known, _ = self._known(lg, checkpoint_id)
            busy = lg.puts_active > 0 or time.monotonic() - lg.last_put_end < _WAIT_GRACE
            if busy and checkpoint_id not in lg.parents and len(lg.waiting) < _MAX_RIDERS:
                # a put is under way: hold a seat in the next put's record while serializing
                me = _Waiting(checkpoint_id)
                lg.waiting.append(me)
        try:
            self._put_writes(lg, checkpoint_id, writes, task_id, task_path, stored, known, me)
        finally:
            if me is not None:
                with lg.lock:
                    if me in lg.waiting:
                        lg.waiting.remove(me)
                    lg.changed.notify_all()

    def _put_writes(
        self,
        lg: _Log,
        checkpoint_id: str,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        stored: set[tuple[str, int]],
        known: dict[str, ChunkRef],
        me: _Waiting | None,
    ) -> None:
        dumped: builtins.list[tuple[int, str, tuple[str, bytes]]] = []
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            if idx >= 0 and (task_id, idx) in stored:
                continue  # idempotent: a task's write at a regular index is stored once
            dumped.append((idx, channel, self._dump(value)))
        large = any(len(data) > self.inline_limit for _, _, (_, data) in dumped)
        if large:
            with lg.lock:
                lg.uploading[checkpoint_id] = lg.uploading.get(checkpoint_id, 0) + 1
                # The put of this checkpoint may be under way: wait for its chunks, to reuse them.
                deadline = time.monotonic() + 1.0
                while checkpoint_id not in lg.puts and checkpoint_id not in lg.inflight and lg.puts_active > 0:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    lg.changed.wait(left)
                known, _ = self._known(lg, checkpoint_id)
        try:
            self._upload_writes(lg, checkpoint_id, task_id, task_path, dumped, known, me)
        finally:
            if large:
                with lg.lock:
                    lg.uploading[checkpoint_id] -= 1
                    if not lg.uploading[checkpoint_id]:
                        del lg.uploading[checkpoint_id]
                    lg.changed.notify_all()

    def _upload_writes(
        self,
        lg: _Log,
        checkpoint_id: str,
        task_id: str,
        task_path: str,
        dumped: builtins.list[tuple[int, str, tuple[str, bytes]]],
        known: dict[str, ChunkRef],
        me: _Waiting | None,
    ) -> None:
        entries: builtins.list[builtins.list[Any]] = []
        artifacts: dict[str, Manifest] = {}
        upload = self.store.blobs.begin(known)
        try:
            for idx, channel, (type_, data) in dumped:
                if len(data) <= self.inline_limit:
                    ref: _Ref = {"t": type_, "b": base64.b64encode(data).decode("ascii")}
                else:
                    artifacts[f"w/{idx}"] = upload.write(data, previous=None)
                    ref = {"t": type_, "a": f"w/{idx}"}
                entries.append([idx, channel, ref])
            upload.finish()
        except BaseException:
            upload.abort()
            raise
        if not entries:
            return
        t = time.time_ns()
        key = writes_key(lg.run.prefix, checkpoint_id, task_id, [e[0] for e in entries], self.writer_id, t)
        wo = _Writes(key, checkpoint_id, task_id, task_path, entries, artifacts, t, self.writer_id)
        if me is not None and not artifacts and self._ride(lg, me, wo):
            return
        stored_wo = self._store_writes(lg, wo)
        if stored_wo is not None:
            with lg.lock:
                self._add_writes(lg, stored_wo)

    @staticmethod
    def _take(lg: _Log, parent_id: str | None) -> builtins.list[_Waiting]:
        """The waiting put_writes of ``parent_id`` that ride in the record being built (waiting up
        to _WAIT_GRACE for those still serializing; those that are not ready then write alone).
        Call holding ``lg.commit`` and ``lg.lock``."""
        if parent_id is None:
            return []
        limit = time.monotonic() + _WAIT_GRACE
        while any(w.checkpoint_id == parent_id and w.wo is None for w in lg.waiting):
            left = limit - time.monotonic()
            if left <= 0:
                break
            lg.changed.wait(left)
        mine = [w for w in lg.waiting if w.checkpoint_id == parent_id]
        lg.waiting = [w for w in lg.waiting if w.checkpoint_id != parent_id]
        lg.changed.notify_all()
        return [w for w in mine if w.wo is not None]

    @staticmethod
    def _ride(lg: _Log, me: _Waiting, wo: _Writes) -> bool:
        """While puts of the run are under way (LangGraph's async durability: the put chain runs
        behind the tasks), wait for the put whose parent is ``wo``'s checkpoint to carry ``wo`` in
        its record: True once that record is committed. False (write it alone) when that put was
        made already, when no put is under way _WAIT_GRACE after the last one ended, after
        _WAIT_MAX seconds, and at once for special channels (LangGraph may wait for those, e.g.
        before an error handler runs)."""
        if any(idx < 0 or channel.startswith("__") for idx, channel, _ in wo.w):
            return False
        with lg.lock:
            if me not in lg.waiting:  # the put came before the writes were ready
                return False
            me.wo = wo
            lg.changed.notify_all()
            deadline = time.monotonic() + _WAIT_MAX
            while not me.finished:
                now = time.monotonic()
                if me in lg.waiting:  # not taken by a put yet
                    idle = lg.puts_active == 0
                    late = idle and now - lg.last_put_end >= _WAIT_GRACE
                    if late or wo.checkpoint_id in lg.parents or now >= deadline:
                        return False  # put_writes leaves the queue
                    lg.changed.wait(lg.last_put_end + _WAIT_GRACE - now if idle else min(deadline - now, 0.5))
                else:  # taken: wait for its put's commit
                    lg.changed.wait()
            return me.stored

    @staticmethod
    def _pin(lg: _Log, checkpoint_id: str) -> tuple[str, set[str]] | None:
        """What the latest live child of a checkpoint was computed from: its writer (whose writes of
        the checkpoint are its own) and the idents of the other writers' writes it read (``wf``).
        None when the checkpoint has no child (or only one written before children said so)."""
        seqs = lg.children.get(checkpoint_id)
        if not seqs:
            return None
        record = lg.records[max(seqs)]
        state = cast(dict[str, Any], record.state)
        if "wf" not in state:
            return None
        prefix = writes_prefix(lg.run.prefix, checkpoint_id)
        return _put_writer(record), {prefix + tail for tail in state["wf"]}

    @classmethod
    def _counted(cls, lg: _Log, checkpoint_id: str) -> builtins.list[_Writes]:
        """The writes (objects, or carried by records) of a checkpoint that count. Without a child,
        all of them. With one, those its latest child was computed from: for a task its writer
        wrote, that writer's writes only; for any other task, the writes the child's writer read
        (``wf``). A host that lost the race to commit the child wrote its writes too; they are
        kept, and never count."""
        objects = [lg.wobjs[k] for k in lg.writes.get(checkpoint_id, ())]
        pin = cls._pin(lg, checkpoint_id)
        if pin is None:
            return objects
        writer, read = pin
        own = {wo.task for wo in objects if wo.writer == writer}
        return [wo for wo in objects if (wo.writer == writer if wo.task in own else wo.ident(lg.run.prefix) in read)]

    @classmethod
    def _pending(
        cls, lg: _Log, checkpoint_id: str, *, writer: str | None = None
    ) -> builtins.list[tuple[str, str, int, str, _Writes, _Ref]]:
        """The pending writes of a checkpoint (only ``writer``'s when given): (task, channel, idx,
        path, object, ref) in writes_sort_key order. Objects apply in the order they were written:
        the first write of a (task, idx) wins; of special (negative idx) ones, the latest."""
        found: dict[tuple[str, int], tuple[str, str, int, str, _Writes, _Ref]] = {}
        if writer is None:
            counted = cls._counted(lg, checkpoint_id)
        else:
            counted = [lg.wobjs[k] for k in lg.writes.get(checkpoint_id, ()) if lg.wobjs[k].writer == writer]
        objects = sorted(counted, key=lambda wo: (wo.t, wo.key))
        for wo in objects:
            for idx, channel, ref in wo.w:
                key = (wo.task, idx)
                if idx >= 0 and key in found:
                    continue
                found[key] = (wo.task, channel, idx, wo.path, wo, ref)
        return sorted(found.values(), key=lambda w: writes_sort_key(w[3], w[0], w[2]))

    def _snapshot(self, lg: _Log, checkpoint_id: str) -> tuple[CommitRecord, builtins.list[Any]] | None:
        seq = lg.puts.get(checkpoint_id)
        if seq is None:
            return None
        return lg.records[seq], self._pending(lg, checkpoint_id)

    @staticmethod
    def _latest(lg: _Log) -> str | None:
        """The thread's latest checkpoint: the live put with the highest seq of the log (the last
        one committed), not the largest id. Checkpoint ids are uuid6 values of the writing host's
        clock, so a host whose clock is behind writes smaller ids after a host whose clock is not."""
        if not lg.puts:
            return None
        return max(lg.puts.items(), key=lambda item: item[1])[0]

    @staticmethod
    def _newest_first(lg: _Log) -> builtins.list[str]:
        """The live checkpoints of a run, the last committed first (log order, not id order)."""
        return [cid for cid, _ in sorted(lg.puts.items(), key=lambda item: item[1], reverse=True)]

    def _tuple(self, lg: _Log, record: CommitRecord, pending: builtins.list[Any]) -> CheckpointTuple:
        state = cast(dict[str, Any], record.state)
        checkpoint = cast(Checkpoint, self._load_inline(state["checkpoint"]))
        where_record = self._record_value_where(record)
        checkpoint["channel_values"] = {
            channel: self._value(where_record, record.artifacts, ref) for channel, ref in state["ch"].items()
        }
        where = {"thread_id": lg.thread_id, "checkpoint_ns": lg.ns}
        parent = state["parent"]
        return CheckpointTuple(
            config={"configurable": {**where, "checkpoint_id": state["id"]}},
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, self._load_inline(state["metadata"])),
            parent_config={"configurable": {**where, "checkpoint_id": parent}} if parent else None,
            pending_writes=[
                (task, channel, self._value(wo.key, wo.artifacts, ref)) for task, channel, _, _, wo, ref in pending
            ],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = self._where(config)
        lg = self._log_of(thread_id, ns)
        with lg.commit, lg.lock:
            # Always one LIST, also for a checkpoint this saver knows: another host may have
            # stored writes for it (or committed its child) since.
            self._sync(lg)
            if checkpoint_id is None:
                checkpoint_id = self._latest(lg)
                if checkpoint_id is None:
                    return None
            snap = self._snapshot(lg, checkpoint_id)
        return None if snap is None else self._tuple(lg, *snap)

    def _thread_namespaces(self, thread_id: str | None) -> builtins.list[tuple[str, str]]:
        found = (parse_run_id(run_id) for run_id in self.store.runs() if run_id.startswith(RUN_PREFIX))
        return sorted(p for p in found if p is not None and (thread_id is None or p[0] == thread_id))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is None:
            where = self._thread_namespaces(None)
            wanted_id = None
        else:
            conf = config["configurable"]
            thread_id = str(conf["thread_id"])
            if conf.get("checkpoint_ns") is not None:
                where = [(thread_id, str(conf["checkpoint_ns"]))]
            else:
                where = self._thread_namespaces(thread_id)
            wanted_id = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before is not None else None
        wanted_run = (filter or {}).get("run_id")
        run_forms = self._run_id_forms([wanted_run]) if isinstance(wanted_run, str) else set()
        remaining = limit
        for thread_id, ns in where:
            lg = self._log_of(thread_id, ns)
            with lg.commit, lg.lock:
                self._sync(lg)
                order = self._newest_first(lg)
                if before_id is not None:
                    # Before it in the log when the run has it; a checkpoint the run does not
                    # have (deleted, another namespace's) can only be placed by its id.
                    at = lg.puts.get(before_id)
                    order = [c for c in order if (lg.puts[c] < at if at is not None else c < before_id)]
                if wanted_id:
                    order = [c for c in order if c == wanted_id]
                snaps = [self._snapshot(lg, cid) for cid in order]
            for snap in snaps:
                assert snap is not None
                record, pending = snap
                state = cast(dict[str, Any], record.state)
                if filter:
                    # against the metadata as stored: a value that held a secret matches nothing
                    metadata = self._load_inline(state["metadata"])
                    if not all(
                        self._is_run(metadata.get(k), run_forms) if k == "run_id" and run_forms else metadata.get(k) == v
                        for k, v in filter.items()
                    ):
                        continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                yield self._tuple(lg, record, pending)

    # -- deletion and copying ------------------------------------------------------------------

    def _delete_keys(self, keys: Iterable[str]) -> None:
        backend = self.store.backend
        futures = [self.store.pool.submit(backend.delete, key) for key in keys]
        for f in futures:
            f.result()

    def _delete_objects(self, lg: _Log, seqs: Iterable[int], writes: Iterable[str] = ()) -> None:
        self._delete_keys([*(lg.run._log_key(s) for s in seqs), *writes])

    def _drop(self, lg: _Log) -> None:
        """Append a drop marker (a ``deleted`` record, which fences s3ckpt writers too), then
        delete every record before it and every writes object."""
        with lg.commit, lg.lock:
            self._sync(lg)
            if lg.tail is None or (lg.tail.record.kind == "deleted" and not lg.records):
                # Nothing to mark; writes objects without a live checkpoint are only removed.
                self._delete_keys(sorted(self._objects(lg.wobjs)))
                lg.wobjs.clear()
                lg.writes.clear()
                return
            marker = self._append(lg, {"lg": 1, "op": "drop"}, {}, drop=True)
            prefix = lg.run.prefix
            keys = [info.key for info in self.store.backend.list(prefix)]
            seqs = [
                s for s in (parse_seq(k[len(prefix) + 4 :]) for k in keys if k.startswith(prefix + "log/")) if s is not None
            ]
            writes = [k for k in keys if k.startswith(prefix + "writes/")]
            self._delete_objects(lg, [s for s in seqs if s < marker.record.seq], writes)
            lg.wobjs.clear()
            lg.writes.clear()

    def _forget(self, lg: _Log, seqs: set[int], writes: set[str]) -> None:
        """Append a forget marker naming ``seqs``, then delete those records and the writes
        objects ``writes``. For a checkpoint that stays while its child goes: the pending writes
        the removed record carries are first written as writes objects, and, when no child remains
        to say which of its writes count, the writes that do not count (a losing host's) are
        deleted first, so its pending writes stay those its child was computed from. Call holding
        ``lg.commit`` and ``lg.lock``."""
        kept_parents: set[str] = set()
        for seq in sorted(seqs):
            record = lg.records.get(seq)
            state: dict[str, Any] = record.state if record is not None and isinstance(record.state, dict) else {}
            parent = state.get("parent")
            if record is None or parent is None or lg.puts.get(parent) in (None, *seqs):
                continue
            kept_parents.add(parent)
            writer = _put_writer(record)
            for task, path, t, w in state.get("pw") or ():
                wo = _Writes("", parent, task, path, w, {}, t, writer)
                kept = self._store_writes(lg, replace(wo, key=wo.ident(lg.run.prefix)))
                if kept is not None:
                    self._add_writes(lg, kept)
        hidden: set[str] = set()
        for parent in kept_parents:
            remaining = [s for s in lg.children.get(parent, ()) if s not in seqs]
            if remaining and "wf" in cast(dict[str, Any], lg.records[max(remaining)].state):
                continue  # a remaining child says which writes count
            counted = {wo.ident(lg.run.prefix) for _, _, _, _, wo, _ in self._pending(lg, parent)}
            hidden.update(
                k for k in self._objects(lg.writes.get(parent, ())) if lg.wobjs[k].ident(lg.run.prefix) not in counted
            )
        hidden -= writes
        # They do not count while the child is there, so deleting them first changes no reader's view.
        self._delete_keys(sorted(hidden))
        for key in hidden:
            self._remove_writes(lg, key)
        if seqs:
            self._append(lg, {"lg": 1, "op": "forget", "seqs": _ranges(seqs)}, {})
        self._delete_objects(lg, sorted(seqs), sorted(writes))
        for key in writes:
            self._remove_writes(lg, key)

    def delete_thread(self, thread_id: str) -> None:
        for thread, ns in self._thread_namespaces(str(thread_id)):
            self._drop(self._log_of(thread, ns))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = self._run_id_forms(run_ids)
        if not wanted:
            return
        for thread, ns in self._thread_namespaces(None):
            lg = self._log_of(thread, ns)
            with lg.commit, lg.lock:
                self._sync(lg)
                gone: set[int] = set()
                writes: set[str] = set()
                for cid, seq in lg.puts.items():
                    metadata = self._load_inline(cast(dict[str, Any], lg.records[seq].state)["metadata"])
                    if self._is_run(metadata.get("run_id"), wanted):
                        gone.add(seq)
                        writes.update(self._objects(lg.writes.get(cid, ())))
                self._forget(lg, gone, writes)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")
        for thread_id in thread_ids:
            for thread, ns in self._thread_namespaces(str(thread_id)):
                lg = self._log_of(thread, ns)
                if strategy == "delete":
                    self._drop(lg)
                    continue
                with lg.commit, lg.lock:
                    self._sync(lg)
                    latest = self._latest(lg)
                    if latest is None:
                        continue
                    keep = lg.writes.get(latest, set())
                    self._forget(lg, set(lg.records) - {lg.puts[latest]}, self._objects(lg.wobjs) - keep)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        if source == target:
            raise ValueError("copy_thread needs two different threads")
        for _, ns in self._thread_namespaces(source):
            src = self._log_of(source, ns)
            with src.commit, src.lock:
                self._sync(src)
                records = [src.records[s] for s in sorted(src.records)]
                wobjs = [src.wobjs[k] for k in sorted(self._objects(src.wobjs)) if src.wobjs[k].checkpoint_id in src.puts]
            dst = self._log_of(target, ns)
            with dst.commit, dst.lock:
                self._sync(dst)
                for record in records:
                    # Artifacts are copied by reference: the new records name the same chunks.
                    self._append(dst, cast(dict[str, Any], record.state), record.artifacts)
            for wo in wobjs:
                # The same writer in the copy, so the copied records' "wr" and "wf" name them.
                copied = self._store_writes(dst, replace(wo, key=wo.ident(dst.run.prefix), etag=None))
                if copied is not None:
                    with dst.lock:
                        self._add_writes(dst, copied)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions unique across forks (as InMemorySaver's): the counter, then a random fraction."""
        counter = 0 if current is None else int(str(current).split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"

    # -- async: the sync methods in a worker thread --------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(lambda: builtins.list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in items:
            yield item

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
