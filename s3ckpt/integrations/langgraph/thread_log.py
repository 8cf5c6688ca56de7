"""The log of a thread's namespace: reading what changed into the index, and appending a record.

Every read of a run is one LIST of its prefix (``log/`` and ``writes/``), then a GET of each new
record or writes object, in parallel. Every record (a put, or a marker of a deletion) is created
with create-if-absent at the next seq after the last record this saver observed: if another writer
appended since, the seq is taken and the call raises :class:`s3ckpt.ConflictError`, so two graphs
cannot fork one thread.
"""

from __future__ import annotations

import builtins
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ...errors import CommitDeadlineError, ConflictError, FencedError
from ...log import Entry
from ...records import Manifest
from .ids import RUN_PREFIX, _segment, parse_run_id, run_id_for
from .index import _add_writes, _apply, _drop_record, _hide, _Log, _objects, _remove_writes
from .writes import WritesObjects

#: Runs whose index a saver keeps in memory (least recently used are dropped).
_MAX_CACHED_RUNS = 4096


class LogView(WritesObjects):
    """The saver's view of the logs of its threads (a part of :class:`S3ckptSaver`)."""

    writer_id: str
    _logs: OrderedDict[str, _Log]
    _logs_lock: threading.Lock

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

    def _thread_namespaces(self, thread_id: str | None) -> builtins.list[tuple[str, str]]:
        found = (parse_run_id(run_id) for run_id in self.store.runs() if run_id.startswith(RUN_PREFIX))
        return sorted(p for p in found if p is not None and (thread_id is None or p[0] == thread_id))

    def _sync(self, lg: _Log) -> None:
        """Read what changed since this saver last looked (everything the first time): one LIST of
        the run's prefix (``log/`` and ``writes/``), then the new records, the live records whose
        etag changed (a tombstone written over one: it is gone) and the new or changed writes
        objects of checkpoints that are not dead, in parallel. Writes objects no longer listed
        (collected) are dropped."""
        run = lg.run
        prefix = run.prefix
        listing = run.listing("writes/")
        logged = listing.log
        listed = {prefix + name: etag for name, etag in listing.documents.items()}
        after = lg.tail.record.seq if lg.loaded and lg.tail is not None else -1
        dead = {_segment(c) for c in lg.dead if c not in lg.puts and c not in lg.inflight}
        wanted = [
            (key, etag)
            for key, etag in listed.items()
            if key not in lg.hidden
            and key[len(prefix) + len("writes/") :].split("/", 1)[0] not in dead
            and (key not in lg.wobjs or (etag is not None and lg.wobjs[key].etag != etag))
        ]
        # A live record listed with another etag than when it was read was replaced: a tombstone.
        # (One this saver appended has no etag yet: the first listing gives it.)
        for s in lg.records.keys() - lg.etags.keys():
            lg.etags[s] = logged.get(s)
        replaced = [s for s in lg.records if s in logged and lg.etags[s] != logged[s]]
        futures = [self.store.submit(run.entry, s) for s in sorted(logged) if s > after]
        rereads = [(s, self.store.submit(run.entry, s)) for s in replaced]
        found = self._fetch_writes(run.run_id, wanted)
        entries = [e for e in (f.result() for f in futures) if e is not None]
        lg.loaded = True
        for seq, future in rereads:
            again = future.result()
            if again is None or again.record.kind == "pruned":
                _drop_record(lg, seq)  # tombstoned under this saver: as if it were forgotten
            else:
                lg.etags[seq] = logged[seq]
        for entry in sorted(entries, key=lambda e: e.record.seq):
            _apply(lg, entry)
            if entry.record.seq in lg.records:
                lg.etags[entry.record.seq] = logged.get(entry.record.seq)
        for key in [k for k in _objects(lg.wobjs) if k not in listed]:
            _remove_writes(lg, key)
        for wo in found:
            if wo.checkpoint_id not in lg.dead or wo.checkpoint_id in lg.puts:
                _add_writes(lg, wo)

    def _peek_hides(self, lg: _Log) -> None:
        """Learn which writes objects the forget markers after the last record observed hide,
        without observing those records: the log position (what the next put commits after) moves
        only when the graph reads the thread, so a graph that is behind still conflicts. One LIST
        of the run's log and a GET of each record after the position. Call without ``lg.lock``."""
        run = lg.run
        with lg.lock:
            after = lg.tail.record.seq if lg.loaded and lg.tail is not None else -1
        seqs = sorted(s for s in run.listing().log if s > after)
        futures = [self.store.submit(run.entry, s) for s in seqs]
        entries = [e for e in (f.result() for f in futures) if e is not None]
        with lg.lock:
            for entry in entries:
                state: Any = entry.record.state
                if entry.record.kind == "checkpoint" and isinstance(state, dict) and state.get("op") == "forget":
                    for ident in state.get("hide") or ():
                        _hide(lg, run.prefix + str(ident))

    def _append(
        self,
        lg: _Log,
        state: dict[str, Any],
        artifacts: Mapping[str, Manifest],
        *,
        drop: bool = False,
        started: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Entry:
        """Commit ``state`` at the seq after the last record observed; ConflictError if taken.
        Call holding ``lg.commit`` and ``lg.lock``; ``lg.lock`` is released during the PUT (the
        position cannot move meanwhile: everything that moves it holds ``lg.commit``).

        ``started`` (``time.monotonic()``, taken before the chunks ``artifacts`` names were chosen
        or uploaded): the record is refused with CommitDeadlineError once ``commit_deadline`` has
        passed since, as core commits are, so it never names a pack the collector deleted.
        ``meta``: more of the record's meta (a forget marker's ``removes``, which the collector reads)."""
        lg.lock.release()
        try:
            entry = lg.run.append(
                None if drop else state,
                after=lg.tail,
                writer_id=self.writer_id,
                artifacts=artifacts,
                meta={"langgraph": state["op"], **(meta or {})},
                deletes=drop,
                started=started,
            )
        except (FencedError, CommitDeadlineError):
            raise  # RunDeletedError too: a drop marker (or a core deletion) took the seq
        except ConflictError as exc:
            raise ConflictError(
                f"LangGraph thread {lg.thread_id!r} (namespace {lg.ns!r}, run {lg.run.run_id!r}): seq {exc.seq} was "
                "committed by another writer since this saver last read the thread, so two graphs are running the "
                "thread at once. This one stops here, and the thread does not fork; read the thread again "
                "(invoke, get_state) to continue from the other's checkpoint.",
                run_id=lg.run.run_id,
                seq=exc.seq,
            ) from None
        finally:
            lg.lock.acquire()
        _apply(lg, entry)
        return entry

