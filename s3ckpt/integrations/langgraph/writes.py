"""Writes objects: the pending writes of one ``put_writes`` call, as one sealed object beside the log.

``runs/<run>/writes/<checkpoint>/<task>/<writer>/<indexes>`` (``ids.writes_key``) holds the run,
checkpoint and task ids, the task path, the writer, ``[idx, channel, ref]`` for each write, the
manifests of its artifacts and the time it was written, as JSON sealed with the kind
``langgraph-writes`` and its key as name, so it opens under no other key. It is created with
create-if-absent and never overwritten (docs/langgraph.md, "Pending writes live beside the log").
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ...errors import CommitDeadlineError, IntegrityError
from ...log import check_deadline
from ...records import Manifest
from ...store import Store
from .ids import writes_key

if TYPE_CHECKING:
    from .index import _Log

#: The kind a writes object is sealed as (docs/langgraph.md, "Pending writes").
WRITES_KIND = "langgraph-writes"


def _check_deadline(store: Store, started: float, key: str) -> None:
    """``check_deadline`` for a writes object, whose message says what was not stored."""
    try:
        check_deadline(store, started, key)
    except CommitDeadlineError:
        raise CommitDeadlineError(
            f"{key}: put_writes took longer than commit_deadline ({store.options.commit_deadline:.0f} s) from "
            "uploading its values to creating its writes object, so the object was not created (the collector "
            "may already count the packs it uploaded as garbage). Nothing was stored: call put_writes again."
        ) from None


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
    #: named by its time although its writes are regular (``ids.writes_key``): written again after
    #: a forget marker hid the object of the same name
    timed: bool = False

    def ident(self, run_prefix: str) -> str:
        """Its name whether it is an object or rides in a record: the key of its object."""
        idxs = [w[0] for w in self.w]
        return writes_key(run_prefix, self.checkpoint_id, self.task, idxs, self.writer, self.t, timed=self.timed)


class WritesObjects:
    """The saver's reading and writing of writes objects (a part of :class:`S3ckptSaver`)."""

    store: Store

    def _writes_document(self, run_id: str, wo: _Writes) -> bytes:
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
        if wo.timed:
            document["tk"] = 1
        return json.dumps(document).encode()

    def _open_writes(self, run_id: str, key: str, sealed: bytes, etag: str | None) -> _Writes:
        """The writes object stored at ``key`` (under the run's prefix) from its sealed bytes."""
        run = self.store.run(run_id)
        plain = run.open_document(key[len(run.prefix) :], sealed, kind=WRITES_KIND)
        return self._parse_writes(run_id, run.prefix, key, plain, etag)

    def _parse_writes(self, run_id: str, run_prefix: str, key: str, plain: bytes, etag: str | None) -> _Writes:
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
                timed=doc.get("tk") == 1,
            )
            run = doc["run"]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise IntegrityError(f"{key} is not a valid LangGraph writes object: {exc}", key=key) from None
        if run != run_id or wo.ident(run_prefix) != key:
            raise IntegrityError(f"{key} holds the writes of another run, checkpoint or task", key=key)
        return wo

    def _fetch_writes(self, run_id: str, infos: Sequence[tuple[str, str | None]]) -> builtins.list[_Writes]:
        run = self.store.run(run_id)

        def one(key: str, etag: str | None) -> _Writes | None:
            got = run.get_document(key[len(run.prefix) :], kind=WRITES_KIND)
            if got is None:
                return None
            return self._parse_writes(run_id, run.prefix, key, got.data, got.etag or etag)

        futures = [self.store.submit(one, key, etag) for key, etag in infos]
        return [wo for wo in (f.result() for f in futures) if wo is not None]

    def _store_writes(self, lg: _Log, wo: _Writes, *, started: float | None) -> _Writes | None:
        """Write a writes object, create-if-absent (a repeat is a no-op: None).

        ``started`` (``time.monotonic()`` before the chunks its artifacts name were chosen or
        uploaded; None for an object without artifacts): an object naming chunks is refused with
        CommitDeadlineError once ``commit_deadline`` has passed since, as a core record is: the
        collector may already have deleted a pack it would name."""
        if wo.artifacts:
            if started is None:
                raise AssertionError(f"{wo.key} names chunks: its deadline needs the time its upload started")
            _check_deadline(self.store, started, wo.key)
        run = lg.run
        stored = run.put_document(wo.key[len(run.prefix) :], self._writes_document(run.run_id, wo), kind=WRITES_KIND)
        if stored is None:
            return None
        return replace(wo, etag=stored.etag)
