"""Retention: which records of a run ``store.prune`` removes (docs/operations.md, "Retention").

A removed record is replaced by a tombstone, never deleted: conditional create protects only keys
that exist, so a deleted record would let a fenced writer stalled before the prune create its key
and see success. What is kept, besides what the policy keeps: the run's latest checkpoint and every
record after it, and every checkpoint a kept record names (a claim's checkpoint, a rollback
target). A claim before the latest checkpoint goes with the checkpoint it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgumentError, S3ckptError, describe
from .log import Entry, Run

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .store import Store

#: Runs of the LangGraph saver name values of earlier records; the saver prunes them itself.
_SAVER_PREFIX = "langgraph/"


@dataclass(frozen=True)
class PruneReport:
    dry_run: bool
    runs_checked: int
    #: (run id, seq) of each record removed (or, with dry_run, that would be)
    pruned: tuple[tuple[str, int], ...]
    #: (run id, seq) of each checkpoint kept
    kept: tuple[tuple[str, int], ...]
    #: (run id, why) of each run left alone
    skipped: tuple[tuple[str, str], ...]

    @property
    def records_pruned(self) -> int:
        return len(self.pruned)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "runs_checked": self.runs_checked,
            "records_pruned": self.records_pruned,
            "pruned": [{"run": run, "seq": seq} for run, seq in self.pruned],
            "kept": [{"run": run, "seq": seq} for run, seq in self.kept],
            "skipped": [{"run": run, "why": why} for run, why in self.skipped],
        }


@dataclass(frozen=True)
class Policy:
    keep_last: int | None
    keep_within: timedelta | None


def check_policy(keep_last: Any, keep_within: Any) -> Policy:
    if keep_last is None and keep_within is None:
        raise InvalidArgumentError(
            "give keep_last (how many checkpoints to keep) or keep_within (a timedelta), or both; "
            "prune never removes a run's latest checkpoint"
        )
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0):
        raise InvalidArgumentError(f"keep_last is a whole number of checkpoints >= 0, not {describe(keep_last)}")
    if keep_within is not None and (not isinstance(keep_within, timedelta) or keep_within < timedelta(0)):
        raise InvalidArgumentError(f"keep_within is a non-negative datetime.timedelta, not {describe(keep_within)}")
    return Policy(keep_last, keep_within)


def plan(entries: list[Entry], policy: Policy, now: datetime) -> tuple[list[Entry], list[int]]:
    """The records to remove and the checkpoints kept, for one run's log (oldest first)."""
    live = [e for e in entries if e.record.kind != "pruned"]
    if not live or live[-1].record.kind == "deleted":
        return [], []
    latest = live[-1].record.checkpoint_seq
    checkpoints = [e.record.seq for e in live if e.record.kind == "checkpoint"]
    if latest is None:
        return [], []
    keep = {latest}
    if policy.keep_last:
        keep.update(checkpoints[-policy.keep_last :])
    if policy.keep_within is not None:
        try:
            young = now - policy.keep_within
        except OverflowError:  # "keep forever": before any date there is
            young = datetime.min.replace(tzinfo=UTC)
        keep.update(e.record.seq for e in live if e.record.kind == "checkpoint" and e.record.created_at >= young)
    by_seq = {e.record.seq: e for e in live}
    # What a kept record names stays: the checkpoint a claim (or anything after the latest) builds
    # on, and a rollback's target, transitively.
    named = [e.record for e in live if e.record.seq >= latest] + [by_seq[s].record for s in keep if s in by_seq]
    while named:
        record = named.pop()
        for seq in (record.checkpoint_seq, record.meta.get("rollback_to")):
            if isinstance(seq, int) and seq not in keep and seq in by_seq:
                keep.add(seq)
                named.append(by_seq[seq].record)
    remove = [
        e
        for e in live
        if e.record.seq < latest
        and (
            (e.record.kind == "checkpoint" and e.record.seq not in keep)
            or (e.record.kind == "claim" and e.record.checkpoint_seq is not None and e.record.checkpoint_seq not in keep)
        )
    ]
    return remove, sorted(s for s in keep if s in by_seq and by_seq[s].record.kind == "checkpoint")


def prune(
    store: Store, *, keep_last: Any, keep_within: Any, run_ids: Iterable[str] | None, dry_run: bool
) -> PruneReport:
    policy = check_policy(keep_last, keep_within)
    wanted = list(store.runs()) if run_ids is None else list(run_ids)
    now = datetime.now(UTC)
    pruned: list[tuple[str, int]] = []
    kept: list[tuple[str, int]] = []
    skipped: list[tuple[str, str]] = []
    for run_id in wanted:
        if run_id.startswith(_SAVER_PREFIX):
            skipped.append((run_id, "a LangGraph thread: use the saver's prune(), which knows what its records share"))
            continue
        run = Run(store, run_id)
        try:
            entries = list(run._entries())
        except S3ckptError as exc:  # damaged or unreadable: left as it is, for verify to report
            skipped.append((run_id, f"{type(exc).__name__}: {exc}"))
            continue
        if not entries:
            skipped.append((run_id, "no such run"))
            continue
        remove, keep = plan(entries, policy, now)
        kept.extend((run_id, seq) for seq in keep)
        for entry in remove:
            if not dry_run:
                run._tombstone(entry)
            pruned.append((run_id, entry.record.seq))
    return PruneReport(
        dry_run=dry_run, runs_checked=len(wanted), pruned=tuple(pruned), kept=tuple(kept), skipped=tuple(skipped)
    )


__all__ = ["PruneReport", "check_policy", "plan", "prune"]
