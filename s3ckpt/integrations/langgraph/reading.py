"""Reading: ``get_tuple`` and ``list``.

Every read of a run lists it (``thread_log``), also for a checkpoint this saver knows: another host
may have stored writes for it, or committed its child, since. A thread's order is its log's: the
latest checkpoint is the last put of the log, never the largest id (docs/langgraph.md, "Latest is
the last put of the log").
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata, CheckpointTuple, get_checkpoint_id

from ...records import CommitRecord
from .ids import _where
from .index import _latest, _Log, _newest_first
from .pending import _pending
from .redaction import NameChecks
from .thread_log import LogView
from .values import ValueCodec


class Reads(LogView, NameChecks, ValueCodec):
    """The saver's reading of checkpoints (a part of :class:`S3ckptSaver`)."""

    def _snapshot(self, lg: _Log, checkpoint_id: str) -> tuple[CommitRecord, builtins.list[Any]] | None:
        seq = lg.puts.get(checkpoint_id)
        if seq is None:
            return None
        return lg.records[seq], _pending(lg, checkpoint_id)

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
        thread_id, ns, checkpoint_id = _where(config)
        lg = self._log_of(thread_id, ns)
        with lg.commit, lg.lock:
            # Always one LIST, also for a checkpoint this saver knows: another host may have
            # stored writes for it (or committed its child) since.
            self._sync(lg)
            if checkpoint_id is None:
                checkpoint_id = _latest(lg)
                if checkpoint_id is None:
                    return None
            snap = self._snapshot(lg, checkpoint_id)
        return None if snap is None else self._tuple(lg, *snap)

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
                order = _newest_first(lg)
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
