"""The saver: :class:`S3ckptSaver`, with ``put``, ``put_writes`` and ``copy_thread``.

A ``put`` is one record of the run's log (``thread_log``): the checkpoint without its values, its
metadata (redacted), and for every channel its version and where its value is (``values``; an
unchanged channel names the stored value, ``reuse``), with the pending writes of its parent that
ride in it (``riding``) and which of them it was computed from (``pending``). A ``put_writes`` is
one writes object beside the log (``writes``), or rides in the next put's record. Reading,
deletion and the async methods are the classes it is made of (``reading``, ``deletion``, ``aio``).
"""

from __future__ import annotations

import base64
import builtins
import random
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ...records import ChunkRef, Manifest
from ...store import Store
from .aio import AsyncMethods
from .deletion import Deletion
from .ids import _where, writes_key, writes_prefix
from .index import _add_writes, _Log, _objects
from .pending import _pending
from .reading import Reads
from .reuse import _find, _known
from .riding import _MAX_RIDERS, _WAIT_GRACE, _WAIT_MAX, _ride, _take, _Waiting
from .values import DEFAULT_INLINE_LIMIT, _Ref
from .writes import _Writes


class S3ckptSaver(Reads, Deletion, AsyncMethods):
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

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        thread_id, ns, parent_id = _where(config)
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
        thread_id, ns, parent_id = _where(config)
        taken: builtins.list[_Waiting] = []
        with lg.commit, lg.lock:
            if not lg.loaded:
                self._sync(lg)
            deadline = time.monotonic() + _WAIT_MAX
            while parent_id is not None and lg.uploading.get(parent_id) and time.monotonic() < deadline:
                lg.changed.wait(0.1)  # large writes of the parent: reuse their chunks
            # The deadline runs from here: the chunks this record names are chosen (reused) and
            # uploaded from now on (thread_log._append).
            started = time.monotonic()
            known, parent = _known(lg, parent_id)
            parent_artifacts = parent.artifacts if parent is not None else {}
            refs: dict[str, _Ref] = {}
            artifacts: dict[str, Manifest] = {}
            with self.store.upload(known) as upload:
                for channel, version in checkpoint["channel_versions"].items():
                    name = f"c/{channel}"
                    found = None
                    if channel not in new_versions or channel not in values:
                        found = _find(lg, parent, channel, version)
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
            taken = _take(lg, parent_id)
            if taken:
                state["pw"] = [[w.wo.task, w.wo.path, w.wo.t, w.wo.w] for w in taken if w.wo is not None]
            lg.inflight[checkpoint["id"]] = artifacts
            lg.changed.notify_all()
            try:
                self._append(lg, state, artifacts, started=started)
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
        read = {wo.ident(lg.run.prefix) for _, _, _, _, wo, _ in _pending(lg, parent_id) if wo.writer != self.writer_id}
        return sorted(ident[len(prefix) :] for ident in read)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        thread_id, ns, checkpoint_id = _where(config)
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
        # The deadline of a writes object with artifacts runs from before its chunks are chosen.
        started = time.monotonic()
        regular = {(str(task_id), WRITES_IDX_MAP.get(channel, i)) for i, (channel, _) in enumerate(writes)}
        with lg.lock:
            repeat = any(idx >= 0 and (task, idx) in regular for task, _, idx, _, _, _ in self._own(lg, checkpoint_id))
        if repeat:
            # This saver stored some of these writes, as far as it knows: another host may have
            # hidden them since (a forget marker hides a write that did not count). Look, without
            # moving this saver's log position; a write that is hidden is written again.
            self._peek_hides(lg)
        with lg.lock:
            # idempotent per writer: a repeat of this saver's own write is skipped; another
            # writer's write of the same (task, idx) does not stand in for it
            stored = {(task, idx) for task, _, idx, _, _, _ in self._own(lg, checkpoint_id)}
            known, _ = _known(lg, checkpoint_id)
            busy = lg.puts_active > 0 or time.monotonic() - lg.last_put_end < _WAIT_GRACE
            if busy and checkpoint_id not in lg.parents and len(lg.waiting) < _MAX_RIDERS:
                # a put is under way: hold a seat in the next put's record while serializing
                me = _Waiting(checkpoint_id)
                lg.waiting.append(me)
        try:
            self._put_writes(lg, checkpoint_id, writes, task_id, task_path, stored, known, me, started)
        finally:
            if me is not None:
                with lg.lock:
                    if me in lg.waiting:
                        lg.waiting.remove(me)
                    lg.changed.notify_all()

    def _own(self, lg: _Log, checkpoint_id: str) -> builtins.list[tuple[str, str, int, str, _Writes, _Ref]]:
        """This saver's pending writes of a checkpoint, as its index has them. Call holding ``lg.lock``."""
        return _pending(lg, checkpoint_id, writer=self.writer_id)

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
        started: float,
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
                known, _ = _known(lg, checkpoint_id)
        try:
            self._upload_writes(lg, checkpoint_id, task_id, task_path, dumped, known, me, started)
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
        started: float,
    ) -> None:
        entries: builtins.list[builtins.list[Any]] = []
        artifacts: dict[str, Manifest] = {}
        with self.store.upload(known) as upload:
            for idx, channel, (type_, data) in dumped:
                if len(data) <= self.inline_limit:
                    ref: _Ref = {"t": type_, "b": base64.b64encode(data).decode("ascii")}
                else:
                    artifacts[f"w/{idx}"] = upload.put(data, previous=None)
                    ref = {"t": type_, "a": f"w/{idx}"}
                entries.append([idx, channel, ref])
        if not entries:
            return
        t = time.time_ns()
        idxs = [e[0] for e in entries]
        key = writes_key(lg.run.prefix, checkpoint_id, task_id, idxs, self.writer_id, t)
        with lg.lock:
            hidden = key in lg.hidden
        wo = _Writes(key, checkpoint_id, task_id, task_path, entries, artifacts, t, self.writer_id)
        timed = writes_key(lg.run.prefix, checkpoint_id, task_id, idxs, self.writer_id, t, timed=True)
        if hidden:  # written again after a forget marker hid it: under a new name
            wo = replace(wo, key=timed, timed=True)
        elif me is not None and not artifacts and _ride(lg, me, wo):
            return
        stored_wo = self._store_writes(lg, wo, started=started)
        if stored_wo is None and not wo.timed:
            # The name is taken: a repeat this saver did not know of, or its own earlier write that
            # a forget marker hid since it last read the run. Look at the log to tell which.
            self._peek_hides(lg)
            with lg.lock:
                hidden = key in lg.hidden
            if hidden:
                stored_wo = self._store_writes(lg, replace(wo, key=timed, timed=True), started=started)
        if stored_wo is not None:
            with lg.lock:
                _add_writes(lg, stored_wo)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source, target = str(source_thread_id), str(target_thread_id)
        if source == target:
            raise ValueError("copy_thread needs two different threads")
        for _, ns in self._thread_namespaces(source):
            # The copies name the source's chunks: their deadline runs from before it is read.
            started = time.monotonic()
            src = self._log_of(source, ns)
            with src.commit, src.lock:
                self._sync(src)
                records = [src.records[s] for s in sorted(src.records)]
                wobjs = [src.wobjs[k] for k in sorted(_objects(src.wobjs)) if src.wobjs[k].checkpoint_id in src.puts]
            dst = self._log_of(target, ns)
            with dst.commit, dst.lock:
                self._sync(dst)
                for record in records:
                    # Artifacts are copied by reference: the new records name the same chunks.
                    self._append(dst, cast(dict[str, Any], record.state), record.artifacts, started=started)
            for wo in wobjs:
                # The same writer in the copy, so the copied records' "wr" and "wf" name them.
                copied = self._store_writes(dst, replace(wo, key=wo.ident(dst.run.prefix), etag=None), started=started)
                if copied is not None:
                    with dst.lock:
                        _add_writes(dst, copied)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions unique across forks (as InMemorySaver's): the counter, then a random fraction."""
        counter = 0 if current is None else int(str(current).split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"
