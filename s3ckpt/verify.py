"""``store.verify``: is every record readable, chained, and backed by the data it names?
(restic's ``check`` and ``check --read-data`` are the anchors; docs/operations.md, "Verify").

Problems are what loses or hides committed data: a record that does not decode or chain, a pack a
record names that is missing or too short, a chunk whose content does not match its id (with
``read_data``), a log record deleted under S3 versioning (truncation). Orphaned packs (garbage for
``gc``) and effects whose outcome is unknown are listed apart: they are not damage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .blobs import stored_at
from .collector import list_data
from .errors import S3ckptError
from .langgraph_gc import writes_objects
from .log import Run
from .records import ChunkRef, EffectRecord, Manifest
from .references import manifests_of, objects_of

if TYPE_CHECKING:
    from .store import Store

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Finding:
    run_id: str | None
    key: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "key": self.key, "message": self.message}


@dataclass
class VerifyReport:
    read_data: bool
    runs_checked: int = 0
    records_checked: int = 0
    packs_checked: int = 0
    chunks_read: int = 0
    problems: list[Finding] = field(default_factory=list)
    #: Packs no record names: garbage for ``gc`` (an aborted commit's, a pruned record's)
    orphans: list[str] = field(default_factory=list)
    #: (run id, effect) of effects whose outcome is unknown in a run's latest checkpoint
    unknown_effects: list[tuple[str, EffectRecord]] = field(default_factory=list)
    #: chunks read and checked, by (object key, offset): each is read once however many records name it
    read: set[tuple[str, int]] = field(default_factory=set, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "read_data": self.read_data,
            "runs_checked": self.runs_checked,
            "records_checked": self.records_checked,
            "packs_checked": self.packs_checked,
            "chunks_read": self.chunks_read,
            "problems": [p.to_dict() for p in self.problems],
            "orphans": list(self.orphans),
            "unknown_effects": [
                {"run": run_id, "idempotency_key": e.idempotency_key, "kind": e.kind, "status": e.status}
                for run_id, e in self.unknown_effects
            ],
        }


def verify_store(store: Store, run_id: str | None, *, read_data: bool, progress: Progress | None = None) -> VerifyReport:
    report = VerifyReport(read_data=read_data)
    sizes = {info.key: info.size for info in list_data(store)}
    referenced: set[str] = set()
    run_ids = [run_id] if run_id is not None else list(store.runs())
    for index, rid in enumerate(run_ids):
        if progress is not None:
            progress(f"run {index + 1}/{len(run_ids)}: {rid!r}")
        _verify_run(store, Run(store, rid), sizes, referenced, report)
        report.runs_checked += 1
    if run_id is None:
        for writes in writes_objects(store):  # a LangGraph writes object names chunks too
            for manifest in writes.manifests:
                referenced.update(stored_at(ref) for ref in manifest.chunks)
                problem = _check_manifest(store, manifest.chunks, sizes, read_data=read_data, report=report)
                if problem is not None:
                    report.problems.append(Finding(None, problem[0], f"{writes.info.key}: {problem[1]}"))
    for key in store.backend.deleted_keys("runs/"):
        if "/log/" in key:
            report.problems.append(
                Finding(
                    None,
                    key,
                    "a log record was deleted (a delete marker under S3 versioning): the run is truncated. Restore "
                    "the previous version of the object.",
                )
            )
    if run_id is None:
        report.orphans = sorted(set(sizes) - referenced)
    report.packs_checked = len(referenced & set(sizes))
    return report


def _verify_run(store: Store, run: Run, sizes: dict[str, int], referenced: set[str], report: VerifyReport) -> None:
    last = None
    try:
        for record in run.records():
            report.records_checked += 1
            last = record
            if record.kind == "pruned":
                continue
            referenced.update(objects_of(record))
            where = f"run {run.run_id!r}@{record.seq}"
            for name, manifest in manifests_of(record).items():
                problem = _check_manifest(store, manifest.chunks, sizes, read_data=report.read_data, report=report)
                if problem is not None:
                    report.problems.append(Finding(run.run_id, problem[0], f"{where}: {name}: {problem[1]}"))
    except S3ckptError as exc:
        report.problems.append(Finding(run.run_id, getattr(exc, "key", None), f"{type(exc).__name__}: {exc}"))
        return
    if last is None:
        report.problems.append(Finding(run.run_id, None, f"run {run.run_id!r} has no records"))
        return
    try:
        latest = run._latest("exists") if last.kind != "deleted" else None
    except S3ckptError as exc:
        report.problems.append(Finding(run.run_id, getattr(exc, "key", None), f"{type(exc).__name__}: {exc}"))
        return
    if latest is not None:
        try:
            effects = latest.effects
        except S3ckptError as exc:
            report.problems.append(Finding(run.run_id, None, f"the latest ledger: {type(exc).__name__}: {exc}"))
            return
        report.unknown_effects.extend((run.run_id, e) for e in effects if e.status in ("pending", "unknown"))


def _check_manifest(
    store: Store, chunks: tuple[ChunkRef, ...], sizes: dict[str, int], *, read_data: bool, report: VerifyReport
) -> tuple[str, str] | None:
    """The first problem with a manifest's chunks: (object key, what is wrong), or None. With
    ``read_data``, every chunk not read before is fetched and checked against its id."""
    for ref in chunks:
        key = stored_at(ref)
        if key not in sizes:
            return key, f"{key} is missing"
        end = ref.offset + (ref.length or 0)
        if end > sizes[key]:
            return key, f"{key} holds {sizes[key]} bytes, but a chunk ends at {end} (truncated)"
    if read_data:
        unread = tuple(ref for ref in chunks if (stored_at(ref), ref.offset) not in report.read)
        try:
            for _ in store.blobs.iter_chunks(Manifest(size=sum(ref.size for ref in unread), chunks=unread)):
                report.chunks_read += 1
        except S3ckptError as exc:
            return getattr(exc, "key", None) or "", f"{type(exc).__name__}: {exc}"
        report.read.update((stored_at(ref), ref.offset) for ref in unread)
    return None


__all__ = ["Finding", "Progress", "VerifyReport", "verify_store"]
