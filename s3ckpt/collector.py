"""The garbage collector and the store's statistics (docs/operations.md, "The collector").

Mark, then sweep. The collector first notes the storage's clock and lists every pack; then it
reads every record of every run, every young tombstone and every LangGraph writes object, and marks
the objects they need (a LangGraph thread's removed records and the writes objects of its removed
checkpoints for the grace only: ``langgraph_gc``); then it deletes the listed packs that nothing
marked and whose storage-clock age (``LastModified``, never this host's clock) exceeds the grace.
A writer refuses to create a record later than ``commit_deadline`` after its commit began, and the
grace is at least twice that deadline, so a record the mark missed (created after it) never names a pack old
enough to be deleted. A record it cannot read stops the collector before anything is deleted: an
unreadable record may need any pack.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ._names import _BLOB_ID, parse_seq
from .backends import ObjectInfo
from .blobs import stored_at
from .errors import DAMAGE_FIX, AccessDeniedError, IntegrityError, InvalidArgumentError, ObjectNotFoundError, describe
from .langgraph_gc import is_saver_run, mark_saver_run, writes_objects
from .log import Entry, Run
from .records import Manifest
from .references import DEFAULT_COMMIT_DEADLINE, manifests_of, objects_named_by_tombstone

if TYPE_CHECKING:
    from .store import Store

#: Where stored chunk data lives: packs, and format-1 standalone blobs.
DATA_PREFIXES = ("packs/", "blobs/")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class GcReport:
    """What ``store.gc`` found and did."""

    dry_run: bool
    packs_total: int
    packs_live: int
    packs_deleted: int
    bytes_freed: int
    #: Unreferenced packs younger than the grace: an in-flight commit may be about to name them.
    packs_kept_young: int
    #: keys deleted: packs, then LangGraph writes objects of removed checkpoints
    deleted: tuple[str, ...] = ()
    #: LangGraph writes objects deleted (their checkpoints were removed longer than the grace ago)
    writes_deleted: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "packs_total": self.packs_total,
            "packs_live": self.packs_live,
            "packs_deleted": self.packs_deleted,
            "bytes_freed": self.bytes_freed,
            "packs_kept_young": self.packs_kept_young,
            "deleted": list(self.deleted),
        }


@dataclass(frozen=True)
class StoreStats:
    """What a store holds: ``garbage_bytes`` is what ``gc`` frees once its grace has passed (and
    what only a repack could free, for packs that are partly live)."""

    runs: int
    records: int
    packs: int
    stored_bytes: int
    live_bytes: int
    garbage_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {
            "runs": self.runs,
            "records": self.records,
            "packs": self.packs,
            "stored_bytes": self.stored_bytes,
            "live_bytes": self.live_bytes,
            "garbage_bytes": self.garbage_bytes,
        }


@dataclass
class Marks:
    """What the records need: object keys, and the byte ranges of the chunks in them."""

    runs: int = 0
    records: int = 0
    objects: set[str] = field(default_factory=set)
    #: (object key, offset) -> sealed length (None: a whole format-1 blob)
    extents: dict[tuple[str, int], int | None] = field(default_factory=dict)
    #: LangGraph writes objects that are garbage: their checkpoint is gone (langgraph_gc)
    dead_writes: list[ObjectInfo] = field(default_factory=list)

    def add(self, manifests: Iterable[Manifest]) -> None:
        for manifest in manifests:
            for ref in manifest.chunks:
                key = stored_at(ref)
                self.objects.add(key)
                self.extents[(key, ref.offset)] = ref.length


def storage_now(store: Store) -> datetime:
    """The storage's clock now: the modification time of a probe object written for it."""
    key = f"gc/clock/{secrets.token_hex(8)}"
    store.backend.put(key, b"", mode="create")
    try:
        info = store.backend.head(key)
    finally:
        store.backend.delete(key)
    return info.last_modified if info is not None else datetime.now(UTC)


def list_data(store: Store) -> list[ObjectInfo]:
    """Every pack and format-1 blob, with its size and storage-clock modification time."""
    return [info for prefix in DATA_PREFIXES for info in store.backend.list(prefix) if parse_pack_key(info.key)]


def parse_pack_key(key: str) -> bool:
    """Whether ``key`` is ``packs/<aa>/<id>`` or ``blobs/<aa>/<id>`` (anything else under those
    prefixes is not s3ckpt's, and is never deleted)."""
    parts = key.split("/")
    return len(parts) == 3 and _BLOB_ID.fullmatch(parts[2]) is not None and parts[2].startswith(parts[1])


def mark(
    store: Store, *, now: datetime, grace: timedelta, progress: Progress | None = None, collect: bool = False
) -> Marks:
    """Everything live: the objects every record of every run needs, those of tombstones younger
    than ``grace`` (a writer that read the record may still commit a reference to them), and those
    of LangGraph writes objects. A deleted run (its last record is ``deleted``) needs nothing; with
    ``collect``, its records are replaced by tombstones. Raises (IntegrityError, BackendError)
    rather than miss a reference."""
    marks = Marks()
    #: run prefix -> ids of the checkpoints whose LangGraph writes objects stay
    keep: dict[str, set[str]] = {}
    for run_id in store.runs():
        marks.runs += 1
        run = Run(store, run_id)
        loaded = sorted(_records(run), key=lambda pair: pair[1].record.seq)
        if is_saver_run(run_id):  # removed by markers, kept for the grace (langgraph_gc)
            saver = mark_saver_run(run, loaded, now=now, grace=grace, collect=collect)
            marks.records += saver.records
            marks.add(saver.manifests)
            marks.objects.update(saver.objects)
            keep[run.prefix] = saver.keep
            if progress is not None:
                progress(f"marked run {run_id!r}")
            continue
        deleted = bool(loaded) and loaded[-1][1].record.kind == "deleted"
        for info, entry in loaded:
            record = entry.record
            if record.kind == "pruned":
                if now - info.last_modified < grace and not deleted:
                    marks.objects.update(objects_named_by_tombstone(record))
                continue
            if deleted:
                if collect and record.kind != "deleted":
                    run._tombstone(entry)  # its data (an inline state too) goes with the run
                continue
            marks.records += 1
            marks.add(manifests_of(record).values())
        if progress is not None:
            progress(f"marked run {run_id!r}")
    for wo in writes_objects(store):
        young = now - wo.info.last_modified < grace
        if young or wo.run_prefix not in keep or wo.checkpoint_id in keep[wo.run_prefix]:
            marks.add(wo.manifests)
        else:
            marks.dead_writes.append(wo.info)
    return marks


def _records(run: Run) -> Iterator[tuple[ObjectInfo, Entry]]:
    """Every record object of a run as stored (no chain walk: the collector needs each record's
    references, and a broken chain must not hide them), read in parallel."""
    prefix = f"{run.prefix}log/"
    infos = [info for info in run.store.backend.list(prefix) if parse_seq(info.key[len(prefix) :]) is not None]

    def load(info: ObjectInfo) -> tuple[ObjectInfo, Entry]:
        seq = parse_seq(info.key[len(prefix) :])
        assert seq is not None
        try:
            data = run.store.backend.get(info.key).data
        except ObjectNotFoundError:
            # s3ckpt never deletes a record (it replaces them): one that vanished was deleted by
            # something else, and what it named is unknown. Stop before deleting anything.
            raise IntegrityError(
                f"{info.key} was listed and then vanished while the collector read it: records are never deleted "
                f"by s3ckpt, so something else removed it; {DAMAGE_FIX}. Nothing was deleted.",
                key=info.key,
            ) from None
        return info, run._decode(data, seq)

    yield from run.store.pool.map(load, infos)


def collect(store: Store, *, grace: timedelta, dry_run: bool, progress: Progress | None = None) -> GcReport:
    try:
        return _collect(store, grace=grace, dry_run=dry_run, progress=progress)
    except AccessDeniedError as exc:
        raise AccessDeniedError(
            f"gc was refused ({exc}). Collection deletes packs and rewrites deleted runs' records, which the "
            "worker role may not do: run `s3ckpt gc` as the operator role (docs/operations.md). Nothing "
            "committed was lost."
        ) from None


def check_grace(store: Store, grace: timedelta) -> None:
    """The grace must cover a commit (the store's ``commit_deadline``, which every writer of it
    keeps) plus its record's PUT in flight, which request timeouts bound well within a second one."""
    deadline = max(store.config.commit_deadline or DEFAULT_COMMIT_DEADLINE, store.options.commit_deadline)
    if grace < timedelta(seconds=2 * deadline):
        raise InvalidArgumentError(
            f"grace ({grace}) must be at least twice the store's commit_deadline ({timedelta(seconds=deadline)}): a "
            "commit may take that long between uploading a pack and naming it in a record, and its record PUT "
            "may still be in flight. Give a longer grace. Nothing was deleted."
        )


def _collect(store: Store, *, grace: timedelta, dry_run: bool, progress: Progress | None) -> GcReport:
    if not isinstance(grace, timedelta) or grace < timedelta(0):
        raise InvalidArgumentError(f"grace is a non-negative datetime.timedelta, not {describe(grace)}")
    check_grace(store, grace)
    now = storage_now(store)  # before the listing: ages are never overestimated
    listed = list_data(store)
    marks = mark(store, now=now, grace=grace, progress=progress, collect=not dry_run)
    doomed = [info for info in listed if info.key not in marks.objects and now - info.last_modified > grace]
    young = sum(1 for info in listed if info.key not in marks.objects and now - info.last_modified <= grace)
    if not dry_run:
        # Dead writes objects first: none is left naming a deleted pack if this stops between.
        list(store.pool.map(lambda info: store.backend.delete(info.key), marks.dead_writes))
        list(store.pool.map(lambda info: store.backend.delete(info.key), doomed))
        if progress is not None:
            progress(f"deleted {len(doomed)} packs and {len(marks.dead_writes)} LangGraph writes objects")
    return GcReport(
        dry_run=dry_run,
        packs_total=len(listed),
        packs_live=sum(1 for info in listed if info.key in marks.objects),
        packs_deleted=len(doomed),
        bytes_freed=sum(info.size for info in doomed),
        packs_kept_young=young,
        deleted=(*sorted(info.key for info in doomed), *sorted(info.key for info in marks.dead_writes)),
        writes_deleted=len(marks.dead_writes),
    )


def stats(store: Store) -> StoreStats:
    listed = list_data(store)
    sizes = {info.key: info.size for info in listed}
    marks = mark(store, now=datetime.now(UTC), grace=timedelta(0))
    live = 0
    for (key, _offset), length in marks.extents.items():
        if key in sizes:
            live += sizes[key] if length is None else length
    stored = sum(sizes.values())
    return StoreStats(
        runs=marks.runs,
        records=marks.records,
        packs=len(listed),
        stored_bytes=stored,
        live_bytes=live,
        garbage_bytes=max(0, stored - live),
    )


__all__ = ["GcReport", "StoreStats", "collect", "mark", "stats", "storage_now"]
