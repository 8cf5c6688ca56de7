"""Sessions: a harness's run as steps and effects, resumable anywhere without repeating either.

``store.resume(run_id, ...)`` checks the run's latest checkpoint against the resuming code (workflow,
version policy) before it writes anything, then claims the run (fencing older writers), settles the
effects whose outcome is unknown and returns a Session. Inside it:

- ``step(name, fn)`` returns the recorded result of a step that completed before; otherwise it runs
  ``fn``, runs the acceptance check and commits the result only if the check passes.
- ``emit(kind, ...)`` commits an intent (with a deterministic idempotency key) before calling
  ``send``, and the outcome after. A confirmed effect is never sent again.

Positions make replays deterministic, and they count only what happened: the n-th *completed* step
named ``x`` in a scope has the key ``<scope>x#n``, and the n-th *confirmed* effect of kind ``k`` in a
scope the position ``<scope>k#n``; a step's body is the scope of what it calls, and each attempt at
a step starts its scope afresh. So every way a caller can run the same code again (a retried step, a
retried emit, a resume in another process) reaches the same positions, and a position's effect is
sent at most once: while its outcome is unknown nothing more is sent there until a reconciler, an
operator or an explicit failure settles it. A position issues a new idempotency key only after the
provider refused the previous one (``failed``) or it was rolled back. See docs/sessions.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import typing
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pydantic

from . import _boundaries, values
from .errors import (
    BudgetExceededError,
    ConflictError,
    EffectFailedError,
    EffectMismatchError,
    IncompatibleSchemaError,
    InvalidArgumentError,
    InvalidArtifactError,
    S3ckptError,
    StepMismatchError,
    StepRejectedError,
    UnknownOutcomeError,
    describe,
)
from .records import AttemptRecord, EffectRecord, Ledger, StepRecord
from .ref import Ref
from .workflows import POLICIES, OnVersionChange, compare, resolve

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .log import Run
    from .redaction import Redactor
    from .writer import Writer

log = logging.getLogger("s3ckpt")

#: ``reconcile[kind](effect)``: the provider's reference if the effect happened, None if it did not.
Reconciler = Callable[[EffectRecord], Any]
UNSETTLED = frozenset({"pending", "unknown"})
#: Outcomes after which a position may issue a new idempotency key: the provider refused the
#: request, or the effect was compensated by a rollback.
_RENEWS_KEY = frozenset({"failed", "rolled_back"})


def _now() -> datetime:
    return datetime.now(UTC)


def payload_hash(payload: Any) -> str:
    """``sha256:<hex>`` of bytes as they are, or of canonical JSON (sorted keys, no spaces)."""
    if isinstance(payload, bytes | bytearray | memoryview):
        data = bytes(payload)
    else:
        value = values.json_value(payload, "the effect's payload")
        data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def derive_idempotency_key(store_id: str, run_id: str, position: str, kind: str, index: int) -> str:
    """The ``index``-th key of a position: the same store, run and position give the same key on
    every host and every resume, and no two stores (or runs, or positions) share one."""
    # JSON, not a separator: run ids and names may contain any character, NUL included.
    material = json.dumps(["s3ckpt/v2 effect", store_id, run_id, position, kind, index], ensure_ascii=True).encode()
    return "s3c-" + hashlib.sha256(material).hexdigest()[:40]


def _describe(effect: EffectRecord) -> str:
    return (
        f"{effect.kind} to {json.dumps(effect.target)[:80]} (idempotency key {effect.idempotency_key}, position "
        f"{effect.position}, {effect.status} since {effect.intent_at.isoformat()})"
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
        reconcile: Mapping[str, Reconciler] | None = None,
    ) -> None:
        self.run = run
        self._writer = writer
        self._redactor: Redactor = run.store.options.redactor
        ledger = checkpoint.ledger if checkpoint is not None else Ledger()
        #: The harness's own small state, saved with every commit.
        self.state: Any = checkpoint.state if checkpoint is not None and not reset_steps else {}
        if self.state is None:
            self.state = {}
        self._steps: dict[str, StepRecord] = {} if reset_steps else dict(ledger.steps)
        self._attempts: list[AttemptRecord] = list(ledger.attempts)
        self._effects: dict[str, EffectRecord] = dict(ledger.effects)
        #: position -> idempotency keys issued there, oldest first
        self._keys_at: dict[str, list[str]] = {}
        #: (scope, kind, content) -> idempotency keys issued for it, wherever its position was
        self._keys_like: dict[str, list[str]] = {}
        for key, effect in self._effects.items():
            self._keys_at.setdefault(effect.position, []).append(key)
            self._keys_like.setdefault(_content_slot(effect.position, (effect.target, effect.payload_hash)), []).append(key)
        self._spent: dict[str, int | float] = dict(ledger.budget)
        self._generation = ledger.generation
        self._limits = {self._name(unit, "a budget unit"): limit for unit, limit in (budget or {}).items()}
        self._reconcile: Mapping[str, Reconciler] = reconcile if reconcile is not None else {}
        #: scope -> how many steps completed and effects confirmed there, per name (this attempt)
        self._counters: dict[str, Counter[str]] = {"": Counter()}
        #: scope -> step name -> the arguments of its last failed call there (this attempt)
        self._failed_calls: dict[str, dict[str, str | None]] = {"": {}}
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
        name = self._name(name, "a step name")
        if not callable(fn) or (accept is not None and not callable(accept)):
            raise InvalidArgumentError(f"step {name!r}: fn and accept must be callables")
        scope = self._scopes[-1]
        counters = self._counters[scope]
        key = f"{scope}{_escape(name)}#{counters['step ' + name]}"
        recorded = self._steps.get(key)
        if recorded is not None:
            counters["step " + name] += 1
            return _decode_result(recorded, fn)
        call = _fingerprint(args, kwargs)
        failed = self._failed_calls[scope].get(name)
        if failed is not None and call is not None and failed != call:
            # The position still belongs to the failed call: letting another call complete there would
            # hand its result to the failed one on a replay (and run this one again after it).
            self._stopped = StepMismatchError(
                f"step {name!r} ({key}) failed with other arguments and was called again before it completed. A retry "
                f"must pass the same arguments; other work needs its own step name (e.g. f\"{name}-{{item}}\"). The session "
                "stopped; nothing was run."
            )
            raise self._stopped
        self._check_budget(f"step {name!r}")
        attempt = sum(1 for a in self._attempts if a.step == key)
        # Every attempt starts its scope afresh, so it reaches the same positions as the last one.
        self._counters[key + "/"] = Counter()
        self._failed_calls[key + "/"] = {}
        self._scopes.append(key + "/")
        self._emitted.append([])
        _boundaries.reached("step-start", key)
        result_type: Any = None
        value: Any = None
        try:
            result = fn(*args, **kwargs)
            accepted = True if accept is None else bool(accept(result))
            if accepted:
                result_type, value = _encode_result(result, name)
        except Exception as exc:
            emitted = self._leave_scope()
            self._failed_calls[scope][name] = call
            if not isinstance(exc, ConflictError) and self._stopped is None:
                try:
                    self._record_attempt(key, attempt, "error", values.error_text(exc), emitted)
                except S3ckptError as recording:  # the step's own error is the one to raise
                    log.warning("could not record the failed attempt of step %r: %s", key, recording)
            raise
        except BaseException:
            self._leave_scope()
            raise
        emitted = self._leave_scope()
        if not accepted:
            self._failed_calls[scope][name] = call
            self._record_attempt(key, attempt, "rejected", "the acceptance check returned False", emitted)
            raise StepRejectedError(
                f"step {name!r} ({key}, attempt {attempt}) was rejected by its acceptance check; it is not a resume "
                "point, and its attempt and effects are recorded. Retry it with the same arguments: a retry reaches the "
                "same effects, so what the rejected attempt sent is returned, not sent again (a retry that would send "
                "something else there raises EffectMismatchError: emit that under another kind)."
            )
        self._steps[key] = StepRecord(
            key=key,
            name=name,
            result_type=result_type,
            result=value,
            completed_at=_now(),
            provenance=self.provenance,
            effects=tuple(emitted),
        )
        counters["step " + name] += 1
        self._failed_calls[scope].pop(name, None)
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

        A confirmed effect is not sent again: its recorded reference is returned. An effect whose
        outcome is unknown (``send`` raised, or the process died inside it) blocks its position:
        ``reconcile[kind]`` (given to ``resume``) is asked, else UnknownOutcomeError is raised and
        nothing is sent. ``send`` raising EffectFailedError, or one of ``failed_on``, means the
        provider did not act: the next emit at that position sends again, under a new key. Another
        target or payload at a position whose effect happened raises EffectMismatchError and stops the
        session. The payload is stored only as its hash unless ``store_payload``."""
        self._check_running()
        kind = self._name(kind, "an effect kind")
        if not callable(send):
            raise InvalidArgumentError(f"effect {kind!r}: send must be a callable send(idempotency_key)")
        failed_types = _exception_types(failed_on, kind)
        raw_key = None if idempotency_key is None else values.name(idempotency_key, "an idempotency_key")
        caller_key = None if raw_key is None else self._name(raw_key, "an idempotency_key")
        scope = self._scopes[-1]
        counters = self._counters[scope]
        digest = payload_hash(payload)
        target_value = self._redactor.redact(values.json_value(target, "the effect's target"))
        stored_payload = self._redactor.redact(values.json_value(payload, "the payload")) if store_payload else None
        content = (target_value, digest)

        position = f"{scope}{_escape(kind)}#{counters['effect ' + kind]}"
        latest = self._latest_at(position, caller_key)
        if latest is not None and latest.status in UNSETTLED:
            latest = self._settle_in_session(latest)
        if latest is not None and latest.status == "confirmed":
            if (latest.target, latest.payload_hash) == content:
                counters["effect " + kind] += 1
                self._emitted[-1].append(latest.idempotency_key)
                return latest.reference
            refused = self._refused_at(position, content)
            if refused is not None:
                # A replay: this effect was refused here (or not sent), then another one took the position.
                raise EffectFailedError(
                    f"{_describe(refused)} did not happen ({refused.error or 'not sent'}), and a later effect took its "
                    "position; replayed, not sent again"
                )
            self._stopped = EffectMismatchError(
                f"effect {kind!r} at {position} (idempotency key {latest.idempotency_key}) happened, sent to "
                f"{json.dumps(latest.target)[:80]} with payload {latest.payload_hash}, and is now emitted to "
                f"{json.dumps(target_value)[:80]} with {digest}: either the code or its inputs changed under an effect "
                "that happened, or an earlier emit here raised and is being retried with other content. The session "
                "stopped; nothing was sent. Emit a new effect under another kind, or roll the run back."
            )
            raise self._stopped
        if latest is not None and latest.status == "rolled_back" and caller_key == latest.idempotency_key:
            raise EffectMismatchError(f"{_describe(latest)} was rolled back; emit it again under a new idempotency_key")
        self._check_budget(f"effect {kind!r}")

        not_sent = self._not_sent_at(position, content, caller_key)
        if not_sent is not None:
            # Not sent (a reconciler or an operator said so): the same request again, under its own key.
            key = raw_key if raw_key is not None and caller_key == not_sent.idempotency_key else not_sent.idempotency_key
        elif raw_key is not None:
            key = raw_key
        else:
            # The first index whose key was never issued: keys of effects that moved on to a later
            # position (a not-sent effect sent again there) stay theirs.
            index = len(self._keys_at.get(position, ()))
            while (key := derive_idempotency_key(self.run.store.config.store_id, self.run_id, position, kind, index)) in (
                self._effects
            ):
                index += 1
        recorded_key = key if raw_key is None or key != raw_key else caller_key
        assert recorded_key is not None
        _boundaries.reached("before-intent", recorded_key)
        previous = self._effects.get(recorded_key)
        intent = EffectRecord(
            idempotency_key=recorded_key,
            kind=kind,
            target=target_value,
            payload_hash=digest,
            payload=stored_payload,
            position=position,
            status="pending",
            intent_at=_now(),
            sends=(previous.sends if previous is not None else 0) + 1,
        )
        self._effects[recorded_key] = intent
        if previous is not None and previous.position != position:
            self._keys_at[previous.position].remove(recorded_key)  # the effect moves to where it is sent now
        keys_here = self._keys_at.setdefault(position, [])
        if recorded_key not in keys_here:
            keys_here.append(recorded_key)
        keys_like = self._keys_like.setdefault(_content_slot(position, content), [])
        if recorded_key not in keys_like:
            keys_like.append(recorded_key)
        try:
            self._commit()  # the intent is durable before anything leaves this process
        except BaseException:
            # Nothing was sent: forget the intent, so a retry is not blocked by an effect that never was.
            self._forget_intent(recorded_key, previous, position, content)
            raise
        self._emitted[-1].append(recorded_key)
        _boundaries.reached("between-intent-and-send", recorded_key)
        try:
            reference = send(key)
        except Exception as exc:
            failed = isinstance(exc, (EffectFailedError, *failed_types))
            status: Any = "failed" if failed else "unknown"
            error = self._redactor.redact_text(values.error_text(exc))
            self._settle(recorded_key, status, error=error, by="send")
            raise
        try:
            reference = self._redactor.redact(values.json_value(reference, "the reference send returned"))
        except InvalidArtifactError as exc:
            # The provider acted, but what it returned cannot be recorded: the outcome stays visibly
            # unknown (a reconciler decides it), never confirmed with a reference that is not the real one.
            self._settle(recorded_key, "unknown", error=f"send returned a reference that cannot be stored: {exc}", by="send")
            raise
        self._settle(recorded_key, "confirmed", reference=reference, by="send")
        counters["effect " + kind] += 1
        _boundaries.reached("after-confirm", recorded_key)
        return reference

    def spend(self, **amounts: float) -> dict[str, int | float]:
        """Add to the budget spent, per unit (``spend(tokens=1200, usd=0.03)``); saved with every commit."""
        checked: dict[str, int | float] = {}
        for unit, amount in amounts.items():
            checked[self._name(unit, "a budget unit")] = _amount(amount, f"spend({unit}=...)")
        for unit, amount in checked.items():
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

    def _name(self, value: Any, what: str) -> str:
        """A name as it is recorded (and so as positions are built): checked, then redacted. A name
        that redaction changed carries a keyed digest of itself, so two names that differ only in a
        secret stay two names (two steps, two effect kinds, two budget units)."""
        raw = values.name(value, what)
        recorded = self._redactor.redact_text(raw)
        return recorded if recorded == raw else f"{recorded}~{self.run.store.cipher.name_digest(raw)}"

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

    def _latest_at(self, position: str, caller_key: str | None) -> EffectRecord | None:
        """The effect that decides what an emit at ``position`` does. The position first: one in doubt
        there, else one that happened there. Then the caller's key, when it names an effect elsewhere
        (the same key used at another position is the same effect). Else the newest at the position."""
        here = [self._effects[key] for key in self._keys_at.get(position, ())]
        # A position holds at most one effect in doubt and, apart from rolled-back ones, at most one that
        # happened (an emit settles the first before it tries again, and stops at the second); the
        # rest did not happen. So what decides is found by status, whatever order keys were issued in.
        for wanted in (UNSETTLED, {"confirmed"}):
            deciding = [effect for effect in here if effect.status in wanted]
            if deciding:
                return deciding[-1]
        if caller_key is not None and caller_key in self._effects:
            return self._effects[caller_key]
        return here[-1] if here else None

    def _settle_in_session(self, effect: EffectRecord) -> EffectRecord:
        """Decide an effect whose outcome is unknown before anything more is sent at its position."""
        try:
            decide = self._reconcile[effect.kind]  # not .get(): a defaultdict answers only through []
        except KeyError:
            raise UnknownOutcomeError(
                f"the outcome of {_describe(effect)} is unknown, so nothing more is sent at that position. Give "
                f"resume(reconcile={{{effect.kind!r}: fn}}) to decide it (fn(effect) returns the provider's reference if it "
                "happened, None if not), or settle it with `s3ckpt resolve RUN KEY --sent REF | --not-sent`.",
                effects=[effect],
            ) from None
        return _reconcile_one(self, effect, decide)

    def _not_sent_at(self, position: str, content: tuple[Any, str], caller_key: str | None) -> EffectRecord | None:
        """An effect with this content, kind and scope that was not sent (positions may have moved since
        it was tried): it goes out again under its own key, so the provider never sees it under two."""
        if caller_key is not None and caller_key in self._effects:
            candidates = [caller_key]
        else:
            candidates = self._keys_like.get(_content_slot(position, content), [])
        for key in candidates:
            effect = self._effects[key]
            if effect.status == "not_sent" and (effect.target, effect.payload_hash) == content:
                return effect
        return None

    def _refused_at(self, position: str, content: tuple[Any, str]) -> EffectRecord | None:
        """An effect with this content that did not happen at ``position``."""
        for key in self._keys_at.get(position, ()):
            effect = self._effects[key]
            if effect.status in ("failed", "not_sent") and (effect.target, effect.payload_hash) == content:
                return effect
        return None

    def _forget_intent(self, key: str, previous: EffectRecord | None, position: str, content: tuple[Any, str]) -> None:
        if previous is not None:
            self._effects[key] = previous
            if previous.position != position:
                self._keys_at[position].remove(key)
                self._keys_at.setdefault(previous.position, []).append(key)
            return
        self._effects.pop(key, None)
        for index in (self._keys_at.get(position, []), self._keys_like.get(_content_slot(position, content), [])):
            if key in index:
                index.remove(key)

    def _record_attempt(self, key: str, attempt: int, outcome: Any, reason: str, emitted: list[str]) -> None:
        self._attempts.append(
            AttemptRecord(
                step=key,
                attempt=attempt,
                outcome=outcome,
                reason=self._redactor.redact_text(reason),
                at=_now(),
                effects=tuple(emitted),
            )
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
        try:
            state = json.dumps(self.state, sort_keys=True, default=repr)
        except Exception:  # noqa: BLE001 - whatever the caller's objects raise (a repr that fails, a huge int)
            # Never equal to what was committed: the commit runs, and says what is wrong with the state.
            state = f"<state that is not JSON: {uuid.uuid4().hex}>"
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


def _fingerprint(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """What a step was called with, when that is JSON (None when it is not: the call is then taken for
    a retry of the last one, which never sends an effect twice)."""
    try:
        value = values.json_value([list(args), kwargs], "a step's arguments")
    except InvalidArtifactError:
        return None
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _content_slot(position: str, content: tuple[Any, str]) -> str:
    """The scope and kind of a position (``<scope><kind>#<n>`` without ``#<n>``), with the content."""
    target, digest = content
    return position.rsplit("#", 1)[0] + "\0" + json.dumps(target, sort_keys=True) + "\0" + digest


def _escape(name: str) -> str:
    """A name as part of a position: ``#`` and ``%`` escaped, so ``#<n>/`` only ever separates scopes
    (a top-level step named ``a#0/b`` is not the step ``b`` inside ``a#0``)."""
    return name.replace("%", "%25").replace("#", "%23")


def _exception_types(failed_on: Any, kind: str) -> tuple[type[BaseException], ...]:
    types = failed_on if isinstance(failed_on, tuple) else (failed_on,)
    if not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise InvalidArgumentError(f"effect {kind!r}: failed_on must be an exception type or a tuple of them")
    return types


def _reconcile_one(session: Session, effect: EffectRecord, decide: Reconciler) -> EffectRecord:
    reference = decide(effect)
    if reference is None:
        session._settle(effect.idempotency_key, "not_sent", by="reconcile")
    else:
        reference = session._redactor.redact(values.json_value(reference, "the reconciled reference"))
        session._settle(effect.idempotency_key, "confirmed", reference=reference, by="reconcile")
    return session._effects[effect.idempotency_key]


def _encode_result(result: Any, name: str) -> tuple[Any, Any]:
    if isinstance(result, Ref):
        return "ref", result.model_dump(mode="json")
    if isinstance(result, pydantic.BaseModel):
        return "model", values.json_value(result, f"the result of step {name!r}")
    if isinstance(result, bytes | bytearray | memoryview):
        raise InvalidArtifactError(
            f"the result of step {name!r} is bytes; return a pydantic model, or a s3ckpt.Ref to content stored elsewhere"
        )
    return "json", values.json_value(result, f"the result of step {name!r}")


def _decode_result(step: StepRecord, fn: Callable[..., Any]) -> Any:
    if step.result_type == "ref":
        return Ref.model_validate(step.result)
    if step.result_type == "model":
        model = _return_model(fn)
        if model is not None:
            try:
                return model.model_validate(step.result)
            except pydantic.ValidationError as exc:
                raise IncompatibleSchemaError(
                    f"step {step.key}'s recorded result no longer fits {model.__name__} "
                    f"({exc.error_count()} error(s), first: {exc.errors()[0]['msg']}): the model changed since it ran. "
                    "Resume with on_version_change='invalidate' to run the steps again, register a migration, or "
                    "keep the model compatible (new fields with defaults).",
                    found=step.key,
                    supported=model.__name__,
                ) from None
    return step.result


def _return_model(fn: Callable[..., Any]) -> type[pydantic.BaseModel] | None:
    """The pydantic model ``fn`` is annotated to return, to give a replayed result its type back."""
    try:
        hint = typing.get_type_hints(fn).get("return")
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the JSON value
        return None
    return hint if isinstance(hint, type) and issubclass(hint, pydantic.BaseModel) else None


def _check_arguments(
    on_version_change: Any, reconcile: Any, budget: Any
) -> tuple[Mapping[str, Reconciler] | None, dict[str, float]]:
    if on_version_change not in POLICIES:
        raise InvalidArgumentError(f"on_version_change must be one of {', '.join(POLICIES)}, not {describe(on_version_change)}")
    if reconcile is not None and not isinstance(reconcile, Mapping):
        raise InvalidArgumentError("reconcile must be a mapping {kind: fn(effect) -> reference or None}")
    for kind, fn in (reconcile or {}).items():
        if not callable(fn):
            raise InvalidArgumentError(f"reconcile[{describe(kind)}] must be a function fn(effect) -> reference or None")
    limits: dict[str, float] = {}
    if budget is not None and not isinstance(budget, Mapping):
        raise InvalidArgumentError("budget must be a mapping {unit: limit}, e.g. {'usd': 5}")
    for unit, limit in (budget or {}).items():
        amount = _amount(limit, f"budget[{describe(unit)}]")
        if amount < 0:
            raise InvalidArgumentError(f"budget[{describe(unit)}] must be >= 0, not {amount}")
        limits[values.name(unit, "a budget unit")] = amount
    return reconcile, limits


def _amount(value: Any, what: str) -> int | float:
    """A budget amount: a finite int or float that JSON (and every reader) carries."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{what} takes a number, not {describe(value)}")
    try:
        finite = math.isfinite(float(value))
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise InvalidArgumentError(f"{what} takes a finite number no larger than a float, not {describe(value)}")
    return int(value) if isinstance(value, int) else float(value)


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
    """Check the arguments and the run's latest checkpoint against the resuming code, and only then
    claim the run; then settle the effects whose outcome is unknown."""
    reconcile, limits = _check_arguments(on_version_change, reconcile, budget)
    workflow = values.name(workflow, "workflow")
    workflow_version = values.version(workflow_version, "workflow_version")
    recorded_provenance = run._provenance(workflow, workflow_version, values.json_object(provenance, "provenance"))
    # Compared as recorded: a secret in the provenance is recorded redacted, and is no change.
    compared = {k: v for k, v in recorded_provenance.items() if k not in ("workflow", "workflow_version")}
    plan: dict[str, Any] = {}

    def check(parent: Checkpoint | None) -> None:
        """Runs on the checkpoint the claim will follow, before the claim is written."""
        checkpoint, reset_steps = parent, False
        if parent is not None:
            # Read (and so validate) the ledger now: damage, and effects in doubt that nobody here can
            # decide, are refused before the claim fences a worker that may be inside their send.
            _refuse_undecidable(run.run_id, parent.ledger, reconcile)
            recorded_workflow = parent.provenance.get("workflow")
            if recorded_workflow is not None and recorded_workflow != workflow:
                raise IncompatibleSchemaError(
                    f"run {run.run_id!r} belongs to workflow {recorded_workflow!r}, not {workflow!r}; resume it with its "
                    "own workflow, or start a new run id. Nothing was written.",
                    found=recorded_workflow,
                    supported=workflow,
                )
            change = compare(parent.provenance, workflow_version=workflow_version, provenance=compared)
            if change.any:
                log.info("run %r resumes under a change (%s): %s", run.run_id, on_version_change, change.describe())
            if on_version_change == "invalidate" and change.any:
                reset_steps = True  # completed steps run again; effects and spending stay recorded
            else:
                checkpoint = resolve(
                    parent,
                    run.store.migrations,
                    workflow_version=workflow_version,
                    provenance=compared,
                    on_version_change=on_version_change,
                )
        plan["checkpoint"], plan["reset_steps"] = checkpoint, reset_steps

    writer = run._claim(recorded_provenance, check=check)
    session = Session(
        run, writer, plan["checkpoint"], reset_steps=plan["reset_steps"], budget=limits, reconcile=reconcile
    )
    _reconcile_at_resume(session)
    return session


def _has_reconciler(reconcile: Mapping[str, Reconciler] | None, kind: str) -> bool:
    try:
        (reconcile if reconcile is not None else {})[kind]  # not .get(): a defaultdict answers only through []
    except KeyError:
        return False
    return True


def _unknown_outcome(run_id: str, left: list[EffectRecord]) -> UnknownOutcomeError:
    kinds = sorted({e.kind for e in left})
    return UnknownOutcomeError(
        f"run {run_id!r} has {len(left)} effect(s) whose outcome is unknown, and nothing was sent:\n  "
        + "\n  ".join(_describe(e) for e in left)
        + f"\nResume with reconcile={{{', '.join(repr(k) + ': fn' for k in kinds)}}} (fn(effect) returns the provider's "
        "reference if it happened, None if not), or settle each with `s3ckpt resolve RUN KEY --sent REF | --not-sent`.",
        effects=left,
    )


def _refuse_undecidable(run_id: str, ledger: Ledger, reconcile: Mapping[str, Reconciler] | None) -> None:
    left = [e for e in ledger.effects.values() if e.status in UNSETTLED and not _has_reconciler(reconcile, e.kind)]
    if left:
        raise _unknown_outcome(run_id, left)


def _reconcile_at_resume(session: Session) -> None:
    """Ask the reconcilers about every effect with an intent and no outcome; raise for the rest."""
    for effect in [e for e in session.effects if e.status in UNSETTLED]:
        if _has_reconciler(session._reconcile, effect.kind):
            _reconcile_one(session, effect, session._reconcile[effect.kind])
    left = [e for e in session.effects if e.status in UNSETTLED]
    if left:
        raise _unknown_outcome(session.run_id, left)
