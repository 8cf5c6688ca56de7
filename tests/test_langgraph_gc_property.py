"""The LangGraph saver against the collector, as a property.

A Hypothesis state machine puts checkpoints (large values chunked into packs, unchanged channels
named by reference, pending writes with large values), removes them every way the saver can
(prune, delete_for_runs, delete_thread, the core's delete_run), copies threads (by reference) and
uses deleted thread ids again, while the storage clock moves and gc runs with a short grace. After
every step a fresh saver reads exactly the live checkpoints, with their values and pending writes,
``verify(read_data=True)`` is clean, and no record or writes object names a deleted pack.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import s3ckpt
from s3ckpt.integrations.langgraph import S3ckptSaver, run_id_for
from s3ckpt.testing import ManualClock
from tests.test_langgraph_lifecycle import StallingBackend, assert_nothing_names_a_missing_pack, checkpoint, config

THREADS = ("a", "b")
#: Rules pick a thread by index among those made so far (copies add threads).
PICK = st.integers(0, 5)
INLINE = 256
SOAK = max(1, int(os.environ.get("S3CKPT_SOAK", "1")))


@dataclass
class Thread:
    #: live checkpoints in commit order: id -> (channel value, pending writes by (task, idx))
    live: dict[str, tuple[str, dict[tuple[str, int], tuple[str, str]]]] = field(default_factory=dict)


class SaverAndCollector(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock()
        self.name = f"lg-gc-{uuid.uuid4().hex}"
        self.backend = StallingBackend(self.name, self.clock)
        self.store = s3ckpt.open_store(key=s3ckpt.generate_key(), backend=self.backend, commit_deadline=0.5)
        self.saver = S3ckptSaver(self.store, inline_limit=INLINE)
        self.threads = {t: Thread() for t in THREADS}
        self.names = list(THREADS)
        self.counter = 0
        self.runs: dict[str, str] = {}  # checkpoint id -> metadata run_id
        self._versions: dict[str, str] = {}  # checkpoint id -> its channel's version

    def teardown(self) -> None:
        self.store.close()
        StallingBackend.wipe(self.name)

    def _value(self, large: bool) -> str:
        self.counter += 1
        return f"{self.counter}-" + (os.urandom(INLINE).hex() if large else "small")

    def _thread(self, index: int) -> str:
        return self.names[index % len(self.names)]

    @rule(index=PICK, large=st.booleans(), changed=st.booleans(), pick=st.integers(0, 3))
    def put(self, index: int, large: bool, changed: bool, pick: int) -> None:
        thread = self._thread(index)
        model = self.threads[thread]
        [*self.saver.list(config(thread=thread))]  # the graph reads the thread first
        live = list(model.live)
        parent = live[-1 - pick % len(live)] if live and pick < 3 else (live[-1] if live else None)
        self.counter += 1
        cid = f"{self.counter:06d}"
        if parent is not None and not changed:
            value = model.live[parent][0]  # unchanged channel: named by reference, not stored again
            version = self._versions[parent]
            new_versions: dict[str, Any] = {}
        else:
            value = self._value(large)
            version = f"{self.counter:032}.0"
            new_versions = {"x": version}
        cp = checkpoint(cid, 0, value)
        cp["channel_versions"] = {"x": version}
        run_id = f"run-{cid}"
        self.saver.put(config(parent, thread), cp, {"source": "loop", "step": 0, "parents": {}, "run_id": run_id}, new_versions)
        self._versions[cid] = version
        self.runs[cid] = run_id
        model.live[cid] = (value, {})

    @rule(index=PICK, pick=st.integers(0, 3), task=st.sampled_from(["t1", "t2"]), large=st.booleans())
    def put_writes(self, index: int, pick: int, task: str, large: bool) -> None:
        thread = self._thread(index)
        live = list(self.threads[thread].live)
        if not live:
            return
        cid = live[-1 - pick % len(live)]
        value = self._value(large)
        self.saver.put_writes(config(cid, thread), [("c", value)], task)
        self.threads[thread].live[cid][1].setdefault((task, 0), (task, value))  # the first write wins

    @rule(index=PICK)
    def prune(self, index: int) -> None:
        thread = self._thread(index)
        self.saver.prune([thread])
        model = self.threads[thread]
        if model.live:
            last = list(model.live)[-1]
            model.live = {last: model.live[last]}

    @rule(index=PICK, pick=st.integers(0, 3))
    def delete_for_runs(self, index: int, pick: int) -> None:
        thread = self._thread(index)
        live = list(self.threads[thread].live)
        if not live:
            return
        cid = live[-1 - pick % len(live)]
        self.saver.delete_for_runs([self.runs[cid]])
        for model in self.threads.values():  # in every thread: a copy keeps the metadata's run_id
            model.live.pop(cid, None)

    @rule(index=PICK, core=st.booleans())
    def delete_thread(self, index: int, core: bool) -> None:
        thread = self._thread(index)
        if core:
            if self.store.run(run_id_for(thread)).exists():
                self.store.delete_run(run_id_for(thread))
        else:
            self.saver.delete_thread(thread)
        self.threads[thread].live.clear()

    @rule(index=PICK)
    def copy_thread(self, index: int) -> None:
        """Into a new thread: a checkpoint id put again in a thread that had it (a copy into a
        thread that has it) gets its writes objects back, which the model does not follow."""
        source = self._thread(index)
        into = f"copy{len(self.names)}"
        self.saver.copy_thread(source, into)
        self.names.append(into)
        self.threads[into] = Thread({cid: (v, dict(w)) for cid, (v, w) in self.threads[source].live.items()})

    @rule(seconds=st.sampled_from([0, 0.5, 600]), dry_run=st.booleans())
    def gc(self, seconds: float, dry_run: bool) -> None:
        self.clock.advance(seconds)
        report = self.store.gc(grace=timedelta(seconds=1), dry_run=dry_run)
        event(f"gc deleted packs: {report.packs_deleted > 0}, writes objects: {report.writes_deleted > 0}")

    @invariant()
    def a_fresh_saver_reads_what_is_live(self) -> None:
        fresh = S3ckptSaver(self.store, inline_limit=INLINE)
        for thread, model in self.threads.items():
            got = {t.checkpoint["id"]: t for t in fresh.list(config(thread=thread))}
            assert list(got) == list(reversed(model.live)), thread
            for cid, (value, writes) in model.live.items():
                assert got[cid].checkpoint["channel_values"] == {"x": value}
                assert sorted(got[cid].pending_writes or []) == sorted((t, "c", v) for t, v in writes.values())

    @invariant()
    def nothing_names_a_deleted_pack(self) -> None:
        assert_nothing_names_a_missing_pack(self.store)
        report = self.store.verify(read_data=True)
        assert report.ok, report.problems


SaverAndCollector.TestCase.settings = settings(
    max_examples=60 * SOAK, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_saver_and_collector = SaverAndCollector.TestCase
