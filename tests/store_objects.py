"""Helpers for tests that open every object of a store: every pack byte must belong to a chunk that
something references, or a check that reads "every object" could miss what it did not read."""

from __future__ import annotations

from collections.abc import Mapping

from s3ckpt._names import check_blob_id, pack_key
from s3ckpt.records import Manifest


def assert_packs_covered(packs: Mapping[str, int], manifests: Mapping[str, Manifest]) -> None:
    """``packs``: pack key -> size; ``manifests``: every manifest that anything references."""
    read: dict[str, list[tuple[int, int]]] = {}
    for manifest in manifests.values():
        for ref in manifest.chunks:
            assert ref.pack is not None
            assert ref.length is not None
            read.setdefault(pack_key(check_blob_id(ref.pack)), []).append((ref.offset, ref.offset + ref.length))
    for key, size in packs.items():
        end = 0
        for start, stop in sorted(read.get(key, [])):
            assert start <= end, f"{key}: bytes {end}..{start} are in no chunk anything references"
            end = max(end, stop)
        assert end == size, f"{key}: bytes {end}..{size} are in no chunk anything references"
