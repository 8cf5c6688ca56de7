"""The LangGraph saver's objects as the collector sees them (docs/langgraph.md, "Deletion").

A saver run (``langgraph/...``) is deleted from by appending markers, never by replacing or
deleting records (the worker role may do neither): a ``deleted`` record (the saver's drop) removes
every record before it, and a record whose ``meta.removes`` names earlier seqs (the saver's
forget) removes those. Unlike a deleted core run, whose fenced writers can never name its data, a
thread's data can be named from elsewhere (``copy_thread`` copies records and writes objects by
reference), so a removed record keeps what it needs while its marker is younger than the grace;
then the collector replaces it with a tombstone and marks it no more.

A writes object (``runs/<run>/writes/...``, one ``put_writes`` call) is kept while it is younger
than the grace (the put of its checkpoint may still be in flight) or while a record that is live,
or removed less than the grace ago, puts its checkpoint. Any other is garbage, deleted by gc.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import codec
from .backends import ObjectInfo
from .errors import IntegrityError, ObjectNotFoundError
from .records import CommitRecord, Manifest
from .references import LANGGRAPH_WRITES_KIND, REMOVES, manifests_of, objects_named_by_tombstone

if TYPE_CHECKING:
    from .log import Entry, Run
    from .store import Store

#: Every run the LangGraph saver writes has an id starting with this.
SAVER_RUN_PREFIX = "langgraph/"


def is_saver_run(run_id: str) -> bool:
    return run_id.startswith(SAVER_RUN_PREFIX)


def put_id(record: CommitRecord) -> str | None:
    """The checkpoint id a saver record puts (``state.op == "put"``), else None."""
    state: Any = record.state
    if record.kind != "checkpoint" or not isinstance(state, dict) or state.get("lg") != 1 or state.get("op") != "put":
        return None
    cid = state.get("id")
    return cid if isinstance(cid, str) else None


def removed_seqs(record: CommitRecord) -> set[int]:
    """The earlier seqs a removal marker removes (``meta.removes``); malformed ranges remove
    nothing (the records stay marked)."""
    ranges = record.meta.get(REMOVES)
    out: set[int] = set()
    if not isinstance(ranges, list):
        return out
    for pair in ranges:
        if not isinstance(pair, list) or len(pair) != 2:
            continue
        first, last = pair
        if type(first) is int and type(last) is int and 0 <= first <= last < record.seq:
            out.update(range(first, last + 1))
    return out


@dataclass
class SaverRun:
    """What one saver run keeps alive."""

    #: live records (not removed, not tombstones)
    records: int = 0
    manifests: list[Manifest] = field(default_factory=list)
    #: objects named by tombstones still within the grace
    objects: set[str] = field(default_factory=set)
    #: checkpoint ids whose writes objects stay
    keep: set[str] = field(default_factory=set)
    #: records replaced by tombstones in this pass
    tombstoned: int = 0


def mark_saver_run(
    run: Run, loaded: Iterable[tuple[ObjectInfo, Entry]], *, now: datetime, grace: timedelta, collect: bool
) -> SaverRun:
    """What a saver run's records keep alive. With ``collect``, a record removed longer than the
    grace ago is replaced by a tombstone (an operator's write: the worker role may not)."""
    ordered = sorted(loaded, key=lambda pair: pair[1].record.seq)
    removed_at: dict[int, datetime] = {}
    drops = [(info, entry) for info, entry in ordered if entry.record.kind == "deleted"]
    if drops:
        info, last_drop = drops[-1]
        for _, entry in ordered:
            if entry.record.seq < last_drop.record.seq:
                removed_at[entry.record.seq] = info.last_modified
    for info, entry in ordered:
        if entry.record.seq not in removed_at and entry.record.kind != "pruned":
            for seq in removed_seqs(entry.record):
                removed_at.setdefault(seq, info.last_modified)
    out = SaverRun()
    for info, entry in ordered:
        record = entry.record
        at = removed_at.get(record.seq)
        if at is None:
            if record.kind == "pruned":
                if now - info.last_modified < grace:
                    out.objects.update(objects_named_by_tombstone(record))
                continue
            out.records += 1
            out.manifests.extend(manifests_of(record).values())
            _keep(out, record)
            continue
        young = now - at < grace
        if record.kind == "pruned":
            if young:
                out.objects.update(objects_named_by_tombstone(record))
        elif record.kind == "deleted":
            continue  # an earlier drop holds nothing
        elif young:
            out.manifests.extend(manifests_of(record).values())
            _keep(out, record)
        elif collect:
            run._tombstone(entry)
            out.tombstoned += 1
    return out


def _keep(out: SaverRun, record: CommitRecord) -> None:
    cid = put_id(record)
    if cid is not None:
        out.keep.add(cid)


@dataclass(frozen=True)
class WritesObject:
    info: ObjectInfo
    #: ``runs/<segment>/``: the run it belongs to
    run_prefix: str
    checkpoint_id: str | None
    manifests: list[Manifest]


def writes_objects(store: Store) -> list[WritesObject]:
    """Every LangGraph writes object (``runs/<run>/writes/...``), opened. A listed one that is
    gone when read was collected meanwhile."""
    infos = [info for info in store.backend.list("runs/") if "/writes/" in info.key]

    def load(info: ObjectInfo) -> WritesObject | None:
        key = info.key
        try:
            sealed = store.backend.get(key).data
        except ObjectNotFoundError:
            return None
        plain = codec.open_document(store.cipher, LANGGRAPH_WRITES_KIND, key[len("runs/") :], sealed, key=key)
        try:
            document = json.loads(plain)
        except ValueError:
            raise IntegrityError(f"{key} is not a valid LangGraph writes object", key=key) from None
        artifacts = document.get("a") if isinstance(document, dict) else None
        cid = document.get("id") if isinstance(document, dict) else None
        # JSON has lists where a Manifest has tuples: validated from JSON, as the saver reads it.
        values = artifacts.values() if isinstance(artifacts, dict) else ()
        manifests = [Manifest.model_validate_json(json.dumps(value)) for value in values]
        run_prefix = key[: key.index("/writes/") + 1]
        return WritesObject(info, run_prefix, cid if isinstance(cid, str) else None, manifests)

    return [wo for wo in store.pool.map(load, infos) if wo is not None]


__all__ = ["SAVER_RUN_PREFIX", "SaverRun", "WritesObject", "is_saver_run", "mark_saver_run", "put_id", "writes_objects"]
