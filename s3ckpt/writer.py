"""The writer of a run: the only process allowed to append to it, until another claims it.

A commit uploads the new packs, then creates ``log/<seq>`` (the commit point), then moves HEAD.
See docs/FORMAT.md, "Commit protocol".
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

from . import _boundaries, codec, compaction, values
from .backends import Match, PutMode
from .blobs import WriteStats, open_source
from .checkpoint import Checkpoint
from .errors import (
    BackendError,
    ConflictError,
    FencedError,
    IntegrityError,
    InvalidArgumentError,
    InvalidArtifactError,
    PreconditionFailedError,
    RunDeletedError,
    describe,
)
from .records import (
    HEAD_SCHEMA_VERSION,
    RECORD_SCHEMA_VERSION,
    AttemptRecord,
    ChunkRef,
    CommitRecord,
    EffectRecord,
    HeadPointer,
    Ledger,
    Manifest,
    StepRecord,
)
from .redaction import Redactor

if TYPE_CHECKING:
    from .log import Entry, Run

log = logging.getLogger("s3ckpt")


class Writer:
    """The only process allowed to append to a run, until another claims it. Thread-safe."""

    def __init__(self, run: Run, claim: Entry, *, head_etag: str | None, parent: CommitRecord | None = None) -> None:
        self.run = run
        self.epoch = claim.record.epoch
        self.writer_id = claim.record.writer_id
        self.provenance = dict(claim.record.provenance)
        self._next_seq = claim.record.seq + 1
        self._prev = claim.digest
        self._checkpoint_seq = claim.record.checkpoint_seq
        self._head_etag = head_etag
        # The latest checkpoint (the claim found it): its artifacts carry forward, its chunks are reused.
        self._parent: CommitRecord | None = parent
        self._lock = threading.Lock()
        #: the thread inside a commit, so that a commit from its own callback is refused, not a deadlock
        self._committing: int | None = None
        self._stopped: ConflictError | None = None
        self.last_stats = WriteStats()
        #: id(ledger entry) -> (entry, its redacted copy), for the entries of the last ledger
        self._redacted: dict[int, tuple[Any, Any]] = {}

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def _parent_record(self) -> CommitRecord | None:
        return self._parent

    def parent_checkpoint(self) -> Checkpoint | None:
        """The run's latest checkpoint as this writer found it (validated), or None."""
        parent = self._parent_record()
        return None if parent is None else self.run._checkpoint(parent)

    def _known_chunks(self) -> dict[str, ChunkRef]:
        """Chunks the parent checkpoint references: stored, and kept alive by a committed record."""
        parent = self._parent_record()
        known: dict[str, ChunkRef] = {}
        if parent is not None:
            manifests = list(parent.artifacts.values())
            manifests += [m for m in (parent.state_manifest, parent.ledger_manifest) if m is not None]
            for manifest in manifests:
                known.update((c.id, c) for c in manifest.chunks)
        return known

    def commit(
        self,
        state: Any = None,
        *,
        artifacts: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        ledger: Ledger | None = None,
        progress: Progress | None = None,
    ) -> Checkpoint:
        """Commit the next checkpoint. Raises FencedError if a newer writer claimed the run.

        Artifacts carry forward: those of the previous checkpoint that ``artifacts`` does not name
        are kept (by reference, nothing is copied); ``artifacts={"name": None}`` drops one. So does
        the session ledger (steps, effects, budget) unless ``ledger`` replaces it. Every string in
        the state, meta and ledger goes through the store's redactor before it is encrypted.
        ``progress(done, total)`` is called as artifact bytes are stored (``total`` is None when a
        stream's size is not known)."""
        checked = values.callback(progress, "progress")
        return self._commit(state, artifacts=artifacts, meta=meta, ledger=ledger, progress=checked)

    def _commit(
        self,
        state: Any,
        *,
        artifacts: Mapping[str, Any] | None,
        meta: Mapping[str, Any] | None,
        ledger: Ledger | None,
        base: Mapping[str, Manifest] | None = None,
        started: float | None = None,
        progress: Progress | None = None,
    ) -> Checkpoint:
        """``base``: the artifacts to start from instead of the parent's (a rollback's target);
        ``started``: when the commit began (a rollback reads its target first), for the deadline."""
        started = time.monotonic() if started is None else started
        if ledger is not None and not isinstance(ledger, Ledger):
            raise InvalidArgumentError(f"ledger is a s3ckpt.Ledger (sessions write it), not {describe(ledger)}")
        if self._committing == threading.get_ident():
            raise InvalidArgumentError(
                f"run {self.run.run_id!r}: commit was called from inside a commit of the same writer (its progress "
                "callback, say); a callback may only report. Nothing more was committed."
            )
        with self._lock:
            self._committing = threading.get_ident()
            try:
                return self._commit_locked(
                    state, artifacts=artifacts, meta=meta, ledger=ledger, base=base, started=started, progress=progress
                )
            finally:
                self._committing = None

    def _commit_locked(
        self,
        state: Any,
        *,
        artifacts: Mapping[str, Any] | None,
        meta: Mapping[str, Any] | None,
        ledger: Ledger | None,
        base: Mapping[str, Manifest] | None,
        started: float,
        progress: Progress | None,
    ) -> Checkpoint:
        if self._stopped is not None:
            raise self._stopped
        store = self.run.store
        redactor = store.options.redactor
        normalized, state_text = _json_state(state, redactor)
        meta_value = redactor.redact(values.json_object(meta, "meta"))
        if artifacts is not None and not isinstance(artifacts, Mapping):
            raise InvalidArtifactError(
                f"artifacts must be a dict {{name: bytes | path | binary file}}, not {type(artifacts).__name__}"
            )
        parent = self._parent_record()
        ledger_value, ledger_text = self._ledger(ledger, parent, redactor)
        stored_ledger = ledger_value
        limit = store.options.inline_limit
        large_state = len(state_text) > limit
        large_ledger = ledger_text is not None and len(ledger_text) > limit
        spills = large_state or large_ledger
        upload = store.blobs.begin(self._known_chunks() if artifacts or spills else {})
        state_manifest: Manifest | None = None
        ledger_manifest = parent.ledger_manifest if parent is not None and ledger is None else None
        if base is None:
            base = parent.artifacts if parent is not None else {}
        manifests = dict(base)
        if len(set(manifests) | set(artifacts or {})) > values.MAX_ARTIFACTS:
            raise InvalidArtifactError(
                f"a checkpoint holds at most {values.MAX_ARTIFACTS} artifacts (with those carried forward); drop some "
                "with artifacts={name: None}, or pack small files into one archive. Nothing was committed."
            )
        try:
            if large_state:
                state_manifest = upload.write(state_text.encode("utf-8"))
            if large_ledger:
                assert ledger_text is not None
                ledger_manifest = upload.write(ledger_text.encode("utf-8"))
                ledger_value = None
            meter = _Meter(progress, artifacts or {})
            for name, value in (artifacts or {}).items():
                name = values.name(name, "an artifact name")
                if value is None:
                    manifests.pop(name, None)
                    continue
                opened = open_source(value)
                try:
                    consumed = meter.counting(opened.consumed)
                    manifests[name] = upload.write(opened.source, consumed=consumed, previous=manifests.get(name))
                    meter.finished(manifests[name].size)
                    opened.check_unchanged()
                finally:
                    opened.close()
            if artifacts or spills:
                named: dict[tuple[str, str], Manifest] = {("artifact", n): m for n, m in manifests.items()}
                if state_manifest is not None:
                    named[("state", "")] = state_manifest
                if ledger_manifest is not None:
                    named[("ledger", "")] = ledger_manifest
                named = compaction.repack(upload, named)
                manifests = {n: m for (kind, n), m in named.items() if kind == "artifact"}
                state_manifest = named.get(("state", ""))
                ledger_manifest = named.get(("ledger", ""))
            upload.finish()  # every pack the record names is stored before the record exists
        except BaseException:
            upload.abort()
            raise
        seq = self._next_seq
        record = CommitRecord(
            schema_version=RECORD_SCHEMA_VERSION,
            kind="checkpoint",
            run_id=self.run.run_id,
            seq=seq,
            epoch=self.epoch,
            writer_id=self.writer_id,
            write_id=secrets.token_hex(16),
            prev=self._prev,
            created_at=datetime.now(UTC),
            checkpoint_seq=seq,
            state=None if large_state else normalized,
            state_manifest=state_manifest,
            artifacts=manifests,
            meta=meta_value,
            provenance=self.provenance,
            ledger=ledger_value,
            ledger_manifest=ledger_manifest,
        )
        _boundaries.reached("before-record", str(seq))
        entry, ours = self.run._put_record(record, started=started)
        if not ours:
            self._stopped = self._conflict(entry)
            raise self._stopped
        self._next_seq, self._prev = seq + 1, entry.digest
        self._checkpoint_seq, self._parent = seq, record
        self.run.store.seen.advance(self.run.run_id, entry)
        self.last_stats = upload.stats
        _boundaries.reached("between-record-and-pointer", str(seq))
        self._move_head(seq)
        return Checkpoint(record, normalized, store.blobs, ledger=stored_ledger)

    def _ledger(
        self, ledger: Ledger | None, parent: CommitRecord | None, redactor: Redactor
    ) -> tuple[Ledger | None, str | None]:
        """The ledger to record (redacted) and its JSON text, or the parent's carried as is."""
        if ledger is None:
            return (parent.ledger if parent is not None else None), None
        cache, self._redacted = self._redacted, {}

        def redacted(entry: _Entry) -> _Entry:
            # A session passes the same entry objects commit after commit: each is redacted once.
            hit = cache.get(id(entry))
            out = hit[1] if hit is not None and hit[0] is entry else _redact_entry(entry, redactor)
            self._redacted[id(entry)] = (entry, out)
            return out

        value = Ledger(
            steps={key: redacted(step) for key, step in ledger.steps.items()},
            attempts=tuple(redacted(attempt) for attempt in ledger.attempts),
            effects={key: redacted(effect) for key, effect in ledger.effects.items()},
            budget=ledger.budget,
            generation=ledger.generation,
        )
        return value, value.model_dump_json()

    def _conflict(self, existing: Entry) -> ConflictError:
        other = existing.record
        if other.kind == "deleted":
            return RunDeletedError(run_id=self.run.run_id, seq=other.seq, epoch=self.epoch, newer_epoch=other.epoch)
        if other.epoch > self.epoch:
            return FencedError(run_id=self.run.run_id, seq=other.seq, epoch=self.epoch, newer_epoch=other.epoch)
        return ConflictError(
            f"run {self.run.run_id!r}: seq {other.seq} was committed by another writer with the same epoch "
            f"({other.epoch}); claim the run again to continue",
            run_id=self.run.run_id,
            seq=other.seq,
        )

    def _move_head(self, seq: int) -> None:
        """Point HEAD at ``seq``; a hint, so failures are logged, never raised."""
        run = self.run
        backend = run.store.backend
        data = codec.encode_head(run.store.cipher, run.segment, HeadPointer(schema_version=HEAD_SCHEMA_VERSION, seq=seq))
        key = run._head_key()
        try:
            if not backend.capabilities.compare_and_swap:
                backend.put(key, data)
                return
            for _ in range(4):
                try:
                    mode: PutMode = Match(self._head_etag) if self._head_etag else "create"
                    self._head_etag = backend.put(key, data, mode=mode).etag
                    return
                except PreconditionFailedError:
                    current, self._head_etag = run._read_head()
                    if current is not None and current.seq >= seq:
                        return  # someone already moved it past us
        except (BackendError, IntegrityError, pydantic.ValidationError) as exc:
            log.warning("could not move HEAD of run %r to %d: %s", run.run_id, seq, exc)


#: ``progress(done, total)``: artifact bytes stored so far, of ``total`` (None: a stream of unknown size).
Progress = Callable[[int, int | None], None]


class _Meter:
    """Turns each artifact's ``consumed(n)`` into ``progress(done, total)`` over the whole commit."""

    def __init__(self, progress: Progress | None, artifacts: Mapping[str, Any]) -> None:
        self.progress = progress
        self.done = 0
        sizes = [_size_of(value) for value in artifacts.values() if value is not None]
        self.total = None if any(size is None for size in sizes) else sum(s for s in sizes if s is not None)

    def counting(self, inner: Callable[[int], None] | None) -> Callable[[int], None] | None:
        if self.progress is None:
            return inner
        progress, base = self.progress, self.done

        def consumed(n: int) -> None:
            if inner is not None:
                inner(n)
            progress(base + n, self.total)

        return consumed

    def finished(self, size: int) -> None:
        self.done += size
        if self.progress is not None:
            self.progress(self.done, self.total)


def _size_of(value: Any) -> int | None:
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    if isinstance(value, str | os.PathLike):
        try:
            return os.stat(value).st_size
        except (OSError, ValueError):
            return None  # open_source reports it
    return None


_Entry = TypeVar("_Entry", StepRecord, AttemptRecord, EffectRecord)


def _redact_entry(entry: _Entry, redactor: Redactor) -> _Entry:
    return type(entry).model_validate_json(json.dumps(redactor.redact(entry.model_dump(mode="json")), ensure_ascii=False))


def _json_state(state: Any, redactor: Redactor) -> tuple[Any, str]:
    """The state as a redacted JSON value and as text; pydantic models are dumped in JSON mode."""
    value = redactor.redact(values.json_value(state, "state"))
    return value, json.dumps(value, ensure_ascii=False, separators=(",", ":"))
