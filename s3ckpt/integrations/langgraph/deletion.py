"""Deletion: ``delete_thread``, ``delete_for_runs`` and ``prune``.

Each only appends a marker to the run's log, a create, which the worker role may do: ``drop`` (a
``deleted`` record one epoch up, which fences s3ckpt writers too) removes everything before it;
``forget`` names the seqs whose records are removed (``meta.removes``, which the collector reads
too) and the writes objects that stop counting (``state.hide``). Nothing is deleted or replaced:
readers treat what a marker removes as gone, and ``store.gc``, run by the operator, replaces the
removed records with tombstones and deletes their data and the writes objects of removed
checkpoints (docs/langgraph.md, "Deletion"). A removed record that carries pending writes of a
checkpoint that stays has them written as writes objects first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, cast

from ...references import REMOVES
from .index import _add_writes, _latest, _Log, _objects, _put_writer
from .pending import _pending
from .redaction import NameChecks
from .thread_log import LogView
from .values import ValueCodec
from .writes import _Writes


def _ranges(seqs: Iterable[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for seq in sorted(seqs):
        if out and out[-1][1] == seq - 1:
            out[-1][1] = seq
        else:
            out.append([seq, seq])
    return out


class Deletion(LogView, NameChecks, ValueCodec):
    """The saver's deletion of threads, checkpoints and writes (a part of :class:`S3ckptSaver`)."""

    def _drop(self, lg: _Log) -> None:
        """Append a drop marker (a ``deleted`` record, which fences s3ckpt writers too): every
        record before it, and every writes object of their checkpoints, is gone. A run with
        nothing live after its last drop is left as it is."""
        with lg.commit, lg.lock:
            self._sync(lg)
            if not lg.records and (lg.tail is None or lg.tail.record.kind == "deleted"):
                return
            self._append(lg, {"lg": 1, "op": "drop"}, {}, drop=True)

    def _forget(self, lg: _Log, seqs: set[int]) -> None:
        """Append a forget marker naming ``seqs`` (put records): they and the writes objects of
        their checkpoints are gone. For a checkpoint that stays while its child goes: the pending
        writes the removed record carries are first written as writes objects, and, when no
        child remains to say which of its writes count, the marker hides the writes that do not
        count (a losing host's), so its pending writes stay those its child was computed from.
        Call holding ``lg.commit`` and ``lg.lock``."""
        if not seqs:
            return
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
                kept = self._store_writes(lg, replace(wo, key=wo.ident(lg.run.prefix)), started=None)  # no chunks
                if kept is not None:
                    _add_writes(lg, kept)
        hidden: set[str] = set()
        for parent in kept_parents:
            remaining = [s for s in lg.children.get(parent, ()) if s not in seqs]
            if remaining and "wf" in cast(dict[str, Any], lg.records[max(remaining)].state):
                continue  # a remaining child says which writes count
            counted = {wo.ident(lg.run.prefix) for _, _, _, _, wo, _ in _pending(lg, parent)}
            hidden.update(k for k in _objects(lg.writes.get(parent, ())) if lg.wobjs[k].ident(lg.run.prefix) not in counted)
        prefix = lg.run.prefix
        ranges = _ranges(seqs)
        state = {"lg": 1, "op": "forget", "seqs": ranges}
        if hidden:
            state["hide"] = sorted(key[len(prefix) :] for key in hidden)
        self._append(lg, state, {}, meta={REMOVES: ranges})

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
                for seq in lg.puts.values():
                    metadata = self._load_inline(cast(dict[str, Any], lg.records[seq].state)["metadata"])
                    if self._is_run(metadata.get("run_id"), wanted):
                        gone.add(seq)
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
                with lg.commit, lg.lock:
                    self._sync(lg)
                    latest = _latest(lg)
                    if latest is None:
                        continue
                    self._forget(lg, set(lg.records) - {lg.puts[latest]})
