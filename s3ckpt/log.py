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
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from . import _boundaries, codec
from ._names import encode_run_id, head_key, log_key, parse_seq, run_prefix
from .checkpoint import Checkpoint
from .errors import (
    BackendError,
    ConflictError,
    IntegrityError,
    InvalidArtifactError,
    ObjectNotFoundError,
    PreconditionFailedError,
    RunNotFoundError,
    UnsupportedBackendError,
)
from .records import RECORD_SCHEMA_VERSION, CommitRecord, EffectRecord, HeadPointer, Ledger
from .workflows import OnVersionChange, resolve
from .writer import Writer, json_value

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


class Run:
    """A handle on one run's log. Cheap to make; every method reads storage afresh."""

    def __init__(self, store: Store, run_id: str) -> None:
        encode_run_id(run_id)  # validates
        self.store = store
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    # -- reading -----------------------------------------------------------------------------

    def _load(self, seq: int) -> Entry | None:
        key = log_key(self.run_id, seq)
        try:
            data = self.store.backend.get(key).data
        except ObjectNotFoundError:
            return None
        record = codec.decode_record(self.store.cipher, data, run_id=self.run_id, seq=seq, key=key)
        return Entry(record, _digest(data))

    def _read_head(self) -> tuple[HeadPointer | None, str | None]:
        key = head_key(self.run_id)
        try:
            got = self.store.backend.get(key)
        except ObjectNotFoundError:
            return None, None
        return codec.decode_head(self.store.cipher, got.data, run_id=self.run_id, key=key), got.etag

    def _listed_seqs(self) -> list[int]:
        prefix = run_prefix(self.run_id) + "log/"
        seqs = (parse_seq(info.key[len(prefix) :]) for info in self.store.backend.list(prefix))
        return sorted(s for s in seqs if s is not None)

    def _tail(self) -> tuple[Entry | None, str | None]:
        """The last record of the log (found from HEAD, then by probing forward) and HEAD's etag."""
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
            raise InvalidArtifactError(f"validate must be 'exists' or 'full', not {validate!r}")
        where = f"run {self.run_id!r}@{record.seq}"
        self.store.blobs.check_stored(record.artifacts, where=where, read=validate == "full")
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
        record = entry.record
        if record.checkpoint_seq != record.seq:
            target = self._load(record.checkpoint_seq)  # type: ignore[arg-type]
            if target is None or target.record.kind != "checkpoint":
                raise self._missing(
                    record.checkpoint_seq,  # type: ignore[arg-type]
                    f"record {record.seq} names it as the latest checkpoint, but it is missing or not a checkpoint",
                )
            record = target.record
        return self._checkpoint(record, validate)

    def get(self, seq: int, *, validate: Validate = "exists") -> Checkpoint:
        entry = self._load(seq)
        if entry is None:
            raise RunNotFoundError(f"run {self.run_id!r} has no record at seq {seq}")
        if entry.record.kind != "checkpoint":
            raise RunNotFoundError(f"seq {seq} of run {self.run_id!r} is a {entry.record.kind} record, not a checkpoint")
        return self._checkpoint(entry.record, validate)

    def records(self) -> Iterator[CommitRecord]:
        """Every record, oldest first, with the hash chain checked from seq 0."""
        seqs = self._listed_seqs()
        if not seqs:
            return
        last = seqs[-1]
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
            yield entry.record
        # Records committed after the listing are picked up by probing, as readers do.
        while (entry := self._load(last + 1)) is not None:
            prev, last = self._chained(entry, prev), last + 1
            yield entry.record

    def _chained(self, entry: Entry, prev: str | None) -> str:
        """Check that ``entry`` chains to the record whose digest is ``prev``; return its digest."""
        if entry.record.prev != prev:
            raise IntegrityError(
                f"run {self.run_id!r}: record {entry.record.seq} does not chain to the record before it "
                "(a record was replaced, removed or replayed); run `s3ckpt verify`",
                key=log_key(self.run_id, entry.record.seq),
            )
        return entry.digest

    def _missing(self, seq: int, why: str) -> IntegrityError:
        key = log_key(self.run_id, seq)
        return IntegrityError(
            f"run {self.run_id!r}: the record at seq {seq} ({key}): {why}. s3ckpt never deletes a record of a live run, "
            "so this is damage; run `s3ckpt verify`",
            key=key,
        )

    def history(self) -> Iterator[Checkpoint]:
        """Every checkpoint, oldest first."""
        for record in self.records():
            if record.kind == "checkpoint":
                yield self._checkpoint(record)

    def rollback(self, seq: int) -> list[EffectRecord]:
        """Append a checkpoint that restores the state, steps and artifacts of checkpoint ``seq``
        (history is never rewritten) and return the effects confirmed after it, for the caller to
        compensate. Those stay in the ledger as ``rolled_back``; effects still unknown stay unknown;
        spending stays spent. Effects emitted again after the rollback get fresh idempotency keys.
        Claims the run, so a live writer of it is fenced."""
        target = self.get(seq)
        writer = self.claim(**target.provenance)
        latest = writer.parent_checkpoint()
        assert latest is not None  # get(seq) found a checkpoint, so the run has one
        then, now = target.ledger, latest.ledger
        effects: dict[str, EffectRecord] = {}
        undone: list[EffectRecord] = []
        for key, effect in now.effects.items():
            if key in then.effects:
                effects[key] = effect  # happened by seq (its latest outcome is the truth)
            elif effect.status == "confirmed":
                undone.append(effect)
                effects[key] = effect.model_copy(update={"status": "rolled_back"})
            else:
                effects[key] = effect  # unknown stays visibly unknown; failed ones are harmless
        ledger = Ledger(
            steps=then.steps, attempts=now.attempts, effects=effects, budget=now.budget, generation=now.generation + 1
        )
        writer._commit(target.state, artifacts=None, meta={"rollback_to": seq}, ledger=ledger, base=target.record.artifacts)
        return undone

    def resolve_effect(self, idempotency_key: str, *, sent: bool, reference: Any = None) -> EffectRecord:
        """An operator's decision on an effect whose outcome is unknown: it happened (``sent=True``,
        with the provider's ``reference``) or it did not (it may be sent again). Claims the run."""
        writer = self.claim(**(self._latest_provenance()))
        latest = writer.parent_checkpoint()
        effect = latest.ledger.effects.get(idempotency_key) if latest is not None else None
        if latest is None or effect is None:
            raise RunNotFoundError(f"run {self.run_id!r} has no effect with idempotency key {idempotency_key!r}")
        if sent and reference is None:
            raise InvalidArtifactError("an effect that was sent needs the provider's reference (--sent REF)")
        settled = effect.settled(
            "confirmed" if sent else "not_sent", by="operator", reference=json_value(reference, "reference") if sent else None
        )
        ledger = latest.ledger.model_copy(update={"effects": {**latest.ledger.effects, idempotency_key: settled}})
        writer._commit(latest.state, artifacts=None, meta={"resolved": idempotency_key}, ledger=ledger)
        return settled

    def _latest_provenance(self) -> dict[str, Any]:
        latest = self._latest("exists")
        return dict(latest.provenance) if latest is not None else {}

    def exists(self) -> bool:
        return self._tail()[0] is not None

    # -- writing -----------------------------------------------------------------------------

    def _require_atomic_create(self) -> None:
        if not self.store.backend.capabilities.atomic_create:
            raise UnsupportedBackendError(
                f"{self.store.backend.url} cannot create objects atomically, so it cannot guarantee that "
                "exactly one writer commits each seq. Use s3://, a local directory or memory://."
            )

    def _put_record(self, record: CommitRecord) -> tuple[Entry, bool]:
        """Create ``log/<seq>``. Returns the entry now at that seq and whether it is ours.

        Transient failures (409, 5xx, a lost connection) are retried by the store's retry layer
        (backends/_retry.py), which also recognises its own landed retry. A 412 that reaches here
        may still be ours (botocore retried a PUT that had landed), so the write id decides."""
        data = codec.encode_record(self.store.cipher, record)
        key = log_key(self.run_id, record.seq)
        attempts = self.store.options.commit_attempts
        for _ in range(attempts):
            try:
                self.store.backend.put(key, data, mode="create", metadata={"s3ckpt-write-id": record.write_id})
                return Entry(record, _digest(data)), True
            except PreconditionFailedError:
                existing = self._load(record.seq)
                if existing is None:  # vanished between the 412 and the read: try the create again
                    continue
                return existing, existing.record.write_id == record.write_id
        raise BackendError(f"could not create {key} after {attempts} attempts")

    def claim(self, *, workflow: str | None = None, workflow_version: str | None = None, **provenance: Any) -> Writer:
        """Become the run's writer: append a claim record with a higher epoch, fencing older writers.

        ``workflow`` and ``workflow_version`` name the code that writes from now on; other keywords
        (model, prompt hash, tool-contract versions, ...) are recorded as provenance. Every
        checkpoint this writer commits carries them."""
        self._require_atomic_create()
        if workflow is not None:
            provenance["workflow"] = str(workflow)
        if workflow_version is not None:
            provenance["workflow_version"] = str(workflow_version)
        provenance = self.store.options.redactor.redact(json_value(provenance, "provenance"))
        writer_id = secrets.token_hex(8)
        for _ in range(64):
            tail, head_etag = self._tail()
            seq = tail.record.seq + 1 if tail else 0
            epoch = tail.record.epoch + 1 if tail else 1
            live = tail is not None and tail.record.kind != "deleted"
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
                checkpoint_seq=tail.record.checkpoint_seq if live and tail else None,
                provenance=provenance,
            )
            entry, ours = self._put_record(record)
            if not ours:
                continue  # another writer appended meanwhile: claim above it
            # A checkpoint at the tail is the new writer's parent, already in hand: no extra read.
            parent = tail.record if tail is not None and tail.record.kind == "checkpoint" else None
            writer = Writer(self, entry, head_etag=head_etag, parent=parent)
            _boundaries.reached("between-record-and-pointer", str(seq))
            writer._move_head(seq)
            return writer
        raise ConflictError(f"run {self.run_id!r}: could not claim after 64 attempts", run_id=self.run_id, seq=-1)
