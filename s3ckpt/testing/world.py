"""A fake outside world for kill-and-resume tests: a provider that durably records every delivery.

A workload's ``send`` functions deliver through :meth:`World.deliver`, which appends a line to a
file and fsyncs it before returning, so a delivery survives the process that made it, exactly as
an e-mail that left survives a crashed sender. The provider does not deduplicate: a duplicate
send shows up as two lines. :meth:`World.lookup` is what a reconciler asks.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from .. import _boundaries

DELIVERIES = "deliveries.jsonl"
EVENTS = "events.jsonl"


def _append(path: Path, entry: dict[str, Any]) -> None:
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


class World:
    """The outside world of one run, kept in a directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def deliver(self, kind: str, idempotency_key: str, payload: Any = None) -> str:
        """Deliver an effect; returns the provider's reference. Durable before it returns."""
        body = json.dumps(payload, sort_keys=True, default=str).encode()
        n = len(self.deliveries()) + 1
        reference = f"{kind}-{n}"
        _append(
            self.root / DELIVERIES,
            {"kind": kind, "key": idempotency_key, "payload_sha256": hashlib.sha256(body).hexdigest(), "reference": reference},
        )
        _boundaries.reached("inside-send", idempotency_key)  # delivered; the sender has not heard back
        return reference

    def lookup(self, idempotency_key: str) -> str | None:
        """The reference of the delivery with this key, or None if nothing arrived."""
        for entry in self.deliveries():
            if entry["key"] == idempotency_key:
                return str(entry["reference"])
        return None

    def deliveries(self) -> list[dict[str, Any]]:
        return _read(self.root / DELIVERIES)

    def delivered_keys(self) -> Counter[str]:
        return Counter(entry["key"] for entry in self.deliveries())

    def note(self, event: str, detail: str) -> None:
        """Record a library event (a step body starting, a step committing) durably."""
        _append(self.root / EVENTS, {"event": event, "detail": detail})

    def events(self) -> list[dict[str, Any]]:
        return _read(self.root / EVENTS)
