"""A LangGraph checkpointer on s3ckpt: ``S3ckptSaver(store)`` (docs/langgraph.md).

Each (thread_id, checkpoint_ns) is one s3ckpt run, ``langgraph/<thread>/<ns>`` (both parts
percent-encoded, so the run id parses back). Every operation that changes the thread is one record
of that run's log, created with create-if-absent at the next sequence number after the last record
this saver observed: ``put`` (a checkpoint), ``put_writes`` (a task's pending writes), and the
markers of ``prune``/``delete_for_runs`` (``forget``) and ``delete_thread`` (``drop``). If another
writer appended since this saver last read the thread, the sequence number is taken and the call
raises :class:`s3ckpt.ConflictError`: two graphs (processes, or savers) cannot fork one thread.

Channel values are serialized with the saver's ``serde`` (LangGraph's JsonPlusSerializer, pickle
fallback off). A small value is stored in the record; a large one is an artifact of the record,
content-addressed and deduplicated by chunk. A channel whose version did not change is not stored
again: the record names the stored value of its parent (the large ones by manifest, no upload).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import random
import secrets
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
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

from .._names import log_key
from ..blobs import Upload
from ..errors import ConflictError, FencedError, IntegrityError, InvalidArtifactError, RunDeletedError
from ..log import Entry, Run
from ..records import RECORD_SCHEMA_VERSION, ChunkRef, CommitRecord, Manifest
from ..store import Store

__all__ = ["S3ckptSaver", "parse_run_id", "run_id_for"]

#: Every run this saver writes has an id starting with this.
RUN_PREFIX = "langgraph/"
#: Serialized values up to this size live in the record; larger ones are chunked artifacts.
DEFAULT_INLINE_LIMIT = 4096
#: Runs whose index a saver keeps in memory (least recently used are dropped).
_MAX_CACHED_RUNS = 4096

_Ref = dict[str, Any]


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


@dataclass
class _Log:
    """What a saver knows of one run: its live records, indexed, and the last record observed
    (the position its next record is committed after)."""

    run: Run
    thread_id: str
    ns: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    loaded: bool = False
    tail: Entry | None = None
    #: live put and writes records by seq
    records: dict[int, CommitRecord] = field(default_factory=dict)
    #: checkpoint id -> seq of its put record
    puts: dict[str, int] = field(default_factory=dict)
    #: checkpoint id -> seqs of its writes records, in log order
    writes: dict[str, list[int]] = field(default_factory=dict)
    #: (channel, version) -> (seq of a put record storing it, its ref)
    values: dict[tuple[str, str], tuple[int, _Ref]] = field(default_factory=dict)
    forgotten: set[int] = field(default_factory=set)
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

    def _value(self, record: CommitRecord, ref: _Ref) -> Any:
        if "b" in ref:
            return self._load(ref["t"], base64.b64decode(ref["b"]))
        manifest = record.artifacts.get(ref["a"])
        if manifest is None:
            raise IntegrityError(f"run {record.run_id!r}@{record.seq}: value {ref['a']!r} has no manifest")
        return self._load(ref["t"], self.store.blobs.read_all(manifest))

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
                        if not old.lock.locked():
                            del self._logs[key]
            else:
                self._logs.move_to_end(run_id)
            return lg

    def _fetch(self, run: Run, seqs: Sequence[int]) -> list[Entry]:
        futures = [self.store.pool.submit(run._load, seq) for seq in seqs]
        return [entry for entry in (f.result() for f in futures) if entry is not None]

    def _sync(self, lg: _Log) -> None:
        """Read the records appended since this saver last looked (all of them the first time).
        One GET when nothing is new; a LIST the first time and when something is."""
        run = lg.run
        if lg.loaded:
            nxt = lg.tail.record.seq + 1 if lg.tail is not None else 0
            first = run._load(nxt)
            if first is None:
                return
            entries = [first, *self._fetch(run, [s for s in run._listed_seqs() if s > nxt])]
        else:
            entries = self._fetch(run, run._listed_seqs())
            lg.loaded = True
        for entry in sorted(entries, key=lambda e: e.record.seq):
            self._apply(lg, entry)

    def _apply(self, lg: _Log, entry: Entry) -> None:
        record = entry.record
        seq = record.seq
        if lg.tail is not None and seq <= lg.tail.record.seq:
            return
        before = lg.digests.get(seq - 1)
        if before is not None and record.prev != before:
            raise IntegrityError(
                f"run {lg.run.run_id!r}: record {seq} does not chain to the record before it; run `s3ckpt verify`",
                key=log_key(lg.run.run_id, seq),
            )
        lg.tail = entry
        lg.digests[seq] = entry.digest
        state: dict[str, Any] = record.state if isinstance(record.state, dict) else {}
        if record.kind == "deleted":  # a drop: everything before it is gone
            lg.records.clear()
            lg.puts.clear()
            lg.writes.clear()
            lg.values.clear()
            lg.forgotten.clear()
            lg.digests = {seq: entry.digest}
            return
        if record.kind != "checkpoint" or state.get("lg") != 1 or seq in lg.forgotten:
            return
        op = state.get("op")
        if op == "put":
            lg.records[seq] = record
            lg.puts[state["id"]] = seq
            for channel, ref in state["ch"].items():
                lg.values[(channel, _version_key(ref["v"]))] = (seq, ref)
        elif op == "writes":
            lg.records[seq] = record
            lg.writes.setdefault(state["id"], []).append(seq)
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
        elif state["op"] == "writes" and cid in lg.writes:
            lg.writes[cid] = [s for s in lg.writes[cid] if s != seq]

    def _append(self, lg: _Log, state: dict[str, Any], artifacts: Mapping[str, Manifest], *, drop: bool = False) -> Entry:
        """Commit ``state`` at the seq after the last record observed; ConflictError if taken."""
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
        entry, ours = lg.run._put_record(record)
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
        records = [parent] if parent is not None else []
        records += [lg.records[s] for s in lg.writes.get(checkpoint_id or "", []) if s in lg.records]
        for record in records:
            for manifest in record.artifacts.values():
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
        typed_checkpoint = self._dump_inline(body)
        typed_metadata = self._dump_inline(get_checkpoint_metadata(config, metadata))
        lg = self._log_of(thread_id, ns)
        with lg.lock:
            if not lg.loaded:
                self._sync(lg)
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
            self._append(lg, state, artifacts)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        thread_id, ns, checkpoint_id = self._where(config)
        if checkpoint_id is None:
            raise ValueError("put_writes needs the checkpoint_id of the checkpoint the writes belong to")
        lg = self._log_of(thread_id, ns)
        with lg.lock:
            if not lg.loaded:
                self._sync(lg)
            # No read otherwise: if another writer appended since this saver last read the thread
            # (this graph's put may have lost to it), the append below finds its seq taken.
            stored = {(task, idx) for task, _, idx, _, _, _ in self._pending(lg, checkpoint_id)}
            known, _ = self._known(lg, checkpoint_id)
            entries: list[list[Any]] = []
            artifacts: dict[str, Manifest] = {}
            upload = self.store.blobs.begin(known)
            try:
                for i, (channel, value) in enumerate(writes):
                    idx = WRITES_IDX_MAP.get(channel, i)
                    if idx >= 0 and (task_id, idx) in stored:
                        continue  # idempotent: a task's write at a regular index is stored once
                    entries.append([idx, channel, self._stash(upload, artifacts, f"w/{idx}", value, None)])
                upload.finish()
            except BaseException:
                upload.abort()
                raise
            if not entries:
                return
            state = {"lg": 1, "op": "writes", "id": checkpoint_id, "task": task_id, "path": task_path, "w": entries}
            self._append(lg, state, artifacts)

    @staticmethod
    def _pending(lg: _Log, checkpoint_id: str) -> builtins.list[tuple[str, str, int, str, CommitRecord, _Ref]]:
        """The writes of a checkpoint: (task, channel, idx, path, record, ref) in writes_sort_key
        order. The first write of a (task, idx) wins; special (negative idx) writes overwrite."""
        found: dict[tuple[str, int], tuple[str, str, int, str, CommitRecord, _Ref]] = {}
        for seq in lg.writes.get(checkpoint_id, []):
            record = lg.records.get(seq)
            if record is None:
                continue
            state = cast(dict[str, Any], record.state)
            for idx, channel, ref in state["w"]:
                key = (state["task"], idx)
                if idx >= 0 and key in found:
                    continue
                found[key] = (state["task"], channel, idx, state["path"], record, ref)
        return sorted(found.values(), key=lambda w: writes_sort_key(w[3], w[0], w[2]))

    def _snapshot(self, lg: _Log, checkpoint_id: str) -> tuple[CommitRecord, builtins.list[Any]] | None:
        seq = lg.puts.get(checkpoint_id)
        if seq is None:
            return None
        return lg.records[seq], self._pending(lg, checkpoint_id)

    def _tuple(self, lg: _Log, record: CommitRecord, pending: builtins.list[Any]) -> CheckpointTuple:
        state = cast(dict[str, Any], record.state)
        checkpoint = cast(Checkpoint, self._load_inline(state["checkpoint"]))
        checkpoint["channel_values"] = {channel: self._value(record, ref) for channel, ref in state["ch"].items()}
        where = {"thread_id": lg.thread_id, "checkpoint_ns": lg.ns}
        parent = state["parent"]
        return CheckpointTuple(
            config={"configurable": {**where, "checkpoint_id": state["id"]}},
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, self._load_inline(state["metadata"])),
            parent_config={"configurable": {**where, "checkpoint_id": parent}} if parent else None,
            pending_writes=[(task, channel, self._value(rec, ref)) for task, channel, _, _, rec, ref in pending],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = self._where(config)
        lg = self._log_of(thread_id, ns)
        with lg.lock:
            if checkpoint_id is None or checkpoint_id not in lg.puts:
                self._sync(lg)
            if checkpoint_id is None:
                if not lg.puts:
                    return None
                checkpoint_id = max(lg.puts)
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
        remaining = limit
        for thread_id, ns in where:
            lg = self._log_of(thread_id, ns)
            with lg.lock:
                self._sync(lg)
                snaps = [self._snapshot(lg, cid) for cid in sorted(lg.puts, reverse=True)]
            for snap in snaps:
                assert snap is not None
                record, pending = snap
                state = cast(dict[str, Any], record.state)
                cid = state["id"]
                if (wanted_id and cid != wanted_id) or (before_id and cid >= before_id):
                    continue
                if filter:
                    metadata = self._load_inline(state["metadata"])
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                yield self._tuple(lg, record, pending)

    # -- deletion and copying ------------------------------------------------------------------

    def _delete_objects(self, lg: _Log, seqs: Iterable[int]) -> None:
        backend = self.store.backend
        futures = [self.store.pool.submit(backend.delete, log_key(lg.run.run_id, s)) for s in seqs]
        for f in futures:
            f.result()

    def _drop(self, lg: _Log) -> None:
        """Append a drop marker (a ``deleted`` record, which fences s3ckpt writers too), then
        delete every record before it."""
        with lg.lock:
            self._sync(lg)
            if lg.tail is None or (lg.tail.record.kind == "deleted" and not lg.records):
                return
            marker = self._append(lg, {"lg": 1, "op": "drop"}, {}, drop=True)
            self._delete_objects(lg, [s for s in lg.run._listed_seqs() if s < marker.record.seq])

    def _forget(self, lg: _Log, seqs: set[int]) -> None:
        """Append a forget marker naming ``seqs``, then delete those records. Call under the lock."""
        if not seqs:
            return
        self._append(lg, {"lg": 1, "op": "forget", "seqs": _ranges(seqs)}, {})
        self._delete_objects(lg, sorted(seqs))

    def delete_thread(self, thread_id: str) -> None:
        for thread, ns in self._thread_namespaces(str(thread_id)):
            self._drop(self._log_of(thread, ns))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = set(run_ids)
        if not wanted:
            return
        for thread, ns in self._thread_namespaces(None):
            lg = self._log_of(thread, ns)
            with lg.lock:
                self._sync(lg)
                gone: set[int] = set()
                for cid, seq in lg.puts.items():
                    metadata = self._load_inline(cast(dict[str, Any], lg.records[seq].state)["metadata"])
                    if metadata.get("run_id") in wanted:
                        gone.add(seq)
                        gone.update(s for s in lg.writes.get(cid, []) if s in lg.records)
                self._forget(lg, gone)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}")
        for thread_id in thread_ids:
            for thread, ns in self._thread_namespaces(str(thread_id)):
                lg = self._log_of(thread, ns)
                if strategy == "delete":
                    self._drop(lg)
                    continue
                with lg.lock:
                    self._sync(lg)
                    if not lg.puts:
                        continue
                    latest = max(lg.puts)
                    keep = {lg.puts[latest], *lg.writes.get(latest, [])}
                    self._forget(lg, set(lg.records) - keep)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        if source == target:
            raise ValueError("copy_thread needs two different threads")
        for _, ns in self._thread_namespaces(source):
            src = self._log_of(source, ns)
            with src.lock:
                self._sync(src)
                records = [src.records[s] for s in sorted(src.records)]
            dst = self._log_of(target, ns)
            with dst.lock:
                self._sync(dst)
                for record in records:
                    # Artifacts are copied by reference: the new records name the same chunks.
                    self._append(dst, cast(dict[str, Any], record.state), record.artifacts)

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
