"""Reuse of what is stored: chunks a new value may share, and unchanged channels stored once.

A put deduplicates a changed large value against the chunks of its parent checkpoint and of the
parent's writes (and a put_writes against its checkpoint's); a channel whose version did not change
is not stored again: the new record names the stored value (docs/langgraph.md, "Unchanged channels
are not stored again").
"""

from __future__ import annotations

from typing import Any, cast

from ...records import ChunkRef, CommitRecord, Manifest
from .index import _Log, _version_key
from .values import _Ref


def _known(lg: _Log, checkpoint_id: str | None) -> tuple[dict[str, ChunkRef], CommitRecord | None]:
    """The chunks of a checkpoint and of its writes (reused, not uploaded again), and its record."""
    known: dict[str, ChunkRef] = {}
    parent = lg.records.get(lg.puts[checkpoint_id]) if checkpoint_id in lg.puts else None
    manifests = list(parent.artifacts.values()) if parent is not None else []
    if parent is None and checkpoint_id in lg.inflight:
        manifests += lg.inflight[checkpoint_id].values()
    if checkpoint_id is not None and (checkpoint_id in lg.puts or checkpoint_id in lg.inflight):
        # Only a live checkpoint's writes: those of a removed one are garbage (store.gc).
        for key in lg.writes.get(checkpoint_id, ()):
            manifests += lg.wobjs[key].artifacts.values()
    for manifest in manifests:
        known.update((c.id, c) for c in manifest.chunks)
    return known, parent


def _find(lg: _Log, parent: CommitRecord | None, channel: str, version: Any) -> tuple[_Ref, Manifest | None] | None:
    """The stored value of ``channel`` at ``version``: the parent's, else any live checkpoint's."""
    hit: tuple[CommitRecord, _Ref] | None = None
    if parent is not None:
        ref = cast(dict[str, Any], parent.state)["ch"].get(channel)
        if ref is not None and _version_key(ref["v"]) == _version_key(version):
            hit = (parent, ref)
    if hit is None:
        found = lg.values.get((channel, _version_key(version)))
        if found is not None and found[0] in lg.records:
            hit = (lg.records[found[0]], found[1])
    if hit is None:
        return None
    record, ref = hit
    return dict(ref), (record.artifacts.get(ref["a"]) if "a" in ref else None)
