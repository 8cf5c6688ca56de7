"""Deletion: ``delete_thread``, ``delete_for_runs`` and ``prune``.

Each appends a marker to the run's log, then deletes what the marker removes: ``drop`` (a
``deleted`` record one epoch up, which fences s3ckpt writers too) removes everything before it;
``forget`` names the seqs whose records are removed. A removed record that carries pending writes
of a checkpoint that stays has them written as writes objects first (docs/langgraph.md, "Layout").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, cast

from ..._names import parse_seq
from .index import _add_writes, _latest, _Log, _objects, _put_writer, _remove_writes
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
                self._delete_keys(sorted(_objects(lg.wobjs)))
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
        hidden -= writes
        # They do not count while the child is there, so deleting them first changes no reader's view.
        self._delete_keys(sorted(hidden))
        for key in hidden:
            _remove_writes(lg, key)
        if seqs:
            self._append(lg, {"lg": 1, "op": "forget", "seqs": _ranges(seqs)}, {})
        self._delete_objects(lg, sorted(seqs), sorted(writes))
        for key in writes:
            _remove_writes(lg, key)

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
                        writes.update(_objects(lg.writes.get(cid, ())))
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
                    latest = _latest(lg)
                    if latest is None:
                        continue
                    keep = lg.writes.get(latest, set())
                    self._forget(lg, set(lg.records) - {lg.puts[latest]}, _objects(lg.wobjs) - keep)
