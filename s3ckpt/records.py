"""Pydantic models of every persisted structure. Validation is strict: wrong types, missing and
unexpected fields are errors, never silent defaults.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from ._names import check_blob_id

#: The format version of the store layout (config, keys, blobs, runs) that new stores get.
FORMAT_VERSION = 2
#: Stores whose run directories are keyed digests of the run ids (``run_names="keyed"``): an
#: older client, which would write readable names into them, refuses them.
KEYED_NAMES_FORMAT_VERSION = 3
#: The newest layout this client reads and writes.
NEWEST_FORMAT_VERSION = KEYED_NAMES_FORMAT_VERSION
#: The schema version of commit records (migrations in ``migrations.py`` bring older ones forward).
#: 4 adds ``pruned`` records (tombstones that retention and run deletion leave in place of a record).
RECORD_SCHEMA_VERSION = 4
#: The schema version of key files.
KEYFILE_VERSION = 1
#: The schema version of the HEAD pointer.
HEAD_SCHEMA_VERSION = 1

Seq = Annotated[int, Field(ge=0, lt=10**20)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ChunkRef(_Strict):
    """One chunk: its content id, plaintext size, and where its sealed bytes live."""

    id: str
    size: Annotated[int, Field(ge=0, le=1 << 31)]
    #: The pack holding it, or None for a format-1 standalone blob at ``blobs/<aa>/<id>``.
    pack: str | None
    offset: Annotated[int, Field(ge=0, lt=1 << 40)]
    #: Sealed length inside the pack (None for a standalone blob, which is read whole).
    length: Annotated[int, Field(gt=0, le=1 << 31)] | None

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        return check_blob_id(value)

    @field_validator("pack")
    @classmethod
    def _valid_pack(cls, value: str | None) -> str | None:
        return None if value is None else check_blob_id(value)

    @model_validator(mode="after")
    def _located(self) -> ChunkRef:
        # A chunk in a pack needs its range; a format-1 standalone blob has none.
        if (self.pack is None) != (self.length is None) or (self.pack is None and self.offset != 0):
            raise ValueError("a chunk in a pack has an offset and a length; a standalone blob has neither")
        return self


class Manifest(_Strict):
    """A byte stream stored as content-addressed chunks, in order."""

    size: Annotated[int, Field(ge=0, lt=1 << 60)]
    chunks: tuple[ChunkRef, ...]


class ChunkerParams(_Strict):
    algorithm: Literal["fastcdc2020"] = "fastcdc2020"
    avg_size: Annotated[int, Field(ge=256, le=4 << 20)]
    min_size: Annotated[int, Field(ge=64, le=1 << 20)]
    max_size: Annotated[int, Field(ge=1024, le=16 << 20)]


class StoreConfig(_Strict):
    """``config``: plaintext, written once with create-if-absent."""

    format: Literal["s3ckpt"] = "s3ckpt"
    version: int
    store_id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    created_at: datetime
    chunker: ChunkerParams
    cipher: Literal["aes-256-gcm/hmac-sha256-subkey"] = "aes-256-gcm/hmac-sha256-subkey"
    content_id: Literal["blake3-keyed"] = "blake3-keyed"
    compression: Literal["zstd"] = "zstd"
    #: How run ids become directory names: escaped (readable), or keyed digests (private).
    run_names: Literal["escaped", "keyed"] = "escaped"
    #: Seconds any commit to this store may take (None: the default, 30 minutes). Writers refuse to
    #: take longer; the collector's grace must be at least twice it (docs/operations.md).
    commit_deadline: Annotated[float, Field(gt=0, lt=1e9)] | None = None
    #: HMAC over the fields above under a key derived from the master key: proves the key
    #: matches and that nobody edited the parameters.
    key_check: str = ""

    def document(self) -> bytes:
        """The stored JSON. ``run_names`` appears only when keyed and ``commit_deadline`` only when
        set, so a store without them has the same config (and key check) as before they existed."""
        exclude = {"run_names"} if self.run_names == "escaped" else set()
        if self.commit_deadline is None:
            exclude.add("commit_deadline")
        return self.model_dump_json(exclude=exclude or None).encode()


class ScryptParams(_Strict):
    n: Annotated[int, Field(ge=1 << 14, le=1 << 22)]
    r: Annotated[int, Field(ge=1, le=32)]
    p: Annotated[int, Field(ge=1, le=16)]


class KeyFile(_Strict):
    """``keys/<id>``: the master key wrapped by one user key (restic's model)."""

    version: Literal[1] = 1
    key_id: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
    store_id: str
    kind: Literal["raw", "passphrase", "kms"]
    created_at: datetime
    label: str = ""
    #: raw keys: a keyed fingerprint, so opening tries only the matching file.
    fingerprint: str | None = None
    salt: str | None = None
    scrypt: ScryptParams | None = None
    kms_key_id: str | None = None
    nonce: str | None = None
    wrapped: str


Number = int | float


class StepRecord(_Strict):
    """A step that completed and passed its acceptance check: its result is the resume point."""

    #: ``<scope>/<name>#<n>``: the n-th completed step of that name in its scope (a step's body is
    #: the scope of the steps and effects inside it).
    key: str
    name: str
    #: How to give the result back: JSON as is, a ``s3ckpt.Ref``, or a pydantic model's JSON.
    result_type: Literal["json", "ref", "model"] = "json"
    result: JsonValue = None
    completed_at: datetime
    #: The session's provenance (model, prompt hash, tool contracts) when the step ran.
    provenance: dict[str, JsonValue] = Field(default_factory=dict)
    #: Idempotency keys of the effects its body emitted.
    effects: tuple[str, ...] = ()


class AttemptRecord(_Strict):
    """A step body that ran and did not complete: rejected by its check, or raised."""

    step: str
    attempt: Annotated[int, Field(ge=0)]
    outcome: Literal["rejected", "error"]
    reason: str
    at: datetime
    effects: tuple[str, ...] = ()


EffectStatus = Literal["pending", "confirmed", "failed", "unknown", "not_sent", "rolled_back"]


class EffectRecord(_Strict):
    """One external effect. ``pending``: the intent is recorded and no outcome yet (a writer that
    died there leaves it so, and the next session treats it as unknown); ``unknown``: the send
    raised and nobody knows whether the provider acted; ``failed``/``not_sent``: it did not
    happen, so it may be sent again; ``rolled_back``: confirmed after a rollback point."""

    idempotency_key: str
    kind: str
    target: JsonValue
    #: ``sha256:<hex>`` of the canonical payload; the payload itself only when asked for.
    payload_hash: str
    payload: JsonValue = None
    position: str
    status: EffectStatus
    #: The provider's reference, once confirmed.
    reference: JsonValue = None
    intent_at: datetime
    outcome_at: datetime | None = None
    error: str | None = None
    #: Who decided the outcome: "send", "reconcile" or "operator".
    resolved_by: str | None = None
    sends: Annotated[int, Field(ge=0)] = 0

    def settled(self, status: EffectStatus, *, by: str, reference: JsonValue = None, error: str | None = None) -> EffectRecord:
        """This effect with its outcome decided (by "send", "reconcile" or "operator"), now."""
        update = {"status": status, "reference": reference, "error": error, "resolved_by": by}
        return self.model_copy(update={**update, "outcome_at": datetime.now(UTC)})


class Ledger(_Strict):
    """What a run cannot recompute: completed steps, attempts, effects, budget."""

    steps: dict[str, StepRecord] = Field(default_factory=dict)
    attempts: tuple[AttemptRecord, ...] = ()
    #: By idempotency key, in the order they were first emitted.
    effects: dict[str, EffectRecord] = Field(default_factory=dict)
    budget: dict[str, Number] = Field(default_factory=dict)
    #: Bumped by every rollback, so effects re-run after one get fresh idempotency keys.
    generation: Annotated[int, Field(ge=0)] = 0

    @field_validator("budget")
    @classmethod
    def _finite_budget(cls, value: dict[str, Number]) -> dict[str, Number]:
        if not all(math.isfinite(v) for v in value.values()):
            raise ValueError("budget amounts are finite numbers")
        return value


class CommitRecord(_Strict):
    """``runs/<run>/log/<seq>``: one entry of a run's append-only log."""

    schema_version: int
    #: ``pruned``: a tombstone left in place of a record that retention or run deletion removed; it
    #: keeps the key taken (a stalled writer's create still fails) and the chain (``meta["pruned"]``).
    kind: Literal["claim", "checkpoint", "deleted", "pruned"]
    run_id: str
    seq: Seq
    epoch: Annotated[int, Field(ge=1, lt=1 << 62)]
    writer_id: str
    #: Unique per write attempt: a 412 on a retried PUT is ours if the stored record carries it.
    write_id: str
    #: SHA-256 of the previous record's stored bytes; None only at seq 0.
    prev: str | None
    created_at: datetime
    #: The seq of the latest checkpoint at or before this record (None before the first).
    checkpoint_seq: Seq | None
    state: JsonValue = None
    state_manifest: Manifest | None = None
    artifacts: dict[str, Manifest] = Field(default_factory=dict)
    meta: dict[str, JsonValue] = Field(default_factory=dict)
    provenance: dict[str, JsonValue] = Field(default_factory=dict)
    #: The session ledger, inline; or, when large, stored as chunks like a large state.
    ledger: Ledger | None = None
    ledger_manifest: Manifest | None = None

    @field_validator("state", "meta", "provenance")
    @classmethod
    def _finite(cls, value: JsonValue) -> JsonValue:
        # JSON has no NaN or infinity; s3ckpt never writes them, so a record holding one is damaged.
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError("NaN and infinity are not JSON values")
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
        return value


class HeadPointer(_Strict):
    """``runs/<run>/HEAD``: the seq of the latest record when it was written. Only a hint."""

    schema_version: int
    seq: Seq
