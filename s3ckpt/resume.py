"""Resuming a run as a Session: everything is checked before anything is written.

``store.resume(run_id, ...)`` checks its arguments, then the run's latest checkpoint against the
resuming code (workflow, version policy, effects in doubt that no reconciler here can decide, damage)
on the exact checkpoint the claim will follow, and only then claims the run, fencing older writers.
A typo by an operator, or a resume while a worker is inside a ``send``, writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import values
from .effects import UNSETTLED, describe
from .errors import IncompatibleSchemaError, InvalidArgumentError, UnknownOutcomeError
from .errors import describe as describe_value
from .records import EffectRecord, Ledger
from .session import Reconciler, Session, _reconcile_one, find_reconciler
from .workflows import POLICIES, OnVersionChange, compare, resolve

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .log import Run

log = logging.getLogger("s3ckpt")


def _check_arguments(
    on_version_change: Any, reconcile: Any, budget: Any
) -> tuple[Mapping[str, Reconciler] | None, dict[str, float]]:
    if on_version_change not in POLICIES:
        raise InvalidArgumentError(
            f"on_version_change must be one of {', '.join(POLICIES)}, not {describe_value(on_version_change)}"
        )
    if reconcile is not None and not isinstance(reconcile, Mapping):
        raise InvalidArgumentError("reconcile must be a mapping {kind: fn(effect) -> reference or None}")
    for kind, fn in (reconcile or {}).items():
        if not callable(fn):
            raise InvalidArgumentError(f"reconcile[{describe_value(kind)}] must be a function fn(effect) -> reference or None")
    limits: dict[str, float] = {}
    if budget is not None and not isinstance(budget, Mapping):
        raise InvalidArgumentError("budget must be a mapping {unit: limit}, e.g. {'usd': 5}")
    for unit, limit in (budget or {}).items():
        amount = values.amount(limit, f"budget[{describe_value(unit)}]")
        if amount < 0:
            raise InvalidArgumentError(f"budget[{describe_value(unit)}] must be >= 0, not {amount}")
        limits[values.name(unit, "a budget unit")] = amount
    return reconcile, limits


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
    # Compared as recorded: a secret in the provenance (or in a workflow name) is recorded redacted,
    # and is no change.
    ours = {k: recorded_provenance[k] for k in ("workflow", "workflow_version")}
    compared = {k: v for k, v in recorded_provenance.items() if k not in ours}
    plan: dict[str, Any] = {}

    def check(parent: Checkpoint | None) -> None:
        """Runs on the checkpoint the claim will follow, before the claim is written."""
        checkpoint, reset_steps = parent, False
        if parent is not None:
            recorded_workflow = parent.provenance.get("workflow")
            if recorded_workflow is not None and recorded_workflow != ours["workflow"]:
                raise IncompatibleSchemaError(
                    f"run {run.run_id!r} belongs to workflow {recorded_workflow!r}, not {workflow!r}; resume it with its "
                    "own workflow, or start a new run id. Nothing was written.",
                    found=recorded_workflow,
                    supported=workflow,
                )
            change = compare(parent.provenance, workflow_version=ours["workflow_version"], provenance=compared)
            if change.any:
                log.info("run %r resumes under a change (%s): %s", run.run_id, on_version_change, change.describe())
            if on_version_change == "invalidate" and change.any:
                reset_steps = True  # completed steps run again; effects and spending stay recorded
            else:
                checkpoint = resolve(
                    parent,
                    run.store.migrations,
                    workflow_version=ours["workflow_version"],
                    provenance=compared,
                    on_version_change=on_version_change,
                )
            # Read (and so validate) the ledger now: damage, and effects in doubt that nobody here can
            # decide, are refused before the claim fences a worker that may be inside their send.
            _refuse_undecidable(run, parent.ledger, reconcile)
        plan["checkpoint"], plan["reset_steps"] = checkpoint, reset_steps

    writer = run._claim(recorded_provenance, check=check)
    session = Session(
        run, writer, plan["checkpoint"], reset_steps=plan["reset_steps"], budget=limits, reconcile=reconcile
    )
    _reconcile_at_resume(session)
    return session


def _unknown_outcome(run_id: str, left: list[EffectRecord]) -> UnknownOutcomeError:
    kinds = sorted({e.kind for e in left})
    return UnknownOutcomeError(
        f"run {run_id!r} has {len(left)} effect(s) whose outcome is unknown, and nothing was sent:\n  "
        + "\n  ".join(describe(e) for e in left)
        + f"\nResume with reconcile={{{', '.join(repr(k) + ': fn' for k in kinds)}}} (fn(effect) returns the provider's "
        "reference if it happened, None if not), or settle each with `s3ckpt resolve RUN KEY --sent REF | --not-sent`.",
        effects=left,
    )


def _refuse_undecidable(run: Run, ledger: Ledger, reconcile: Mapping[str, Reconciler] | None) -> None:
    answers = reconcile if reconcile is not None else {}
    left = [e for e in ledger.effects.values() if e.status in UNSETTLED and find_reconciler(run.store, answers, e.kind) is None]
    if left:
        raise _unknown_outcome(run.run_id, left)


def _reconcile_at_resume(session: Session) -> None:
    """Ask the reconcilers about every effect with an intent and no outcome; raise for the rest."""
    for effect in [e for e in session.effects if e.status in UNSETTLED]:
        decide = session._reconciler(effect.kind)
        if decide is not None:
            _reconcile_one(session, effect, decide)
    left = [e for e in session.effects if e.status in UNSETTLED]
    if left:
        raise _unknown_outcome(session.run_id, left)
