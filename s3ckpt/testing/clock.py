"""A storage clock that tests move forward: ``MemoryBackend(name, clock=ManualClock())`` stamps
objects with it, so a test ages packs past a collector's grace without waiting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class ManualClock:
    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
