"""Record migrations: an ordered list whose position is the version it upgrades from.

``RECORD_MIGRATIONS[i]`` turns a record of schema ``i + 1`` into schema ``i + 2``. Migrations work
on the decoded JSON document, before validation, so the models only ever describe the current
schema. They run in memory on load; stored records are never rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Document = dict[str, Any]


def _v1_chunk_locations(doc: Document) -> Document:
    """Format 1 stored every chunk as its own object ``blobs/<aa>/<id>``; format 2 packs chunks and
    records each one's location. A format-1 chunk is a pack of one, read whole."""
    manifests = [doc.get("state_manifest"), *(doc.get("artifacts") or {}).values()]
    for manifest in manifests:
        if isinstance(manifest, dict):
            manifest["chunks"] = [
                {**chunk, "pack": None, "offset": 0, "length": None} if isinstance(chunk, dict) else chunk
                for chunk in manifest.get("chunks") or []
            ]
    return doc


def _v2_ledger(doc: Document) -> Document:
    """Schema 3 adds the session ledger (steps, effects, budget); a schema-2 record has none."""
    return doc


def _v3_tombstones(doc: Document) -> Document:
    """Schema 4 adds ``pruned`` tombstones; a schema-3 record is never one."""
    return doc


RECORD_MIGRATIONS: list[Callable[[Document], Document]] = [
    _v1_chunk_locations,  # 1 -> 2
    _v2_ledger,  # 2 -> 3
    _v3_tombstones,  # 3 -> 4
]


def migrate_record(doc: Document, version: int) -> Document:
    """Bring a record document of schema ``version`` up to the current schema."""
    for step in RECORD_MIGRATIONS[version - 1 :]:
        doc = step(doc)
    doc["schema_version"] = len(RECORD_MIGRATIONS) + 1
    return doc
