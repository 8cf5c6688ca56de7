"""A run's append-only log and the commit protocol (docs/FORMAT.md, "Commit protocol").

Record ``n`` is committed when the create-if-absent write of ``log/<n>`` succeeds, and not before.
``HEAD`` is written last and read as a hint: readers start there and probe forward until a miss.

Fencing: every record carries the writer's epoch. ``claim()`` appends a claim record with an epoch
higher than any before it, so an older writer's next create hits an existing key, reads it, sees
the higher epoch and raises FencedError. A retried PUT that landed comes back as 412; every record
carries a unique write id, and a 412 whose stored record has our write id is our own success.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from . import _boundaries, codec, values
from ._names import parse_seq
from .checkpoint import Checkpoint
from .errors import (
    DAMAGE_FIX,
    BackendError,
    CommitDeadlineError,
    ConflictError,
    EffectSettledError,
    FencedError,
    IntegrityError,
    InvalidArgumentError,
    ObjectNotFoundError,
    PreconditionFailedError,
    RunDeletedError,
    RunNotFoundError,
    UnknownOutcomeError,
    UnsupportedBackendError,
    describe,
)
from .records import RECORD_SCHEMA_VERSION, CommitRecord, EffectRecord, HeadPointer, Ledger, Manifest
from .references import PRUNED, objects_of
from .workflows import POLICIES, OnVersionChange, resolve
from .writer import Writer

if TYPE_CHECKING:
    from .store import Store

Validate = Literal["exists", "full"]

log = logging.getLogger("s3ckpt")


@dataclass(frozen=True)
class Entry:
    """A record as loaded, with the SHA-256 of its stored bytes (what the next record chains to)."""

    record: CommitRecord
    digest: str


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


#: Runs on the checkpoint a claim will follow, before the claim is written; raises to refuse, and
#: may return the provenance to claim with.
ClaimCheck = Callable[[Checkpoint | None], Mapping[str, Any] | None]
_UNSETTLED = ("pending", "unknown")


class SeenTails:
    """The newest record of each run that a store object has seen. A log can only grow, so a read
    that finds less (records deleted, an old HEAD put back) is damage, never a state to resume."""

    def __init__(self) -> None:
        self._tails: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def floor(self, run_id: str) -> tuple[int, str] | None:
        """What was seen before a read starts: the read must find at least this."""
        with self._lock:
            return self._tails.get(run_id)

    def check(self, run_id: str, floor: tuple[int, str] | None, entry: Entry | None, *, key: str) -> None:
        """``entry`` is the tail a read found, having started after ``floor`` was seen; ``key`` names
        the log record at ``floor`` in messages."""
        if floor is not None:
            seq, digest = floor
            if entry is None or entry.record.seq < seq:
                found = "no record" if entry is None else f"seq {entry.record.seq}"
                raise IntegrityError(
                    f"run {run_id!r}: the log went backwards: this store object saw seq {seq}, and now the log ends at "
                    f"{found}. Records were deleted or an old HEAD was put back; nothing was resumed from it. Restore "
                    "the run from a backup (with S3 versioning, the deleted versions).",
                    key=key,
                )
            if entry.record.seq == seq and entry.digest != digest:
                raise IntegrityError(f"run {run_id!r}: the record at seq {seq} was replaced since it was read", key=key)
        if entry is not None:
            self.advance(run_id, entry)

    def advance(self, run_id: str, entry: Entry) -> None:
        with self._lock:
            seen = self._tails.get(run_id)
            if seen is None or entry.record.seq > seen[0]:
                self._tails[run_id] = (entry.record.seq, entry.digest)


def check_seq(seq: Any) -> int:
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 10**20:
        raise InvalidArgumentError(f"a seq is an int >= 0 (see `s3ckpt log RUN`), not {describe(seq)}")
    return seq


class Run:
    """A handle on one run's log. Cheap to make; every method reads storage afresh."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        #: The run's directory name in this store (validates the run id)
        self.segment = store.names.segment(run_id)

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    # -- reading -----------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """Where the run's objects live: ``runs/<segment>/``."""
        return f"runs/{self.segment}/"

    def _log_key(self, seq: int) -> str:
        return f"{self.prefix}log/{seq:020d}"

    def _head_key(self) -> str:
        return f"{self.prefix}HEAD"

    def _decode(self, data: bytes, seq: int) -> Entry:
        key = self._log_key(seq)
        record = codec.decode_record(self.store.cipher, data, run_id=self.run_id, seq=seq, key=key, segment=self.segment)
        if record.kind == "pruned":
            # A tombstone stands for the record it replaced: the next record chains to that one.
            pruned = record.meta.get(PRUNED)
            digest = pruned.get("digest") if isinstance(pruned, dict) else None
            if not isinstance(digest, str) or len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
                raise IntegrityError(f"{key} is a tombstone with no digest of the record it replaced; {DAMAGE_FIX}", key=key)
            return Entry(record, digest)
        return Entry(record, _digest(data))

    def _encode(self, record: CommitRecord) -> bytes:
        return codec.encode_record(self.store.cipher, record, segment=self.segment)

    def _load(self, seq: int) -> Entry | None:
        try:
            data = self.store.backend.get(self._log_key(seq)).data
        except ObjectNotFoundError:
            return None
        return self._decode(data, seq)

    def _read_head(self) -> tuple[HeadPointer | None, str | None]:
        key = self._head_key()
        try:
            got = self.store.backend.get(key)
        except ObjectNotFoundError:
            return None, None
        return codec.decode_head(self.store.cipher, got.data, segment=self.segment, key=key), got.etag

    def _listed_seqs(self) -> list[int]:
        prefix = f"runs/{self.segment}/log/"
        seqs = (parse_seq(info.key[len(prefix) :]) for info in self.store.backend.list(prefix))
        return sorted(s for s in seqs if s is not None)

    def _tail(self) -> tuple[Entry | None, str | None]:
        """The last record of the log (found from HEAD, then by probing forward) and HEAD's etag."""
        seen = self.store.seen
        floor = seen.floor(self.run_id)
        entry, etag = self._find_tail()
        seen.check(self.run_id, floor, entry, key=self._log_key(floor[0]) if floor else "")
        return entry, etag

    def _find_tail(self) -> tuple[Entry | None, str | None]:
        head, etag = self._read_head()
        if head is not None:
            start = head.seq
        else:
            listed = self._listed_seqs()
            if not listed:
                # A listing can lag a create on some stores; a probe of seq 0 cannot.
                first = self._load(0)
                if first is None:
                    return None, None
                listed = [0]
            holes = sorted(set(range(listed[0], listed[-1] + 1)) - set(listed))
            if holes:
                raise self._missing(holes[0], f"it is missing, but record {listed[-1]} exists")
            start = listed[-1]
        # Fetch the named record and probe the next one at once: one round trip, not two.
        current_f = self.store.pool.submit(self._load, start)
        probe_f: Future[Entry | None] = self.store.pool.submit(self._load, start + 1)
        current = current_f.result()
        if current is None:
            probe_f.cancel()
            raise self._missing(start, "HEAD names it, but it is missing")
        nxt = probe_f.result()
        while nxt is not None:
            self._chained(nxt, current.digest)
            current, nxt = nxt, self._load(nxt.record.seq + 1)
        return current, etag

    def _checkpoint(self, record: CommitRecord, validate: Validate = "exists") -> Checkpoint:
        state: Any = record.state
        if record.state_manifest is not None:
            raw = self.store.blobs.read_all(record.state_manifest)
            try:
                state = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise IntegrityError(f"run {self.run_id!r}@{record.seq}: stored state is not valid JSON: {exc}") from None
        if validate not in ("exists", "full"):
            raise InvalidArgumentError(f"validate must be 'exists' or 'full', not {describe(validate)}")
        where = f"run {self.run_id!r}@{record.seq}"
        manifests = dict(record.artifacts)
        if record.ledger_manifest is not None:  # the ledger is read lazily: its data must be there too
            manifests["(ledger)"] = record.ledger_manifest
        self.store.blobs.check_stored(manifests, where=where, read=validate == "full")
        return Checkpoint(record, state, self.store.blobs)

    def latest(
        self,
        *,
        workflow_version: str | None = None,
        provenance: Mapping[str, Any] | None = None,
        on_version_change: OnVersionChange = "migrate",
        validate: Validate = "exists",
    ) -> Checkpoint | None:
        """The latest committed checkpoint, validated; None if the run has none (or was deleted).

        With ``workflow_version`` (and ``provenance``), a checkpoint written by other code follows
        ``on_version_change`` (see workflows.resolve). ``validate="exists"`` checks that every pack
        an artifact needs is stored and long enough; ``"full"`` also reads and verifies every chunk.
        """
        if on_version_change not in POLICIES:
            raise InvalidArgumentError(f"on_version_change is one of {', '.join(POLICIES)}, not {describe(on_version_change)}")
        if workflow_version is not None:
            workflow_version = values.version(workflow_version, "workflow_version")
        provenance = values.json_object(provenance, "provenance")
        checkpoint = self._latest(validate)
        if checkpoint is None or (workflow_version is None and not provenance):
            return checkpoint
        return resolve(
            checkpoint,
            self.store.migrations,
            workflow_version=workflow_version,
            provenance=provenance,
            on_version_change=on_version_change,
        )

    def _latest(self, validate: Validate) -> Checkpoint | None:
        entry, _ = self._tail()
        if entry is None or entry.record.kind == "deleted" or entry.record.checkpoint_seq is None:
            return None
        record = self._parent_of(entry)
        assert record is not None  # a live tail with a checkpoint_seq
        return self._checkpoint(record, validate)

    def _parent_of(self, tail: Entry | None) -> CommitRecord | None:
        """The latest checkpoint at or before ``tail``: what a claim after it builds on. Missing or
        inconsistent data is damage (IntegrityError), never "no checkpoint"."""
        if tail is None or tail.record.kind == "deleted":
            return None
        record = tail.record
        seq = record.checkpoint_seq
        if seq is None:
            return None
        if record.kind == "checkpoint":
            if seq != record.seq:
                raise IntegrityError(f"run {self.run_id!r}: checkpoint {record.seq} names another seq as its own")
            return record
        target = self._load(seq) if seq < record.seq else None
        if target is None or target.record.kind != "checkpoint":
            raise self._missing(seq, f"record {record.seq} names it as the latest checkpoint, but it is missing or not one")
        return target.record

    def get(self, seq: int, *, validate: Validate = "exists") -> Checkpoint:
        seq = check_seq(seq)
        floor = self.store.seen.floor(self.run_id)
        entry = self._load(seq)
        if entry is None:
            if floor is not None and seq <= floor[0]:
                raise self._missing(seq, f"this store object saw the log reach seq {floor[0]}")
            raise RunNotFoundError(f"run {self.run_id!r} has no record at seq {seq}; `s3ckpt log RUN` lists its records")
        tail, _ = self._tail()
        if tail is not None and tail.record.kind == "deleted" and seq < tail.record.seq:
            raise RunNotFoundError(
                f"run {self.run_id!r} was deleted (its deletion is record {tail.record.seq}); nothing of it can be read"
            )
        if entry.record.kind == "pruned":
            raise RunNotFoundError(
                f"seq {seq} of run {self.run_id!r} was removed by retention (`s3ckpt prune`) or with the run; "
                "`s3ckpt log RUN` lists the records that remain"
            )
        if entry.record.kind != "checkpoint":
            raise RunNotFoundError(
                f"seq {seq} of run {self.run_id!r} is a {entry.record.kind} record, not a checkpoint; `s3ckpt log RUN` "
                "lists its records and their kinds"
            )
        return self._checkpoint(entry.record, validate)

    def records(self) -> Iterator[CommitRecord]:
        """Every record, oldest first, with the hash chain checked from seq 0 (a record removed by
        retention or with the run reads as its tombstone, kind ``pruned``)."""
        return (entry.record for entry in self._entries())

    def _entries(self) -> Iterator[Entry]:
        floor = self.store.seen.floor(self.run_id)
        seqs = self._listed_seqs()
        if not seqs:
            self.store.seen.check(self.run_id, floor, None, key=self._log_key(floor[0]) if floor else "")
            return
        last = max(seqs[-1], floor[0] if floor is not None else 0)
        prev: str | None = None
        pending: deque[tuple[int, Future[Entry | None]]] = deque()
        next_seq = 0
        while next_seq <= last or pending:
            while next_seq <= last and len(pending) < self.store.options.concurrency:
                pending.append((next_seq, self.store.pool.submit(self._load, next_seq)))
                next_seq += 1
            seq, future = pending.popleft()
            entry = future.result()
            if entry is None:
                raise self._missing(seq, f"it is missing, but record {last} exists")
            prev = self._chained(entry, prev)
            self.store.seen.advance(self.run_id, entry)
            yield entry
        # Records committed after the listing are picked up by probing, as readers do.
        while (entry := self._load(last + 1)) is not None:
            prev, last = self._chained(entry, prev), last + 1
            self.store.seen.advance(self.run_id, entry)
            yield entry

    def _chained(self, entry: Entry, prev: str | None) -> str:
        """Check that ``entry`` chains to the record whose digest is ``prev``; return its digest."""
        if entry.record.prev != prev:
            raise IntegrityError(
                f"run {self.run_id!r}: record {entry.record.seq} does not chain to the record before it "
                f"(a record was replaced, removed or replayed); {DAMAGE_FIX}",
                key=self._log_key(entry.record.seq),
            )
        return entry.digest

    def _missing(self, seq: int, why: str) -> IntegrityError:
        key = self._log_key(seq)
        return IntegrityError(
            f"run {self.run_id!r}: the record at seq {seq} ({key}): {why}. s3ckpt never deletes a record of a live run, "
            f"so this is damage; {DAMAGE_FIX}",
            key=key,
        )

    def history(self) -> Iterator[Checkpoint]:
        """Every checkpoint, oldest first; none of a deleted run."""
        checkpoints: list[CommitRecord] = []
        for record in self.records():
            if record.kind == "deleted":
                checkpoints.clear()  # everything before a deletion is gone
            elif record.kind == "checkpoint":
                checkpoints.append(record)
        for record in checkpoints:
            yield self._checkpoint(record)

    def rollback(self, seq: int) -> list[EffectRecord]:
        """Append a checkpoint that restores the state, steps and artifacts of checkpoint ``seq``
        (history is never rewritten) and return the effects confirmed after it, for the caller to
        compensate. Those stay in the ledger as ``rolled_back``, and an emit that reaches one of their
        positions again sends a new request under a new key; effects that happened by ``seq`` stay as
        they are and are never sent again; spending stays spent. Refused, before anything is written,
        while an effect after ``seq`` has an unknown outcome (settle it first: it may need
        compensating). Claims the run, so a live writer of it is fenced."""
        started = time.monotonic()  # the target's chunks are referenced from here on: the deadline counts
        target = self.get(check_seq(seq))
        then = target.ledger
        plan: dict[str, Any] = {}

        def check(latest: Checkpoint | None) -> Mapping[str, Any]:
            if latest is None:
                raise IntegrityError(f"run {self.run_id!r}: checkpoint {seq} exists but the log names no latest checkpoint")
            now = latest.ledger
            # In doubt now and not already in doubt at seq: it may have happened after seq.
            unknown = [
                e
                for k, e in now.effects.items()
                if e.status in _UNSETTLED and (k not in then.effects or then.effects[k].status not in _UNSETTLED)
            ]
            if unknown:
                raise UnknownOutcomeError(
                    f"run {self.run_id!r}: {len(unknown)} effect(s) after seq {seq} have an unknown outcome "
                    f"({', '.join(e.idempotency_key for e in unknown)}), so it is not known whether they need compensating. "
                    "Settle them first (`s3ckpt resolve RUN KEY --sent REF | --not-sent`), then roll back. "
                    "Nothing was written.",
                    effects=unknown,
                )
            effects: dict[str, EffectRecord] = {}
            undone: list[EffectRecord] = []
            for key, effect in now.effects.items():
                before = then.effects.get(key)
                if effect.status == "confirmed" and (before is None or before.status != "confirmed"):
                    # It happened after seq (even under a key seq already knew, as not sent or in doubt).
                    undone.append(effect)
                    effects[key] = effect.model_copy(update={"status": "rolled_back"})
                else:
                    effects[key] = effect  # happened by seq (its latest outcome is the truth), or harmless
            # A step of seq whose effects have since been rolled back (by this rollback or an earlier one)
            # is no resume point any more: it runs again, and its effects go out as new requests.
            undone_keys = {k for k, e in effects.items() if e.status == "rolled_back"}
            steps = {k: s for k, s in then.steps.items() if not undone_keys.intersection(s.effects)}
            plan["undone"] = undone
            plan["ledger"] = Ledger(
                steps=steps, attempts=now.attempts, effects=effects, budget=now.budget, generation=now.generation + 1
            )
            return target.provenance

        writer = self._claim(target.provenance, check=check)
        writer._commit(
            target.state, artifacts=None, meta={"rollback_to": seq}, ledger=plan["ledger"], base=target.record.artifacts,
            started=started,
        )
        undone: list[EffectRecord] = plan["undone"]
        return undone

    def resolve_effect(self, idempotency_key: str, *, sent: bool, reference: Any = None, force: bool = False) -> EffectRecord:
        """An operator's decision on an effect whose outcome is unknown: it happened (``sent=True``,
        with the provider's ``reference``) or it did not (it may be sent again, under the same key).
        ``idempotency_key`` may be a unique prefix. An effect whose outcome is already known is
        refused unless ``force``. Everything is checked before anything is written; then the run is
        claimed, which fences its live writer (a session still running it stops at its next commit)."""
        wanted = values.name(idempotency_key, "an idempotency key")
        if not isinstance(sent, bool) or not isinstance(force, bool):
            raise InvalidArgumentError("sent and force are True or False")
        if sent and reference is None:
            raise InvalidArgumentError("an effect that was sent needs the provider's reference (--sent REF)")
        if not sent and reference is not None:
            raise InvalidArgumentError("an effect that was not sent has no reference; drop reference= (or --sent REF)")
        redactor = self.store.options.redactor
        recorded_reference = redactor.redact(values.json_value(reference, "the reference")) if sent else None
        plan: dict[str, Any] = {}

        def check(latest: Checkpoint | None) -> Mapping[str, Any]:
            effects = latest.ledger.effects if latest is not None else {}
            effect = _find_effect(self.run_id, effects, wanted)
            if effect.status not in _UNSETTLED and not force:
                raise EffectSettledError(
                    f"effect {effect.idempotency_key} of run {self.run_id!r} is already {effect.status} (decided by "
                    f"{effect.resolved_by}); only an unknown outcome is settled. Pass force=True (`--force`) to overwrite "
                    "a known outcome, knowing that marking a sent effect not sent lets the next resume send it again."
                )
            plan["latest"], plan["effect"] = latest, effect
            return latest.provenance if latest is not None else {}

        writer = self._claim(None, check=check)
        latest: Checkpoint = plan["latest"]
        effect: EffectRecord = plan["effect"]
        settled = effect.settled("confirmed" if sent else "not_sent", by="operator", reference=recorded_reference)
        ledger = latest.ledger.model_copy(update={"effects": {**latest.ledger.effects, effect.idempotency_key: settled}})
        writer._commit(latest.state, artifacts=None, meta={"resolved": effect.idempotency_key}, ledger=ledger)
        return settled

    def exists(self) -> bool:
        return self._tail()[0] is not None

    # -- removing ----------------------------------------------------------------------------

    def delete(self) -> int:
        """Delete the run: append a ``deleted`` record with a higher epoch, which fences every writer
        of it (RunDeletedError) and makes nothing of it readable. That is all a worker writes (it
        needs no delete permission); the collector, run by the operator, replaces the earlier
        records with tombstones and deletes their data (docs/operations.md). The keys stay taken, so
        no stalled writer can create one of them and see success. Returns the seq of the ``deleted``
        record; deleting a deleted run changes nothing."""
        self._require_atomic_create()
        for _ in range(64):
            tail, _ = self._tail()
            if tail is None:
                raise RunNotFoundError(f"run {self.run_id!r} has no records; `s3ckpt runs` lists the runs of this store")
            if tail.record.kind == "deleted":
                return tail.record.seq
            record = CommitRecord(
                schema_version=RECORD_SCHEMA_VERSION,
                kind="deleted",
                run_id=self.run_id,
                seq=tail.record.seq + 1,
                epoch=tail.record.epoch + 1,
                writer_id=secrets.token_hex(8),
                write_id=secrets.token_hex(16),
                prev=tail.digest,
                created_at=_now(),
                checkpoint_seq=None,
            )
            entry, ours = self._put_record(record)
            if ours:
                self.store.seen.advance(self.run_id, entry)
                Writer(self, entry, head_etag=None)._move_head(record.seq)
                return record.seq
        raise ConflictError(f"run {self.run_id!r}: could not append its deletion in 64 tries", run_id=self.run_id, seq=-1)

    def _tombstone(self, entry: Entry) -> None:
        """Replace ``entry``'s record with a tombstone: same seq, epoch and chain, no data. It names
        the objects the record needed, which the collector keeps for its grace period (a writer that
        read the record just before, a rollback to it, may still be committing a reference)."""
        record = entry.record
        tombstone = CommitRecord(
            schema_version=RECORD_SCHEMA_VERSION,
            kind="pruned",
            run_id=record.run_id,
            seq=record.seq,
            epoch=record.epoch,
            writer_id=record.writer_id,
            write_id=record.write_id,
            prev=record.prev,
            created_at=record.created_at,
            checkpoint_seq=record.checkpoint_seq,
            meta={PRUNED: {"digest": entry.digest, "kind": record.kind, "objects": [*sorted(objects_of(record))]}},
        )
        self.store.backend.put(self._log_key(record.seq), self._encode(tombstone), mode="overwrite")

    # -- writing -----------------------------------------------------------------------------

    def _require_atomic_create(self) -> None:
        if not self.store.backend.capabilities.atomic_create:
            raise UnsupportedBackendError(
                f"{self.store.backend.url} cannot create objects atomically, so it cannot guarantee that "
                "exactly one writer commits each seq. Use s3://, a local directory or memory://."
            )

    def _put_record(self, record: CommitRecord, *, started: float | None = None) -> tuple[Entry, bool]:
        """Create ``log/<seq>``. Returns the entry now at that seq and whether it is ours.

        Transient failures (409, 5xx, a lost connection) are retried by the store's retry layer
        (backends/_retry.py), which also recognises a create of ours that landed with its answer
        lost: a 412 that reaches here is another writer's record, attached to the error."""
        data = self._encode(record)
        key = self._log_key(record.seq)
        attempts = self.store.options.commit_attempts
        for _ in range(attempts):
            if started is not None:
                check_deadline(self.store, started, key)
            try:
                self.store.backend.put(key, data, mode="create", metadata={"s3ckpt-write-id": record.write_id})
                return Entry(record, _digest(data)), True
            except PreconditionFailedError as lost:
                stored = lost.existing.data if lost.existing is not None else None
                existing = self._load(record.seq) if stored is None else self._decode(stored, record.seq)
                if existing is None:  # vanished between the 412 and the read: try the create again
                    continue
                return existing, existing.record.write_id == record.write_id
        raise BackendError(f"could not create {key} after {attempts} attempts")

    def _provenance(self, workflow: Any, workflow_version: Any, provenance: Mapping[str, Any]) -> dict[str, Any]:
        """Provenance as every record of a claim carries it: JSON, workflow named, redacted."""
        out = values.json_object(dict(provenance), "provenance")
        if workflow is not None:
            out["workflow"] = values.version(workflow, "workflow")
        if workflow_version is not None:
            out["workflow_version"] = values.version(workflow_version, "workflow_version")
        redacted: dict[str, Any] = self.store.options.redactor.redact(out)
        return redacted

    def claim(self, *, workflow: str | None = None, workflow_version: str | None = None, **provenance: Any) -> Writer:
        """Become the run's writer: append a claim record with a higher epoch, fencing older writers.

        ``workflow`` and ``workflow_version`` name the code that writes from now on; other keywords
        (model, prompt hash, tool-contract versions, ...) are recorded as provenance. Every
        checkpoint this writer commits carries them."""
        return self._claim(self._provenance(workflow, workflow_version, provenance))

    def _claim(self, provenance: Mapping[str, Any] | None, *, check: ClaimCheck | None = None) -> Writer:
        """Append a claim after the current tail. ``check`` sees the checkpoint the claim follows
        (validated) before each attempt writes anything: it refuses by raising, and may return the
        provenance to claim with. A claim that loses a race is checked again on the new tail."""
        self._require_atomic_create()
        writer_id = secrets.token_hex(8)
        for _ in range(64):
            tail, head_etag = self._tail()
            if tail is not None and tail.record.kind == "deleted":
                raise RunDeletedError(run_id=self.run_id, seq=tail.record.seq, epoch=0, newer_epoch=tail.record.epoch)
            parent = self._parent_of(tail)
            # Validated (every pack it names is stored): a writer reuses its chunks by reference, and
            # must not commit new checkpoints onto data that is gone.
            checkpoint = None if parent is None else self._checkpoint(parent)
            claimed = provenance
            if check is not None:
                chosen = check(checkpoint)
                claimed = chosen if chosen is not None else provenance
            seq = tail.record.seq + 1 if tail else 0
            epoch = tail.record.epoch + 1 if tail else 1
            record = CommitRecord(
                schema_version=RECORD_SCHEMA_VERSION,
                kind="claim",
                run_id=self.run_id,
                seq=seq,
                epoch=epoch,
                writer_id=writer_id,
                write_id=secrets.token_hex(16),
                prev=tail.digest if tail else None,
                created_at=_now(),
                checkpoint_seq=None if parent is None else parent.seq,
                provenance=dict(claimed or {}),
            )
            entry, ours = self._put_record(record)
            if not ours:
                continue  # another writer appended meanwhile: check and claim above it
            self.store.seen.advance(self.run_id, entry)
            writer = Writer(self, entry, head_etag=head_etag, parent=parent)
            _boundaries.reached("between-record-and-pointer", str(seq))
            writer._move_head(seq)
            return writer
        raise ConflictError(f"run {self.run_id!r}: could not claim after 64 attempts", run_id=self.run_id, seq=-1)

    # -- optimistic appends, for integrations (the LangGraph saver) ---------------------------
    # A writer that keeps its own view of the log (what it last read) and appends after it, with
    # no claim: a record lands exactly where the caller expects, or nothing is written.

    def entry(self, seq: int) -> Entry | None:
        """The record at ``seq`` as stored (a tombstone for a removed record: kind ``pruned``), or
        None if there is none. One GET; the chain is the caller's to check (``Entry.record.prev``
        against the digest of the record before)."""
        return self._load(check_seq(seq))

    def append(
        self,
        state: Any,
        *,
        after: Entry | None,
        writer_id: str,
        artifacts: Mapping[str, Manifest] | None = None,
        meta: Mapping[str, Any] | None = None,
        deletes: bool = False,
        started: float | None = None,
    ) -> Entry:
        """Append one record right after ``after`` (the last record the caller observed; None for
        an empty log), create-if-absent, chained to it and with its epoch: a ``checkpoint`` whose
        ``state`` (a JSON value), ``artifacts`` (manifests of stored chunks, named by reference)
        and ``meta`` are stored as given (not redacted: the caller's to redact), or with
        ``deletes`` a ``deleted`` record one epoch up, which removes every record before it (for
        readers, and for ``store.gc``, which collects them) and fences every writer of the epochs
        below. If another writer appended since, the seq is taken and nothing is written:
        RunDeletedError when the record there is a deletion, FencedError when its epoch is higher,
        else ConflictError (read the log again, then decide). The seq is never moved on: where a
        record goes is the caller's decision. ``started`` (``time.monotonic()`` before the chunks
        ``artifacts`` names were chosen or uploaded) holds the record to ``commit_deadline``
        (CommitDeadlineError); a record that names chunks needs it."""
        self._require_atomic_create()
        if not isinstance(writer_id, str) or not writer_id:
            raise InvalidArgumentError(f"writer_id is a non-empty string naming the writer, not {describe(writer_id)}")
        if after is not None and not isinstance(after, Entry):
            raise InvalidArgumentError(f"after is the Entry last read (Run.entry, Run.append) or None, not {describe(after)}")
        deletes = values.flag(deletes, "deletes")
        started = None if started is None else values.amount(started, "started")
        if artifacts is not None and not (
            isinstance(artifacts, Mapping) and all(isinstance(n, str) and isinstance(m, Manifest) for n, m in artifacts.items())
        ):
            raise InvalidArgumentError(f"artifacts maps names to Manifests, not {describe(artifacts)}")
        state = values.json_value(state, "state")
        meta = values.json_object(meta, "meta")
        named = dict(artifacts or {})
        if deletes and (named or state is not None):
            raise InvalidArgumentError("a deleted record holds no state and no artifacts; append them before it")
        if any(m.chunks for m in named.values()) and started is None:
            raise InvalidArgumentError(
                "a record that names chunks needs started= (time.monotonic() before they were chosen or uploaded), "
                "so that it is held to commit_deadline"
            )
        seq = after.record.seq + 1 if after is not None else 0
        epoch = after.record.epoch if after is not None else 1
        record_meta: dict[str, Any] = dict(meta or {})
        record = CommitRecord(
            schema_version=RECORD_SCHEMA_VERSION,
            kind="deleted" if deletes else "checkpoint",
            run_id=self.run_id,
            seq=seq,
            epoch=epoch + 1 if deletes else epoch,
            writer_id=writer_id,
            write_id=secrets.token_hex(16),
            prev=after.digest if after is not None else None,
            created_at=_now(),
            checkpoint_seq=None if deletes else seq,
            state=None if deletes else state,  # validated as JSON by the record's model
            artifacts=named,
            meta=record_meta,
        )
        entry, ours = self._put_record(record, started=started)
        if ours:
            self.store.seen.advance(self.run_id, entry)
            return entry
        other = entry.record
        if other.kind == "deleted":
            raise RunDeletedError(run_id=self.run_id, seq=other.seq, epoch=record.epoch, newer_epoch=other.epoch)
        if other.epoch > record.epoch:
            raise FencedError(run_id=self.run_id, seq=other.seq, epoch=record.epoch, newer_epoch=other.epoch)
        raise ConflictError(
            f"run {self.run_id!r}: seq {seq} was committed by another writer after the record this one last read; "
            "nothing was written. Read the log again (Run.records) and decide what to append after it.",
            run_id=self.run_id,
            seq=seq,
        )

    # -- documents beside the log, for integrations (the LangGraph saver) ----------------------
    # Objects an integration keeps under the run's prefix next to ``log/`` (its "attachments"):
    # each sealed with the store's cipher, bound to its kind and its key, so it opens as nothing
    # else and under no other key, run or store.

    def log_key(self, seq: int) -> str:
        """The key of the log record at ``seq`` (for messages: ``runs/<segment>/log/<seq>``)."""
        return self._log_key(check_seq(seq))

    def listing(self, documents: str | None = None) -> RunListing:
        """One LIST: the log's records (seq -> etag, as stored: a tombstone written over a record
        has another etag) and, unless ``documents`` is None, the documents whose names start with
        it (name -> etag). Without ``documents`` only ``log/`` is listed."""
        if documents is not None:
            _check_document_prefix(documents)
        prefix = self.prefix
        logged: dict[int, str | None] = {}
        found: dict[str, str | None] = {}
        for info in self.store.backend.list(prefix if documents is not None else f"{prefix}log/"):
            rest = info.key[len(prefix) :]
            if rest.startswith("log/"):
                seq = parse_seq(rest[len("log/") :])
                if seq is not None:
                    logged[seq] = info.etag
            elif documents is not None and rest != "HEAD" and rest.startswith(documents):
                found[rest] = info.etag
        return RunListing(logged, found)

    def put_document(self, name: str, data: bytes, *, kind: str, create: bool = True) -> Document | None:
        """Seal ``data`` as a document of ``kind`` named ``name`` (a path below the run's prefix,
        not ``log/...`` or ``HEAD``) and store it: with ``create`` (the default) create-if-absent,
        returning None when the name is taken (nothing is written); else it replaces any document
        there. Returns the document as stored, with its etag."""
        key = self._document_key(name)
        _check_kind(kind)
        create = values.flag(create, "create")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgumentError(f"a document's data is bytes, not {describe(data)}")
        sealed = codec.seal_document(self.store.cipher, kind, key[len("runs/") :], bytes(data))
        try:
            result = self.store.backend.put(key, sealed, mode="create" if create else "overwrite")
        except PreconditionFailedError:
            if create:
                return None
            raise
        return Document(name, bytes(data), result.etag)

    def get_document(self, name: str, *, kind: str) -> Document | None:
        """The document of ``kind`` stored as ``name``, or None if there is none. IntegrityError
        if the object there was sealed as another kind or name, or altered."""
        key = self._document_key(name)
        _check_kind(kind)
        try:
            got = self.store.backend.get(key)
        except ObjectNotFoundError:
            return None
        return Document(name, self.open_document(name, got.data, kind=kind), got.etag)

    def open_document(self, name: str, sealed: bytes, *, kind: str) -> bytes:
        """The plaintext of a document of ``kind`` named ``name`` from its stored bytes (read by
        the caller); IntegrityError if they were sealed as anything else, or altered."""
        key = self._document_key(name)
        _check_kind(kind)
        if not isinstance(sealed, bytes | bytearray | memoryview):
            raise InvalidArgumentError(f"a sealed document is bytes, not {describe(sealed)}")
        return codec.open_document(self.store.cipher, kind, key[len("runs/") :], bytes(sealed), key=key)

    def _document_key(self, name: Any) -> str:
        if not isinstance(name, str) or not name or "\x00" in name:
            raise InvalidArgumentError(f"a document name is a non-empty path, not {describe(name)}")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(f"document name {name!r} is not valid Unicode text: {exc}") from None
        parts = name.split("/")
        if name == "HEAD" or parts[0] == "log" or any(p in ("", ".", "..") for p in parts):
            raise InvalidArgumentError(
                f"document name {name!r}: a path of non-empty segments below the run's prefix, not '.', '..', "
                "HEAD or under log/"
            )
        return f"{self.prefix}{name}"


@dataclass(frozen=True)
class RunListing:
    """What one LIST of a run found (``Run.listing``)."""

    #: seq -> etag of every log record
    log: dict[int, str | None]
    #: name -> etag of every document listed
    documents: dict[str, str | None]


@dataclass(frozen=True)
class Document:
    """A document beside a run's log, as stored or read (``Run.put_document``/``get_document``)."""

    name: str
    data: bytes
    etag: str | None


def _check_kind(kind: Any) -> None:
    if not isinstance(kind, str) or not kind or not kind.isascii() or not kind.isprintable() or kind in codec.CORE_KINDS:
        raise InvalidArgumentError(
            f"a document kind is a non-empty printable ASCII name other than {', '.join(sorted(codec.CORE_KINDS))}, "
            f"not {describe(kind)}"
        )


def _check_document_prefix(prefix: Any) -> None:
    if not isinstance(prefix, str) or not prefix.isascii() or not prefix.isprintable() or prefix.startswith("log/"):
        raise InvalidArgumentError(f"a document prefix is a printable ASCII path (not under log/), not {describe(prefix)}")


def check_deadline(store: Store, started: float, key: str) -> None:
    """Refuse to create a record that names new packs once the commit has run past the deadline:
    the collector deletes unreferenced packs older than its grace, at least twice the deadline, so a
    record created before the deadline never names a pack the collector has deleted."""
    elapsed = time.monotonic() - started
    if elapsed > store.options.commit_deadline:
        raise CommitDeadlineError(
            f"{key}: the commit took {elapsed:.3g} s, longer than commit_deadline ({store.options.commit_deadline:g} s), "
            "so its record was not written (the collector may already count its packs as garbage). Nothing was "
            "committed: commit again."
        )


def _find_effect(run_id: str, effects: Mapping[str, EffectRecord], wanted: str) -> EffectRecord:
    """The effect with idempotency key ``wanted``, or the only one whose key starts with it."""
    if wanted in effects:
        return effects[wanted]
    matches = [e for k, e in effects.items() if k.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise RunNotFoundError(
            f"run {run_id!r} has no effect with idempotency key {wanted!r}; `s3ckpt effects RUN` lists them. "
            "Nothing was written."
        )
    raise InvalidArgumentError(
        f"{wanted!r} is the start of {len(matches)} idempotency keys of run {run_id!r} "
        f"({', '.join(e.idempotency_key for e in matches[:5])}); give more of the key. Nothing was written."
    )
