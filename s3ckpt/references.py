"""What a record keeps alive: the manifests it names and the stored objects (packs, format-1 blobs)
their chunks live in. The collector marks from these, verify checks them, and a tombstone keeps the
list of its record's objects for the collector's grace period (docs/operations.md)."""

from __future__ import annotations

from collections.abc import Iterator

from .blobs import stored_at
from .records import ChunkRef, CommitRecord, Manifest

#: ``meta`` key of a tombstone (a ``pruned`` record): what it replaced.
PRUNED = "pruned"
#: ``meta`` key of a removal marker of a LangGraph run (the saver's ``forget``): ``[[first, last],
#: ...]``, ranges of earlier seqs whose records it removes. The collector treats them as it treats
#: the records before a ``deleted`` record: gone, kept for the grace, then replaced by tombstones.
REMOVES = "removes"
#: The seconds a commit may take when the store's config names none (``StoreConfig.commit_deadline``).
DEFAULT_COMMIT_DEADLINE = 1800.0
#: The sealed-document kind of the LangGraph saver's writes objects, which name chunks too.
LANGGRAPH_WRITES_KIND = "langgraph-writes"


def manifests_of(record: CommitRecord) -> dict[str, Manifest]:
    """Every manifest a record names, by a name for messages: its artifacts, a large state, a large
    ledger."""
    manifests = dict(record.artifacts)
    if record.state_manifest is not None:
        manifests["(state)"] = record.state_manifest
    if record.ledger_manifest is not None:
        manifests["(ledger)"] = record.ledger_manifest
    return manifests


def chunks_of(record: CommitRecord) -> Iterator[ChunkRef]:
    for manifest in manifests_of(record).values():
        yield from manifest.chunks


def objects_of(record: CommitRecord) -> set[str]:
    """The keys of the stored objects a record needs. A tombstone needs none, but names those its
    record needed (``meta["pruned"]["objects"]``): see :func:`objects_named_by_tombstone`."""
    return {stored_at(ref) for ref in chunks_of(record)}


def objects_named_by_tombstone(record: CommitRecord) -> set[str]:
    pruned = record.meta.get(PRUNED)
    if record.kind != "pruned" or not isinstance(pruned, dict):
        return set()
    objects = pruned.get("objects")
    return {key for key in objects if isinstance(key, str)} if isinstance(objects, list) else set()
