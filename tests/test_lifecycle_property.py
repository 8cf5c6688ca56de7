"""Retention, deletion and the collector against writers, as a Hypothesis state machine: claims,
commits (deduplicated, changed and dropped artifacts), commits by fenced writers (zombies),
rollbacks, prunes, run deletions, gc passes and a storage clock that moves.

Invariants after every rule: every run's latest checkpoint is the last one acknowledged, byte for
byte; every checkpoint still listed restores what was acknowledged for it; a deleted run reads as
gone; verify(read_data=True) finds no problem. A zombie's commit never succeeds.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import s3ckpt
from s3ckpt.backends import MemoryBackend
from s3ckpt.records import ChunkerParams
from s3ckpt.testing import ManualClock

RUNS = ("a", "b")
SMALL_CHUNKS = ChunkerParams(avg_size=512, min_size=128, max_size=2048)
EXAMPLES = int(os.environ.get("S3CKPT_LIFECYCLE_EXAMPLES", 150))
BLOBS = [bytes([i]) * 3000 + os.urandom(1000) for i in range(4)]


class Lifecycle(RuleBasedStateMachine):
    backend_factory: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.name = f"lc-{uuid.uuid4().hex}"
        backend = MemoryBackend(self.name, clock=self.clock)
        self.store = s3ckpt.open_store(backend=backend, key=s3ckpt.generate_key(), chunker=SMALL_CHUNKS, commit_deadline=60)
        self.writers: list[tuple[str, s3ckpt.Writer]] = []
        self.current: dict[str, s3ckpt.Writer | None] = dict.fromkeys(RUNS)
        self.deleted: set[str] = set()
        #: run -> seq -> (state, artifacts) of every acknowledged checkpoint
        self.acked: dict[str, dict[int, tuple[Any, dict[str, bytes]]]] = {run: {} for run in RUNS}
        self.latest: dict[str, int | None] = dict.fromkeys(RUNS)

    def teardown(self) -> None:
        self.store.close()
        MemoryBackend.wipe(self.name)

    def _content(self, run: str) -> dict[str, bytes]:
        seq = self.latest[run]
        return {} if seq is None else dict(self.acked[run][seq][1])

    @rule(run=st.sampled_from(RUNS))
    def claim(self, run: str) -> None:
        if run in self.deleted:
            try:
                self.store.run(run).claim()
            except s3ckpt.RunDeletedError:
                return
            raise AssertionError("a deleted run was claimed")
        writer = self.store.run(run).claim()
        self.writers.append((run, writer))
        self.current[run] = writer

    @precondition(lambda self: self.writers)
    @rule(
        pick=st.integers(min_value=0),
        change=st.sampled_from(["carry", "new", "same", "drop", "two"]),
        blob=st.integers(min_value=0, max_value=len(BLOBS) - 1),
    )
    def commit(self, pick: int, change: str, blob: int) -> None:
        run, writer = self.writers[pick % len(self.writers)]
        artifacts: dict[str, Any] = {}
        if change == "new":
            artifacts["x"] = os.urandom(2500)
        elif change == "same":
            artifacts["x"] = BLOBS[blob]
        elif change == "drop":
            artifacts["x"] = None
        elif change == "two":
            artifacts.update(x=BLOBS[blob], y=BLOBS[blob][::-1])
        live = self.current[run] is writer and run not in self.deleted
        state = {"n": len(self.acked[run]), "change": change}
        try:
            checkpoint = writer.commit(state, artifacts=artifacts)
        except s3ckpt.FencedError:
            assert not live, "the run's current writer was fenced"
            return
        assert live, "a fenced or deleted run's writer committed"
        content = self._content(run)
        for name, value in artifacts.items():
            if value is None:
                content.pop(name, None)
            else:
                content[name] = value
        self.acked[run][checkpoint.seq] = (state, content)
        self.latest[run] = checkpoint.seq

    @precondition(lambda self: any(self.acked[r] for r in RUNS if r not in self.deleted))
    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from([r for r in RUNS if self.acked[r] and r not in self.deleted]))
        listed = {r.seq for r in self.store.run(run).records() if r.kind == "checkpoint"}
        choices = sorted(listed & set(self.acked[run]))
        seq = data.draw(st.sampled_from(choices))
        self.store.run(run).rollback(seq)
        after = self.store.run(run).latest()
        assert after is not None
        self.acked[run][after.seq] = self.acked[run][seq]
        self.latest[run] = after.seq
        self.current[run] = None  # the rollback claimed the run: every writer of it is fenced

    @rule(keep_last=st.integers(min_value=0, max_value=2), within=st.booleans())
    def prune(self, keep_last: int, within: bool) -> None:
        report = self.store.prune(keep_last=keep_last, keep_within=timedelta(seconds=30) if within else None)
        for run, seq in report.pruned:
            assert seq != self.latest[run], "prune removed a run's latest checkpoint"
            self.acked[run].pop(seq, None)

    @precondition(lambda self: any(self.acked[r] for r in RUNS if r not in self.deleted))
    @rule(run=st.sampled_from(RUNS))
    def delete(self, run: str) -> None:
        if not self.acked[run] or run in self.deleted:
            return
        self.store.delete_run(run)
        self.deleted.add(run)
        self.current[run] = None

    @rule(seconds=st.sampled_from([1, 30, 59, 121, 600]))
    def tick(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule()
    def gc(self) -> None:
        self.store.gc(grace=timedelta(seconds=120))

    @invariant()
    def reads_back_what_was_acknowledged(self) -> None:
        for run in RUNS:
            latest = self.store.run(run).latest()
            if run in self.deleted or self.latest[run] is None:
                assert latest is None
                continue
            assert latest is not None
            assert latest.seq == self.latest[run]
            state, content = self.acked[run][latest.seq]
            assert latest.state == state
            assert {name: latest.read_artifact(name) for name in latest.artifacts} == content
            for record in self.store.run(run).records():
                if record.kind == "checkpoint" and record.seq in self.acked[run]:
                    old = self.store.run(run).get(record.seq)
                    assert {n: old.read_artifact(n) for n in old.artifacts} == self.acked[run][record.seq][1]
        report = self.store.verify(read_data=True)
        assert report.ok, report.problems[:3]


Lifecycle.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=60, deadline=None, suppress_health_check=list(HealthCheck)
)
TestLifecycle = Lifecycle.TestCase


def test_the_machine_runs_on_memory_here(tmp_path: Path) -> None:
    """A fixed path through the machine, so a reader can see one (the property runs above)."""
    machine = Lifecycle()
    machine.claim("a")
    machine.commit(0, "two", 1)
    machine.commit(0, "new", 0)
    machine.prune(0, False)
    machine.tick(62)
    machine.gc()
    machine.reads_back_what_was_acknowledged()
    machine.teardown()
