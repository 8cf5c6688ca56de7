"""Sessions: a harness's run as steps and effects, resumable anywhere without repeating either.

``store.resume(run_id, ...)`` claims the run (fencing older writers), loads the latest checkpoint,
settles the effects whose outcome is unknown, and returns a Session. Inside it:

- ``step(name, fn)`` returns the recorded result of a step that completed before; otherwise it runs
  ``fn``, runs the acceptance check and commits the result only if the check passes.
- ``emit(kind, ...)`` commits an intent (with a deterministic idempotency key) before calling
  ``send``, and the outcome after. A confirmed effect is never sent again.

Positions make replays deterministic: the n-th completed step named ``x`` in a scope has the key
``<scope>/x#n``, and the n-th effect of kind ``k`` in a scope the position ``<scope>/k#n``; a step's
body is the scope of what it calls. The idempotency key is derived from the run, the position and
the kind, so the same code emitting the same effect on a resume presents the same key, to the
ledger and to the provider. A retried step (after a rejection or an error) emits at the same
positions, so an effect it already caused is not caused again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import typing
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pydantic

from . import _boundaries
from .errors import (
    BudgetExceededError,
    ConflictError,
    EffectFailedError,
    EffectMismatchError,
    IncompatibleSchemaError,
    InvalidArtifactError,
    S3ckptError,
    StepRejectedError,
    UnknownOutcomeError,
)
from .records import AttemptRecord, EffectRecord, Ledger, StepRecord
from .ref import Ref
from .workflows import POLICIES, OnVersionChange, compare, resolve
from .writer import json_value

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .log import Run
    from .writer import Writer

log = logging.getLogger("s3ckpt")

#: ``reconcile[kind](effect)``: the provider's reference if the effect happened, None if it did not.
Reconciler = Callable[[EffectRecord], Any]
_UNSETTLED = ("pending", "unknown")
_NOT_HAPPENED = ("failed", "not_sent")


def _now() -> datetime:
    return datetime.now(UTC)


def payload_hash(payload: Any) -> str:
    """``sha256:<hex>`` of bytes as they are, or of canonical JSON (sorted keys, no spaces)."""
    if isinstance(payload, bytes | bytearray | memoryview):
        data = bytes(payload)
    else:
        if isinstance(payload, pydantic.BaseModel):
            payload = payload.model_dump(mode="json")
        try:
            data = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError) as exc:
            raise InvalidArtifactError(f"an effect's payload must be bytes or JSON-compatible: {exc}") from None
    return "sha256:" + hashlib.sha256(data).hexdigest()


def derive_idempotency_key(run_id: str, generation: int, position: str, kind: str) -> str:
    """Deterministic: the same run, position and kind give the same key on every resume."""
    material = "\0".join((run_id, str(generation), position, kind)).encode()
    return "s3c-" + hashlib.sha256(material).hexdigest()[:40]


def _describe(effect: EffectRecord) -> str:
    return (
        f"{effect.kind} to {effect.target!r} (idempotency key {effect.idempotency_key}, position {effect.position}, "
        f"{effect.status} since {effect.intent_at.isoformat()})"
    )


class Session:
    """One writer's turn at a run of a workflow. Use it from one thread."""

    def __init__(
        self,
        run: Run,
        writer: Writer,
        checkpoint: Checkpoint | None,
        *,
        reset_steps: bool,
        budget: Mapping[str, float] | None,
    ) -> None:
        self.run = run
        self._writer = writer
        ledger = checkpoint.ledger if checkpoint is not None else Ledger()
        #: The harness's own small state, saved with every commit.
        self.state: Any = checkpoint.state if checkpoint is not None and not reset_steps else {}
        if self.state is None:
            self.state = {}
        self._steps: dict[str, StepRecord] = {} if reset_steps else dict(ledger.steps)
        self._attempts: list[AttemptRecord] = list(ledger.attempts)
        self._effects: dict[str, EffectRecord] = dict(ledger.effects)
        self._spent: dict[str, int | float] = dict(ledger.budget)
        self._generation = ledger.generation
        self._limits = dict(budget or {})
        self._counters: Counter[str] = Counter()
        self._scopes: list[str] = [""]
        self._emitted: list[list[str]] = [[]]
        self._stopped: S3ckptError | None = None
        self._committed = self._snapshot() if checkpoint is not None and not reset_steps else None
        #: The checkpoint this session resumed from (None for a new run).
        self.resumed_from = checkpoint

    # -- the public surface ---------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self._writer.provenance)

    @property
    def budget(self) -> dict[str, int | float]:
        """Spent so far, per unit."""
        return dict(self._spent)

    @property
    def steps(self) -> dict[str, StepRecord]:
        return dict(self._steps)

    @property
    def effects(self) -> list[EffectRecord]:
        return list(self._effects.values())

    def step(
        self, name: str, fn: Callable[..., Any], *args: Any, accept: Callable[[Any], bool] | None = None, **kwargs: Any
    ) -> Any:
        """The recorded result if this step completed before; otherwise run ``fn(*args, **kwargs)``,
        check it with ``accept`` and commit it only if the check passes (else StepRejectedError)."""
        self._check_running()
        scope = self._scopes[-1]
        key = f"{scope}{name}#{self._counters[scope + '/' + name]}"
        recorded = self._steps.get(key)
        if recorded is not None:
            self._counters[scope + "/" + name] += 1
            return _decode_result(recorded, fn)
        self._check_budget(f"step {name!r}")
        attempt = sum(1 for a in self._attempts if a.step == key)
        self._scopes.append(key + "/")
        self._emitted.append([])
        _boundaries.reached("step-start", key)
        try:
            result = fn(*args, **kwargs)
            accepted = True if accept is None else bool(accept(result))
        except Exception as exc:
            emitted = self._leave_scope()
            if not isinstance(exc, ConflictError) and self._stopped is None:
                try:
                    self._record_attempt(key, attempt, "error", f"{type(exc).__name__}: {exc}", emitted)
                except S3ckptError as recording:  # the step's own error is the one to raise
                    log.warning("could not record the failed attempt of step %r: %s", key, recording)
            raise
        except BaseException:
            self._leave_scope()
            raise
        emitted = self._leave_scope()
        if not accepted:
            self._record_attempt(key, attempt, "rejected", "the acceptance check returned False", emitted)
            raise StepRejectedError(
                f"step {name!r} ({key}, attempt {attempt}) was rejected by its acceptance check; it is not a resume "
                "point, and its attempt and effects are recorded. Retry it, or change the step."
            )
        result_type, value = _encode_result(result, name)
        self._steps[key] = StepRecord(
            key=key,
            name=name,
            result_type=result_type,
            result=value,
            completed_at=_now(),
            provenance=self.provenance,
            effects=tuple(emitted),
        )
        self._counters[scope + "/" + name] += 1
        self._commit()
        _boundaries.reached("step-committed", key)
        _boundaries.reached("after-step", key)
        return result

    def emit(
        self,
        kind: str,
        *,
        target: Any,
        payload: Any,
        send: Callable[[str], Any],
        idempotency_key: str | None = None,
        failed_on: tuple[type[BaseException], ...] = (),
        store_payload: bool = False,
    ) -> Any:
        """Cause an external effect at most once per position: record the intent, call
        ``send(idempotency_key)``, record the reference it returns, and return that reference.

        On a resume, a confirmed effect is not sent again: its recorded reference is returned. The
        same key with a different payload raises EffectMismatchError and stops the session. An
        exception from ``send`` leaves the outcome unknown, unless it is an EffectFailedError or one of
        ``failed_on`` (the provider did not act): then the effect is failed and may be sent again.
        The payload is stored only as its hash unless ``store_payload``."""
        self._check_running()
        scope = self._scopes[-1]
        position = f"{scope}{kind}#{self._counters[scope + '/!' + kind]}"
        self._counters[scope + "/!" + kind] += 1
        key = idempotency_key or derive_idempotency_key(self.run_id, self._generation, position, kind)
        digest = payload_hash(payload)
        existing = self._effects.get(key)
        if existing is not None:
            if existing.payload_hash != digest:
                self._stopped = EffectMismatchError(
                    f"effect {kind!r} with idempotency key {key} was recorded with payload {existing.payload_hash} and is "
                    f"now emitted with {digest}: the code or its inputs changed under a recorded effect. The session "
                    "stopped; nothing was sent. Give the new effect its own idempotency_key, or roll the run back."
                )
                raise self._stopped
            if existing.status == "confirmed":
                self._emitted[-1].append(key)
                return existing.reference
            if existing.status in _UNSETTLED:
                raise UnknownOutcomeError(
                    f"the outcome of {_describe(existing)} is unknown; it was not sent again. Resume with "
                    f"reconcile={{{kind!r}: ...}} to decide it.",
                    effects=[existing],
                )
            if existing.status == "rolled_back":
                raise EffectMismatchError(f"{_describe(existing)} was rolled back; emit it under a new idempotency_key")
        self._check_budget(f"effect {kind!r}")
        _boundaries.reached("before-intent", key)
        stored_payload = None
        if store_payload:
            stored_payload = json_value(
                payload.model_dump(mode="json") if isinstance(payload, pydantic.BaseModel) else payload, "payload"
            )
        intent = EffectRecord(
            idempotency_key=key,
            kind=kind,
            target=json_value(target, "target"),
            payload_hash=digest,
            payload=stored_payload,
            position=position,
            status="pending",
            intent_at=_now(),
            sends=(existing.sends if existing is not None else 0) + 1,
        )
        self._effects[key] = intent
        self._emitted[-1].append(key)
        self._commit()  # the intent is durable before anything leaves this process
        _boundaries.reached("between-intent-and-send", key)
        try:
            reference = send(key)
        except Exception as exc:
            failed = isinstance(exc, EffectFailedError) or (bool(failed_on) and isinstance(exc, failed_on))
            status: Any = "failed" if failed else "unknown"
            self._settle(key, status, error=f"{type(exc).__name__}: {exc}", by="send")
            raise
        reference = json_value(reference, "the reference send returned")
        self._settle(key, "confirmed", reference=reference, by="send")
        _boundaries.reached("after-confirm", key)
        return reference

    def spend(self, **amounts: float) -> dict[str, int | float]:
        """Add to the budget spent, per unit (``spend(tokens=1200, usd=0.03)``); saved with every commit."""
        for unit, amount in amounts.items():
            if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount):
                raise InvalidArtifactError(f"spend({unit}=...) takes a finite number, not {amount!r}")
            self._spent[unit] = self._spent.get(unit, 0) + amount
        return self.budget

    def checkpoint(self, *, artifacts: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None) -> Checkpoint:
        """Commit now: the state, the ledger, and any artifacts."""
        self._check_running()
        checkpoint = self._commit(artifacts=artifacts, meta=meta, force=True)
        assert checkpoint is not None  # forced commits always commit
        _boundaries.reached("after-checkpoint", str(checkpoint.seq))
        return checkpoint

    def close(self) -> None:
        """Commit what changed since the last commit (the state, spending)."""
        if self._stopped is None:
            self._commit()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()

    # -- internals -----------------------------------------------------------------------

    def _check_running(self) -> None:
        if self._stopped is not None:
            raise self._stopped

    def _check_budget(self, what: str) -> None:
        for unit, limit in self._limits.items():
            spent = self._spent.get(unit, 0)
            if spent >= limit:
                raise BudgetExceededError(
                    f"run {self.run_id!r}: {what} not started: {unit} spent {spent} of a budget of {limit}. "
                    "Resume with a larger budget to go on.",
                    unit=unit,
                    spent=spent,
                    limit=limit,
                )

    def _leave_scope(self) -> list[str]:
        self._scopes.pop()
        emitted = self._emitted.pop()
        self._emitted[-1].extend(emitted)
        return emitted

    def _record_attempt(self, key: str, attempt: int, outcome: Any, reason: str, emitted: list[str]) -> None:
        self._attempts.append(
            AttemptRecord(step=key, attempt=attempt, outcome=outcome, reason=reason, at=_now(), effects=tuple(emitted))
        )
        self._commit()

    def _settle(self, key: str, status: Any, *, reference: Any = None, error: str | None = None, by: str) -> None:
        effect = self._effects[key]
        self._effects[key] = effect.settled(status, by=by, reference=reference, error=error)
        self._commit()

    def _ledger(self) -> Ledger:
        return Ledger(
            steps=self._steps,
            attempts=tuple(self._attempts),
            effects=self._effects,
            budget=self._spent,
            generation=self._generation,
        )

    def _snapshot(self) -> str:
        state = json.dumps(self.state, sort_keys=True, default=str)
        return state + "\0" + self._ledger().model_dump_json()

    def _commit(
        self, *, artifacts: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None, force: bool = False
    ) -> Checkpoint | None:
        snapshot = self._snapshot()
        if not force and snapshot == self._committed:
            return None
        try:
            checkpoint = self._writer.commit(self.state, artifacts=artifacts, meta=meta, ledger=self._ledger())
        except ConflictError as exc:
            self._stopped = exc  # fenced or deleted: this session must not write again
            raise
        self._committed = snapshot
        return checkpoint


def _encode_result(result: Any, name: str) -> tuple[Any, Any]:
    if isinstance(result, Ref):
        return "ref", result.model_dump(mode="json")
    if isinstance(result, pydantic.BaseModel):
        return "model", result.model_dump(mode="json")
    try:
        return "json", json_value(result, f"the result of step {name!r}")
    except InvalidArtifactError as exc:
        raise InvalidArtifactError(f"{exc}; return a pydantic model, or a s3ckpt.Ref to content stored elsewhere") from None


def _decode_result(step: StepRecord, fn: Callable[..., Any]) -> Any:
    if step.result_type == "ref":
        return Ref.model_validate(step.result)
    if step.result_type == "model":
        model = _return_model(fn)
        if model is not None:
            return model.model_validate(step.result)
    return step.result


def _return_model(fn: Callable[..., Any]) -> type[pydantic.BaseModel] | None:
    """The pydantic model ``fn`` is annotated to return, to give a replayed result its type back."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the JSON value
        return None
    return hint if isinstance(hint, type) and issubclass(hint, pydantic.BaseModel) else None


def open_session(
    run: Run,
    *,
    workflow: str,
    workflow_version: str,
    provenance: Mapping[str, Any] | None,
    reconcile: Mapping[str, Reconciler] | None,
    on_version_change: OnVersionChange,
    budget: Mapping[str, float] | None,
) -> Session:
    """Claim the run, load and validate its latest checkpoint, apply the version policy, and settle
    the effects whose outcome is unknown."""
    if on_version_change not in POLICIES:
        raise InvalidArtifactError(f"on_version_change must be one of {', '.join(POLICIES)}, not {on_version_change!r}")
    provenance = dict(provenance or {})
    writer = run.claim(workflow=workflow, workflow_version=workflow_version, **provenance)
    checkpoint = writer.parent_checkpoint()
    reset_steps = False
    if checkpoint is not None:
        recorded_workflow = checkpoint.provenance.get("workflow")
        if recorded_workflow is not None and recorded_workflow != workflow:
            raise IncompatibleSchemaError(
                f"run {run.run_id!r} belongs to workflow {recorded_workflow!r}, not {workflow!r}; resume it with its own "
                "workflow, or start a new run id",
                found=recorded_workflow,
                supported=workflow,
            )
        provenance = json_value(provenance, "provenance")
        change = compare(checkpoint.provenance, workflow_version=str(workflow_version), provenance=provenance)
        if change.any:
            log.info("run %r resumes under a change (%s): %s", run.run_id, on_version_change, change.describe())
        if on_version_change == "invalidate" and change.any:
            reset_steps = True  # completed steps run again; effects and spending stay recorded
        else:
            checkpoint = resolve(
                checkpoint,
                run.store.migrations,
                workflow_version=str(workflow_version),
                provenance=provenance,
                on_version_change=on_version_change,
            )
    session = Session(run, writer, checkpoint, reset_steps=reset_steps, budget=budget)
    _reconcile(session, reconcile if reconcile is not None else {})  # an empty defaultdict still answers
    return session


def _reconcile(session: Session, reconcile: Mapping[str, Reconciler]) -> None:
    """Ask the reconcilers about every effect with an intent and no outcome; raise for the rest."""
    unsettled = [e for e in session.effects if e.status in _UNSETTLED]
    for effect in unsettled:
        try:
            decide = reconcile[effect.kind]  # not .get(): a defaultdict answers only through []
        except KeyError:
            continue
        reference = decide(effect)
        if reference is None:
            session._settle(effect.idempotency_key, "not_sent", by="reconcile")
        else:
            session._settle(
                effect.idempotency_key, "confirmed", reference=json_value(reference, "reconciled reference"), by="reconcile"
            )
    left = [e for e in session.effects if e.status in _UNSETTLED]
    if left:
        kinds = sorted({e.kind for e in left})
        raise UnknownOutcomeError(
            f"run {session.run_id!r} has {len(left)} effect(s) whose outcome is unknown, and nothing was sent:\n  "
            + "\n  ".join(_describe(e) for e in left)
            + f"\nResume with reconcile={{{', '.join(repr(k) + ': fn' for k in kinds)}}} (fn(effect) returns the provider's "
            "reference if it happened, None if not), or settle each with `s3ckpt resolve RUN KEY --sent REF | --not-sent`.",
            effects=left,
        )
