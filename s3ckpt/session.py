"""Sessions: a harness's run as steps and effects, resumable anywhere without repeating either.

``store.resume(run_id, ...)`` (s3ckpt/resume.py) checks the run's latest checkpoint against the
resuming code before it writes anything, claims the run, and returns a Session. Inside it:

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
provider refused the previous one (``failed``) or it was rolled back (s3ckpt/effects.py). See
docs/sessions.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import typing
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pydantic

from . import _boundaries, values
from .effects import UNSETTLED, EffectBook, content_of, derive_idempotency_key, describe, escape, payload_hash
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
)
from .records import AttemptRecord, EffectRecord, Ledger, StepRecord
from .ref import Ref

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .log import Run
    from .redaction import Redactor
    from .store import Store
    from .writer import Writer

log = logging.getLogger("s3ckpt")

__all__ = ["Reconciler", "Session", "derive_idempotency_key", "payload_hash"]

#: ``reconcile[kind](effect)``: the provider's reference if the effect happened, None if it did not.
Reconciler = Callable[[EffectRecord], Any]


def _now() -> datetime:
    return datetime.now(UTC)


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
        self._book = EffectBook(ledger.effects)
        self._spent: dict[str, int | float] = dict(ledger.budget)
        self._generation = ledger.generation
        self._limits = {self._name(unit, "a budget unit"): limit for unit, limit in (budget or {}).items()}
        self._reconcile: Mapping[str, Reconciler] = reconcile if reconcile is not None else {}
        #: scope -> how many steps completed and effects confirmed there, per name (this attempt)
        self._counters: dict[str, Counter[str]] = {"": Counter()}
        #: scope -> step name -> what its last failed call there was called with (this attempt)
        self._failed_calls: dict[str, dict[str, _Call]] = {"": {}}
        #: scope -> keys of the effects whose emit call raised there (this attempt)
        self._ended: dict[str, set[str]] = {"": set()}
        #: scope -> keys of the effects that emit calls there returned (this attempt): each one call's
        self._used: dict[str, set[str]] = {"": set()}
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
        return list(self._book.effects.values())

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
        key = f"{scope}{escape(name)}#{counters['step ' + name]}"
        recorded = self._steps.get(key)
        if recorded is not None:
            counters["step " + name] += 1
            # What it caused belongs to the step around it too (a rollback of those effects drops both).
            self._emitted[-1].extend(recorded.effects)
            return _decode_result(recorded, fn)
        call = _Call.of(fn, args, kwargs)
        failed = self._failed_calls[scope].get(name)
        if failed is not None and failed.digest != call.digest:
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
        self._ended[key + "/"] = set()
        self._used[key + "/"] = set()
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
            self._attempt_failed(scope, name, key, fn, args, kwargs)
            if not isinstance(exc, ConflictError) and self._stopped is None:
                try:
                    self._record_attempt(key, attempt, "error", values.error_text(exc), emitted)
                except S3ckptError as recording:  # the step's own error is the one to raise
                    log.warning("could not record the failed attempt of step %r: %s", key, recording)
            raise
        except BaseException:
            self._leave_scope()
            self._attempt_failed(scope, name, key, fn, args, kwargs)
            raise
        emitted = self._leave_scope()
        if not accepted:
            self._attempt_failed(scope, name, key, fn, args, kwargs)
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

        # The caller's own key names one effect wherever it sits: in doubt, it is settled first; if it
        # happened, this is that effect (or, with other content, a misuse of the key).
        known = self._book.effects.get(caller_key) if caller_key is not None else None
        if known is not None and known.status in UNSETTLED:
            known = self._settle_in_session(known)
        if known is not None and known.status == "confirmed":
            if (known.kind, content_of(known)) != (kind, content):
                self._stopped = EffectMismatchError(
                    f"idempotency key {known.idempotency_key} was used for {describe(known)}, which happened, and is now "
                    f"emitted with other content ({digest}): a key names one effect. The session stopped; nothing was "
                    "sent. Give the new effect its own key."
                )
                raise self._stopped
            return self._returned(scope, kind, known)
        position = f"{scope}{escape(kind)}#{counters['effect ' + kind]}"
        latest = self._book.deciding(position, caller_key)
        while latest is not None and (
            (latest.status == "confirmed" and latest.idempotency_key in self._used[scope])
            or (
                latest.status in (*UNSETTLED, "confirmed")
                and latest.idempotency_key in self._ended[scope]
                and latest.target != target_value
            )
        ):
            # Taken: an earlier call of this attempt returned its effect (found by content, below), or
            # an earlier call here raised (its effect in doubt, or known since to have happened) and
            # this one goes to another target: another effect (the next recipient of a loop).
            counters["effect " + kind] += 1
            position = f"{scope}{escape(kind)}#{counters['effect ' + kind]}"
            latest = self._book.deciding(position, caller_key)
        if latest is None or latest.status not in (*UNSETTLED, "confirmed"):
            # Nothing here happened, but this very effect may have, at another position of the scope (a
            # replay where an earlier call took another path, a retry after calls to other targets).
            # It is never sent again under a new key: it is returned, or settled first.
            latest = self._book.unreturned(scope, kind, content, self._used[scope]) or latest
        if latest is not None and latest.status in UNSETTLED:
            latest = self._settle_in_session(latest)
        if latest is not None and latest.status == "confirmed":
            if content_of(latest) == content:
                return self._returned(scope, kind, latest)
            refused = self._book.refused(position, content)
            if refused is not None:
                # A replay: this effect was refused here (or not sent), then another one took the position.
                raise EffectFailedError(
                    f"{describe(refused)} did not happen ({refused.error or 'not sent'}), and a later effect took its "
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
            raise EffectMismatchError(f"{describe(latest)} was rolled back; emit it again under a new idempotency_key")
        self._check_budget(f"effect {kind!r}")

        not_sent = self._book.not_sent(position, content, caller_key)
        if not_sent is not None:
            # Not sent (a reconciler or an operator said so): the same request again, under its own key.
            key = raw_key if raw_key is not None and caller_key == not_sent.idempotency_key else not_sent.idempotency_key
        elif raw_key is not None:
            key = raw_key
        else:
            key = self._book.new_key(self.run.store.config.store_id, self.run_id, position, kind)
        recorded_key = key if raw_key is None or key != raw_key else caller_key
        assert recorded_key is not None
        _boundaries.reached("before-intent", recorded_key)
        before = self._book.effects.get(recorded_key)
        intent = EffectRecord(
            idempotency_key=recorded_key,
            kind=kind,
            target=target_value,
            payload_hash=digest,
            payload=stored_payload,
            position=position,
            status="pending",
            intent_at=_now(),
            sends=(before.sends if before is not None else 0) + 1,
        )
        previous = self._book.put(intent)
        try:
            self._commit()  # the intent is durable before anything leaves this process
        except BaseException:
            # Nothing was sent: forget the intent, so a retry is not blocked by an effect that never was.
            self._book.restore(intent, previous)
            raise
        self._emitted[-1].append(recorded_key)
        _boundaries.reached("between-intent-and-send", recorded_key)
        try:
            reference = send(key)
        except Exception as exc:
            failed = isinstance(exc, (EffectFailedError, *failed_types))
            status: Any = "failed" if failed else "unknown"
            error = self._redactor.redact_text(values.error_text(exc))
            self._ended[scope].add(recorded_key)
            self._settle(recorded_key, status, error=error, by="send")
            raise
        try:
            reference = self._redactor.redact(values.json_value(reference, "the reference send returned"))
        except InvalidArtifactError as exc:
            # The provider acted, but what it returned cannot be recorded: the outcome stays visibly
            # unknown (a reconciler decides it), never confirmed with a reference that is not the real one.
            self._ended[scope].add(recorded_key)
            self._settle(recorded_key, "unknown", error=f"send returned a reference that cannot be stored: {exc}", by="send")
            raise
        confirmed = self._settle(recorded_key, "confirmed", reference=reference, by="send")
        self._returned(scope, kind, confirmed)
        _boundaries.reached("after-confirm", recorded_key)
        return reference

    def spend(self, **amounts: float) -> dict[str, int | float]:
        """Add to the budget spent, per unit (``spend(tokens=1200, usd=0.03)``); saved with every commit."""
        checked: dict[str, int | float] = {}
        for unit, amount in amounts.items():
            checked[self._name(unit, "a budget unit")] = values.amount(amount, f"spend({unit}=...)")
        for unit, amount in checked.items():
            self._spent[unit] = self._spent.get(unit, 0) + amount
        return self.budget

    def checkpoint(
        self,
        *,
        artifacts: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        progress: Callable[[int, int | None], None] | None = None,
    ) -> Checkpoint:
        """Commit now: the state, the ledger, and any artifacts (``progress(done, total)`` as their
        bytes are stored)."""
        self._check_running()
        checkpoint = self._commit(artifacts=artifacts, meta=meta, force=True, progress=progress)
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
        return recorded_name(self.run.store, values.name(value, what))

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

    def _returned(self, scope: str, kind: str, effect: EffectRecord) -> Any:
        """An emit call of ``kind`` in ``scope`` ends with ``effect``, which happened: the next call
        takes the next position, and no other call of this attempt is given the same effect."""
        self._counters[scope]["effect " + kind] += 1
        self._used[scope].add(effect.idempotency_key)
        if effect.idempotency_key not in self._emitted[-1]:
            self._emitted[-1].append(effect.idempotency_key)
        return effect.reference

    def _attempt_failed(
        self, scope: str, name: str, key: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """An attempt at step ``key`` ended without completing. The call is remembered as its arguments
        are now (a body may have changed them, and a retry passes them so), and the steps the attempt
        completed inside are dropped: a retry runs them again, as it runs the body again (what they
        caused stays recorded, and is returned to them, not caused again). An attempt a crash cut short
        keeps them: that is a resume, not a retry."""
        self._failed_calls[scope][name] = _Call.of(fn, args, kwargs)
        for inner in [k for k in self._steps if k.startswith(key + "/")]:
            del self._steps[inner]

    def _leave_scope(self) -> list[str]:
        self._scopes.pop()
        emitted = self._emitted.pop()
        self._emitted[-1].extend(emitted)
        return emitted

    def _reconciler(self, kind: str) -> Reconciler | None:
        return find_reconciler(self.run.store, self._reconcile, kind)

    def _settle_in_session(self, effect: EffectRecord) -> EffectRecord:
        """Decide an effect whose outcome is unknown before anything more is sent at its position."""
        decide = self._reconciler(effect.kind)
        if decide is None:
            raise UnknownOutcomeError(
                f"the outcome of {describe(effect)} is unknown, so nothing more is sent at that position. Give "
                f"resume(reconcile={{{effect.kind!r}: fn}}) to decide it (fn(effect) returns the provider's reference if it "
                "happened, None if not), or settle it with `s3ckpt resolve RUN KEY --sent REF | --not-sent`.",
                effects=[effect],
            )
        return _reconcile_one(self, effect, decide)

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

    def _settle(self, key: str, status: Any, *, reference: Any = None, error: str | None = None, by: str) -> EffectRecord:
        settled = self._book.settle(key, status, by=by, reference=reference, error=error)
        self._commit()
        return settled

    def _ledger(self) -> Ledger:
        return Ledger(
            steps=self._steps,
            attempts=tuple(self._attempts),
            effects=self._book.effects,
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
        self,
        *,
        artifacts: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        force: bool = False,
        progress: Callable[[int, int | None], None] | None = None,
    ) -> Checkpoint | None:
        snapshot = self._snapshot()
        if not force and snapshot == self._committed:
            return None
        try:
            checkpoint = self._writer.commit(
                self.state, artifacts=artifacts, meta=meta, ledger=self._ledger(), progress=progress
            )
        except ConflictError as exc:
            self._stopped = exc  # fenced or deleted: this session must not write again
            raise
        self._committed = snapshot
        return checkpoint


def recorded_name(store: Store, raw: str) -> str:
    """A name as it is recorded (and so as positions are built): redacted. A name that redaction
    changed carries a keyed digest of itself, so two names that differ only in a secret stay two
    names (two steps, two effect kinds, two budget units)."""
    recorded = store.options.redactor.redact_text(raw)
    return recorded if recorded == raw else f"{recorded}~{store.cipher.name_digest(raw)}"


def find_reconciler(store: Store, reconcile: Mapping[str, Reconciler], kind: str) -> Reconciler | None:
    """``reconcile[kind]`` for a recorded kind: the mapping is keyed by kinds as the code names them,
    and a kind that redaction changed is recorded in another form."""
    try:
        return reconcile[kind]  # not .get(): a defaultdict answers only through []
    except KeyError:
        pass
    for raw in list(reconcile):
        if isinstance(raw, str) and raw and recorded_name(store, raw) == kind:
            return reconcile[raw]
    return None


class _Call(typing.NamedTuple):
    """What a step was called with: the function's code, the values its closure and its defaults
    hold, and the arguments, each as its JSON when it has one, else as its repr when that shows its
    value, else as the object itself (its identity: a retry passes the same object). Cheap, and
    never raises whatever the values do. ``alive`` holds the objects, so that no identity compared
    with a later call can be reused by another object meanwhile."""

    digest: str
    alive: tuple[Any, ...]

    @classmethod
    def of(cls, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
        code = getattr(fn, "__code__", None)
        cells = getattr(fn, "__closure__", None) or ()
        defaults = (*(getattr(fn, "__defaults__", None) or ()), *sorted((getattr(fn, "__kwdefaults__", None) or {}).items()))
        parts: list[Any] = [getattr(code, "co_qualname", None) or getattr(fn, "__qualname__", type(fn).__qualname__)]
        parts += [_part(value) for value in (*(_cell(cell) for cell in cells), *defaults, *args, *sorted(kwargs.items()))]
        digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
        return cls(digest, (fn, args, kwargs))


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _part(value: Any) -> Any:
    if type(value) is str and len(value) > 4096:  # a long text argument: its digest is enough
        return "sha256:" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    try:
        return values.json_value(value, "an argument")
    except Exception:  # noqa: BLE001 - not JSON (or a container that raises): its repr, below
        text = " at 0x"
    with contextlib.suppress(Exception):  # a repr that raises: its identity
        text = repr(value)
    if " at 0x" in text:  # the default repr: an identity, no value
        return f"<{type(value).__name__} at {id(value):#x}>"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"<{type(value).__qualname__} {digest}>"


def _exception_types(failed_on: Any, kind: str) -> tuple[type[BaseException], ...]:
    types = failed_on if isinstance(failed_on, tuple) else (failed_on,)
    if not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise InvalidArgumentError(f"effect {kind!r}: failed_on must be an exception type or a tuple of them")
    return types


def _reconcile_one(session: Session, effect: EffectRecord, decide: Reconciler) -> EffectRecord:
    """Ask ``decide`` whether ``effect`` happened, and record the answer."""
    reference = decide(effect)
    if reference is None:
        return session._settle(effect.idempotency_key, "not_sent", by="reconcile")
    reference = session._redactor.redact(values.json_value(reference, "the reconciled reference"))
    return session._settle(effect.idempotency_key, "confirmed", reference=reference, by="reconcile")


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
