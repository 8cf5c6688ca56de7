"""Pending writes of a checkpoint across savers (hosts) on one thread, as a property.

A Hypothesis state machine drives three savers on one store through every interleaving of reads,
``put_writes`` (regular and special channels) and ``put`` of children, and checks after every step
that each checkpoint's pending writes, read by a fresh saver, are

- for a checkpoint without a child: every host's writes (the first write of a (task, idx) wins, a
  special channel's latest write wins), so a host resuming it sees what finished elsewhere;
- for a checkpoint with a child: exactly what the child was computed from: the pending writes its
  saver had read, with the tasks it wrote itself replaced by its own writes (whenever they land).
  Another host's writes of the same checkpoint never count, whatever order they landed in.

Every read returns the current state, also for a checkpoint the saver knows already.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.types import ERROR

import s3ckpt
from s3ckpt.backends import MemoryBackend
from s3ckpt.integrations.langgraph import S3ckptSaver

THREAD = "hosts"
HOSTS = 3
TASKS = ("t1", "t2", "t3")
#: Examples and steps per example of the state machine (each step is a few milliseconds on memory).
EXAMPLES = 150
STEPS = 30

Write = tuple[str, str, Any]  # (task, channel, value), as pending_writes


def _config(checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": THREAD, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _checkpoint(cid: str, n: int) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=cid,
        ts="2026-01-01T00:00:00+00:00",
        channel_values={"x": n},
        channel_versions={"x": f"{n:032}.0"},
        versions_seen={},
        updated_channels=None,
    )


METADATA: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}


@dataclass(frozen=True)
class Event:
    """One write as the model sees it: who wrote what, in the order they were written."""

    host: int
    task: str
    idx: int
    channel: str
    value: str


def resolve(events: list[Event]) -> list[Write]:
    """Per (task, idx): the first regular write, the latest special one."""
    found: dict[tuple[str, int], Event] = {}
    for e in events:
        if e.idx >= 0 and (e.task, e.idx) in found:
            continue
        found[(e.task, e.idx)] = e
    return sorted((e.task, e.channel, e.value) for e in found.values())


@dataclass
class Child:
    host: int
    #: the parent's pending writes as its host had last read them
    view: list[Write]


@dataclass
class Model:
    #: records committed to the thread's log
    length: int = 0
    #: per host: the log length it has observed (its next put commits only if it is current)
    position: dict[int, int] = field(default_factory=dict)
    #: per host: what its last read returned, for every checkpoint
    views: dict[int, dict[str, list[Write]]] = field(default_factory=dict)
    #: per host: the checkpoints it knows (read, or put itself)
    known: dict[int, set[str]] = field(default_factory=dict)
    events: dict[str, list[Event]] = field(default_factory=dict)
    #: children of each checkpoint, in commit order
    children: dict[str, list[Child]] = field(default_factory=dict)

    def expected(self, cid: str) -> list[Write]:
        events = self.events.get(cid, [])
        if not self.children.get(cid):
            return resolve(events)
        child = self.children[cid][-1]
        own = [e for e in events if e.host == child.host]
        own_tasks = {e.task for e in own}
        return sorted(resolve(own) + [w for w in child.view if w[0] not in own_tasks])


def _pending(saver: S3ckptSaver, cid: str) -> list[Write]:
    got = saver.get_tuple(_config(cid))
    assert got is not None
    return sorted(got.pending_writes or [])


def _every_pending(saver: S3ckptSaver) -> dict[str, list[Write]]:
    return {t.config["configurable"]["checkpoint_id"]: sorted(t.pending_writes or []) for t in saver.list(_config())}


class Hosts(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(f"hosts-{uuid.uuid4().hex}"))
        self.savers = [S3ckptSaver(self.store) for _ in range(HOSTS)]
        self.model = Model()
        self.checkpoints: list[str] = []
        self.counter = 0

    def teardown(self) -> None:
        self.store.close()

    def _new_id(self) -> str:
        self.counter += 1
        return f"{self.counter:06d}"

    @initialize()
    def root(self) -> None:
        cid = self._new_id()
        self.savers[0].put(_config(), _checkpoint(cid, 0), METADATA, {"x": f"{0:032}.0"})
        self.checkpoints.append(cid)
        self.model.length = 1
        for host in range(HOSTS):
            self.read_all(host)

    def _read(self, host: int) -> None:
        model = self.model
        model.views[host] = {cid: model.expected(cid) for cid in self.checkpoints}
        model.known[host] = set(self.checkpoints)
        model.position[host] = model.length

    @rule(host=st.integers(0, HOSTS - 1), pick=st.integers(0, 1_000))
    def read_one(self, host: int, pick: int) -> None:
        """get_tuple of one checkpoint by its id, known to the saver or not: never stale."""
        cid = self.checkpoints[pick % len(self.checkpoints)]
        assert _pending(self.savers[host], cid) == self.model.expected(cid)
        self._read(host)  # the read took one LIST of the thread: the saver saw everything

    @rule(host=st.integers(0, HOSTS - 1))
    def read_all(self, host: int) -> None:
        assert _every_pending(self.savers[host]) == {cid: self.model.expected(cid) for cid in self.checkpoints}
        self._read(host)

    @rule(host=st.integers(0, HOSTS - 1), pick=st.integers(0, 1_000), task=st.sampled_from(TASKS), special=st.booleans())
    def write(self, host: int, pick: int, task: str, special: bool) -> None:
        known = sorted(self.model.known[host])
        cid = known[pick % len(known)]
        self.counter += 1
        value = f"h{host}-{self.counter}"
        channel, idx = (ERROR, -1) if special else ("c", 0)
        self.savers[host].put_writes(_config(cid), [(channel, value)], task)
        events = self.model.events.setdefault(cid, [])
        if not special and any(e.host == host and e.task == task and e.idx == idx for e in events):
            return  # a repeat of the host's own regular write is a no-op
        events.append(Event(host, task, idx, channel, value))

    @rule(host=st.integers(0, HOSTS - 1), pick=st.integers(0, 1_000))
    def put_child(self, host: int, pick: int) -> None:
        model = self.model
        known = sorted(model.known[host])
        parent = known[pick % len(known)]
        cid = self._new_id()
        current = model.position[host] == model.length
        try:
            self.savers[host].put(_config(parent), _checkpoint(cid, self.counter), METADATA, {"x": f"{self.counter:032}.0"})
        except s3ckpt.ConflictError:
            assert not current, "a host that saw the whole log was refused"
            return
        assert current, "a host behind the log committed a record"
        model.length += 1
        model.position[host] = model.length
        model.known[host].add(cid)
        self.checkpoints.append(cid)
        view = model.views[host].get(parent, [])
        model.children.setdefault(parent, []).append(Child(host, view))

    @invariant()
    def a_fresh_saver_reads_what_each_child_was_computed_from(self) -> None:
        if not self.checkpoints:
            return
        got = _every_pending(S3ckptSaver(self.store))
        assert got == {cid: self.model.expected(cid) for cid in self.checkpoints}


Hosts.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_hosts_on_one_thread = Hosts.TestCase
