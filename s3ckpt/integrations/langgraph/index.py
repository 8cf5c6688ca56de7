"""The index: what a saver knows of one run (``_Log``), and the functions that keep it.

A saver keeps, for every run it has touched, its live put records, the stored value of each
(channel, version), its writes objects and the writes carried by put records (``"@seq/i"``), and
the last record observed: the position its next record is committed after. The log's order, not
the checkpoint ids, says which checkpoint is the latest (docs/langgraph.md, "Latest is the last
put of the log").
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from ...errors import DAMAGE_FIX, IntegrityError
from ...log import Entry, Run
from ...records import CommitRecord, Manifest
from .riding import _Waiting
from .values import _Ref
from .writes import _Writes


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
    #: ids of checkpoints removed (by a forget or drop marker, or tombstoned) and not put again:
    #: their writes objects are dead (never read, never reused, collected by ``store.gc``)
    dead: set[str] = field(default_factory=set)
    #: keys of writes objects a forget marker hid (``state.hide``): writes of a checkpoint that
    #: stays which no longer count once the child they lost to is removed
    hidden: set[str] = field(default_factory=set)
    #: seq -> etag of a live put record as listed: a changed etag is a tombstone written over it
    etags: dict[int, str | None] = field(default_factory=dict)
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


def _put_writer(record: CommitRecord) -> str:
    """The writer whose pending writes a put record counts as its own: ``state.wr`` (kept when
    ``copy_thread`` copies the record), else the record's writer."""
    state = cast(dict[str, Any], record.state)
    return str(state.get("wr") or record.writer_id)


def _version_key(version: Any) -> str:
    return f"{type(version).__name__}:{version}"


def _add_writes(lg: _Log, wo: _Writes) -> None:
    if wo.key in lg.hidden:
        return
    old = lg.wobjs.get(wo.key)
    if old is not None and old.checkpoint_id != wo.checkpoint_id:
        lg.writes.get(old.checkpoint_id, set()).discard(wo.key)
    lg.wobjs[wo.key] = wo
    lg.writes.setdefault(wo.checkpoint_id, set()).add(wo.key)


def _objects(keys: Iterable[str]) -> set[str]:
    """The keys of writes objects among index keys (writes carried in a put record are "@seq/i")."""
    return {k for k in keys if not k.startswith("@")}


def _remove_writes(lg: _Log, key: str) -> None:
    old = lg.wobjs.pop(key, None)
    if old is not None:
        keys = lg.writes.get(old.checkpoint_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del lg.writes[old.checkpoint_id]


def _drop_record(lg: _Log, seq: int) -> None:
    """Remove a put record from the index: forgotten by a marker, or tombstoned under it."""
    lg.forgotten.add(seq)
    lg.etags.pop(seq, None)
    record = lg.records.pop(seq, None)
    if record is None or not isinstance(record.state, dict):
        return
    state: dict[str, Any] = record.state
    cid: str = state["id"]
    if state["op"] == "put" and lg.puts.get(cid) == seq:
        del lg.puts[cid]
        _checkpoint_gone(lg, cid)
    siblings = lg.children.get(state.get("parent") or "")
    if siblings is not None:
        siblings.discard(seq)
        if not siblings:
            del lg.children[state["parent"]]
    for i in range(len(state.get("pw") or ())):
        _remove_writes(lg, f"@{seq}/{i}")


def _checkpoint_gone(lg: _Log, cid: str) -> None:
    """A checkpoint's last put record is gone: its writes objects are dead (docs/langgraph.md,
    "Deletion")."""
    lg.dead.add(cid)
    for key in _objects(lg.writes.get(cid, ())):
        _remove_writes(lg, key)


def _hide(lg: _Log, key: str) -> None:
    lg.hidden.add(key)
    _remove_writes(lg, key)


def _apply(lg: _Log, entry: Entry) -> None:
    """Apply a record of the run (the next one, or one the index has: then nothing) to the index."""
    record = entry.record
    seq = record.seq
    if lg.tail is not None and seq <= lg.tail.record.seq:
        return
    before = lg.digests.get(seq - 1)
    if before is not None and record.prev != before:
        raise IntegrityError(
            f"run {lg.run.run_id!r}: record {seq} does not chain to the record before it; {DAMAGE_FIX}",
            key=lg.run.log_key(seq),
        )
    lg.tail = entry
    lg.digests[seq] = entry.digest
    state: dict[str, Any] = record.state if isinstance(record.state, dict) else {}
    if record.kind == "deleted":  # a drop: everything before it is gone
        lg.dead.update(lg.puts)
        lg.records.clear()
        lg.puts.clear()
        lg.writes.clear()
        lg.wobjs.clear()
        lg.values.clear()
        lg.forgotten.clear()
        lg.children.clear()
        lg.etags.clear()
        lg.digests = {seq: entry.digest}
        return
    # A tombstone (kind "pruned") reads as the record it replaced, removed: nothing to index.
    if record.kind != "checkpoint" or state.get("lg") != 1 or seq in lg.forgotten:
        return
    op = state.get("op")
    if op == "put":
        lg.records[seq] = record
        lg.puts[state["id"]] = seq
        lg.dead.discard(state["id"])
        if state["parent"] is not None:
            lg.parents.add(state["parent"])
            lg.children.setdefault(state["parent"], set()).add(seq)
        for channel, ref in state["ch"].items():
            lg.values[(channel, _version_key(ref["v"]))] = (seq, ref)
        writer = _put_writer(record)
        for i, (task, path, t, w) in enumerate(state.get("pw") or ()):
            # pending writes of the parent checkpoint, carried by this record
            _add_writes(lg, _Writes(f"@{seq}/{i}", state["parent"], task, path, w, {}, t, writer))
    elif op == "forget":
        for first, last in state["seqs"]:
            for gone in range(first, last + 1):
                _drop_record(lg, gone)
        for ident in state.get("hide") or ():
            _hide(lg, lg.run.prefix + str(ident))


def _latest(lg: _Log) -> str | None:
    """The thread's latest checkpoint: the live put with the highest seq of the log (the last
    one committed), not the largest id. Checkpoint ids are uuid6 values of the writing host's
    clock, so a host whose clock is behind writes smaller ids after a host whose clock is not."""
    if not lg.puts:
        return None
    return max(lg.puts.items(), key=lambda item: item[1])[0]


def _newest_first(lg: _Log) -> builtins.list[str]:
    """The live checkpoints of a run, the last committed first (log order, not id order)."""
    return [cid for cid, _ in sorted(lg.puts.items(), key=lambda item: item[1], reverse=True)]
