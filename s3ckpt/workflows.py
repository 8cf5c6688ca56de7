"""Workflow versions: migrations of a run's state between versions of the code that wrote it.

A checkpoint records the workflow and workflow version it was written under (``claim(workflow=...,
workflow_version=...)``). When a run resumes under another version, the state is brought forward
through registered migrations, one edge at a time (1 -> 2 -> 3). A missing edge is an
IncompatibleSchemaError that names it, never a silent pass-through.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from . import values
from .errors import ConfigurationError, IncompatibleSchemaError, InvalidArgumentError, describe

if TYPE_CHECKING:
    from .checkpoint import Checkpoint

OnVersionChange = Literal["migrate", "invalidate", "accept"]
POLICIES: tuple[OnVersionChange, ...] = ("migrate", "invalidate", "accept")
StateMigration = Callable[[Any], Any]

#: Provenance keys that name the workflow; every other provenance key (model, prompt hash,
#: tool-contract versions, ...) is compared as provenance.
WORKFLOW_KEYS = ("workflow", "workflow_version")


@dataclass(frozen=True)
class VersionChange:
    """How the code resuming a run differs from the code that wrote its checkpoint."""

    workflow: str | None
    from_version: str | None
    to_version: str | None
    provenance: dict[str, tuple[Any, Any]]  # key -> (recorded, now)

    @property
    def version_changed(self) -> bool:
        return self.to_version is not None and self.from_version != self.to_version

    @property
    def any(self) -> bool:
        return self.version_changed or bool(self.provenance)

    def describe(self) -> str:
        parts = []
        if self.version_changed:
            parts.append(f"workflow {self.workflow!r} version {self.from_version!r} -> {self.to_version!r}")
        parts += [f"{k}: {describe(old)} -> {describe(new)}" for k, (old, new) in sorted(self.provenance.items())]
        return "; ".join(parts) or "no change"


def compare(recorded: Mapping[str, Any], *, workflow_version: str | None, provenance: Mapping[str, Any]) -> VersionChange:
    """The difference between a checkpoint's recorded provenance and the resuming code's."""
    changed = {
        key: (recorded.get(key), value)
        for key, value in provenance.items()
        if key not in WORKFLOW_KEYS and recorded.get(key) != value
    }
    workflow = recorded.get("workflow")
    return VersionChange(
        workflow=None if workflow is None else str(workflow),
        from_version=None if recorded.get("workflow_version") is None else str(recorded["workflow_version"]),
        to_version=workflow_version,
        provenance=changed,
    )


class WorkflowMigrations:
    """``register(workflow, from_version, to_version, fn)``; ``apply`` follows the chain."""

    def __init__(self) -> None:
        self._edges: dict[tuple[str, str], tuple[str, StateMigration]] = {}
        self._lock = threading.Lock()

    def register(self, workflow: str, from_version: str, to_version: str, fn: StateMigration) -> None:
        workflow = values.name(workflow, "workflow")
        from_version, to_version = (values.version(v, "a workflow version") for v in (from_version, to_version))
        if from_version == to_version:
            raise ConfigurationError(f"a migration must change the version, not {from_version!r} -> {to_version!r}")
        if not callable(fn):
            raise ConfigurationError("a migration is a function fn(state) -> state")
        with self._lock:
            existing = self._edges.get((workflow, from_version))
            if existing is not None and existing[0] != to_version:
                raise ConfigurationError(
                    f"workflow {workflow!r} already migrates {from_version!r} -> {existing[0]!r}; "
                    "a version has exactly one next version"
                )
            self._edges[(workflow, from_version)] = (to_version, fn)

    def path(self, workflow: str, from_version: str, to_version: str) -> list[tuple[str, str, StateMigration]]:
        steps: list[tuple[str, str, StateMigration]] = []
        seen = {from_version}
        current = from_version
        with self._lock:
            edges = dict(self._edges)
        while current != to_version:
            edge = edges.get((workflow, current))
            if edge is None:
                known = sorted(f"{f}->{t}" for (w, f), (t, _) in edges.items() if w == workflow)
                raise IncompatibleSchemaError(
                    f"run was written by workflow {workflow!r} version {from_version!r}, resuming as version "
                    f"{to_version!r}, and there is no migration from version {current!r} "
                    f"(registered: {', '.join(known) or 'none'}). Register one with "
                    f"store.register_migration({workflow!r}, {current!r}, <next version>, fn), or resume with "
                    "on_version_change='invalidate' or 'accept'.",
                    found=from_version,
                    supported=to_version,
                )
            nxt, fn = edge
            if nxt in seen:
                raise ConfigurationError(f"migrations of workflow {workflow!r} loop back to version {nxt!r}")
            steps.append((current, nxt, fn))
            seen.add(nxt)
            current = nxt
        return steps

    def apply(self, workflow: str, from_version: str, to_version: str, state: Any) -> Any:
        for from_v, to_v, fn in self.path(workflow, from_version, to_version):
            try:
                state = fn(state)
            except Exception as exc:
                raise IncompatibleSchemaError(
                    f"migration of workflow {workflow!r} from {from_v!r} to {to_v!r} failed: {describe(exc)}",
                    found=from_v,
                    supported=to_v,
                ) from exc
        return state


def resolve(
    checkpoint: Checkpoint,
    migrations: WorkflowMigrations,
    *,
    workflow_version: str | None,
    provenance: Mapping[str, Any] | None,
    on_version_change: OnVersionChange,
) -> Checkpoint | None:
    """Apply the version policy to a checkpoint about to be resumed from.

    ``migrate``: the state goes through the registered migrations; a provenance-only change is
    accepted and reported. ``invalidate``: a changed checkpoint is not a resume point (None).
    ``accept``: resume as recorded. The change, if any, is on ``checkpoint.version_change``.
    """
    if on_version_change not in POLICIES:
        raise InvalidArgumentError(f"on_version_change must be one of {', '.join(POLICIES)}, not {describe(on_version_change)}")
    change = compare(
        checkpoint.provenance, workflow_version=None if workflow_version is None else str(workflow_version),
        provenance=provenance or {},
    )  # fmt: skip
    if not change.any:
        return checkpoint
    if on_version_change == "invalidate":
        return None
    if on_version_change == "migrate" and change.version_changed:
        if change.workflow is None or change.from_version is None:
            raise IncompatibleSchemaError(
                f"checkpoint {checkpoint.run_id!r}@{checkpoint.seq} records no workflow version, so it cannot be "
                f"migrated to {change.to_version!r}; claim runs with workflow= and workflow_version=, or resume "
                "with on_version_change='accept'",
                found=None,
                supported=change.to_version,
            )
        assert change.to_version is not None
        state = migrations.apply(change.workflow, change.from_version, change.to_version, checkpoint.state)
        return checkpoint.evolved(state=state, change=change)
    return checkpoint.evolved(state=checkpoint.state, change=change)
