"""Repacking: a commit that uploads anyway moves the live chunks of mostly dead packs it still
references into its own new packs (docs/operations.md, "Repacking").

A pack is never rewritten. Once every record that names the old pack is pruned, the collector
deletes it; the chunks live on in the new pack, which the new record names. Chunks are sealed
bound to their id, not their pack, so their sealed bytes move as they are, each verified first
(a pack with a damaged or missing chunk is not repacked: the commit goes on as it would have).

Which packs: those this commit's record still names, not created by it, whose size is known
(this process wrote them, or asked once: packs never change) and of which the record uses less
than ``REPACK_BELOW`` of the bytes, most dead first, up to ``REPACK_BUDGET`` bytes per commit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping
from typing import TypeVar

from .blobs import BlobStore, Upload, _Span, stored_at
from .errors import IntegrityError
from .records import ChunkRef, Manifest

K = TypeVar("K", bound=Hashable)

#: Repack a pack when the new record uses less than this fraction of it.
REPACK_BELOW = 0.7
#: At most this many sealed bytes are copied per commit (the rest waits for the next commit).
REPACK_BUDGET = 64 << 20
#: At most this many pack sizes are asked (HEAD) per commit; the answers are remembered.
SIZE_PROBES = 16


def _used_bytes(manifests: Mapping[K, Manifest], fresh: set[str]) -> dict[str, dict[int, ChunkRef]]:
    """Per pack key, the chunks (by offset) the record names, for packs older than this commit."""
    used: dict[str, dict[int, ChunkRef]] = defaultdict(dict)
    for manifest in manifests.values():
        for ref in manifest.chunks:
            if ref.pack is not None and ref.pack not in fresh:
                used[stored_at(ref)][ref.offset] = ref
    return used


def _sizes(blobs: BlobStore, keys: list[str]) -> dict[str, int]:
    unknown = [k for k in keys if k not in blobs.pack_sizes][:SIZE_PROBES]
    for key, info in zip(unknown, blobs.pool.map(blobs.backend.head, unknown), strict=True):
        if info is not None:
            blobs.pack_sizes[key] = info.size
    return {k: blobs.pack_sizes[k] for k in keys if k in blobs.pack_sizes}


def plan(blobs: BlobStore, manifests: Mapping[K, Manifest], fresh: set[str]) -> list[list[ChunkRef]]:
    """The chunk lists to move, one per pack, most dead pack first, within the budget."""
    used = _used_bytes(manifests, fresh)
    sizes = _sizes(blobs, sorted(used))
    candidates = []
    for key, chunks in used.items():
        live = sum(ref.length or 0 for ref in chunks.values())
        if key in sizes and live < REPACK_BELOW * sizes[key]:
            candidates.append((live / sizes[key], live, key))
    moves: list[list[ChunkRef]] = []
    budget = REPACK_BUDGET
    for _, live, key in sorted(candidates):
        if live > budget:
            break
        budget -= live
        moves.append(sorted(used[key].values(), key=lambda ref: ref.offset))
    return moves


def _verified(blobs: BlobStore, span: _Span) -> Iterator[tuple[ChunkRef, memoryview]]:
    for ref, sealed in blobs._sealed_chunks(span):
        blobs._open_chunk(ref, sealed, span.key)  # verified before it is copied
        yield ref, sealed


def repack(upload: Upload, manifests: dict[K, Manifest]) -> dict[K, Manifest]:
    """``manifests`` with the live chunks of mostly dead packs moved into ``upload``'s packs."""
    blobs = upload.blobs
    moved: dict[tuple[str, int], ChunkRef] = {}
    for chunks in plan(blobs, manifests, upload.created):
        try:
            sealed = [(ref, bytes(data)) for span in blobs._spans(chunks) for ref, data in _verified(blobs, span)]
        except IntegrityError:
            # Gone or damaged: the collector took the pack of a deleted run whose fenced writer is
            # committing, say. Repacking is only an optimisation; the commit goes on as it is and
            # its record create decides (fenced, or the damage a reader reports).
            continue
        for ref, data in sealed:
            moved[(stored_at(ref), ref.offset)] = upload.copy_sealed(ref, data)
    if not moved:
        return manifests
    return {
        name: Manifest(size=m.size, chunks=tuple(moved.get((stored_at(c), c.offset), c) for c in m.chunks))
        for name, m in manifests.items()
    }


__all__ = ["REPACK_BELOW", "REPACK_BUDGET", "plan", "repack"]
