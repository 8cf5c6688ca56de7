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

import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.types import ERROR

import s3ckpt
from s3ckpt.backends import MemoryBackend
from s3ckpt.integrations.langgraph import S3ckptSaver

THREAD = "hosts"
HOSTS = 3
TASKS = ("t1", "t2")
#: Examples of the state machine on memory (each step takes a few milliseconds) and on a local
#: directory, and steps per example; S3CKPT_SOAK multiplies the examples.
SOAK = max(1, int(os.environ.get("S3CKPT_SOAK", "1")))
EXAMPLES = {"memory": 300 * SOAK, "local": 40 * SOAK}
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
    cid: str
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

    def remove_child(self, parent: str, cid: str) -> None:
        """``cid`` (a child of ``parent``) is deleted. Without another child, the parent keeps the
        writes the deleted child was computed from, and only those (the others are deleted)."""
        counted = self.expected(parent)
        self.children[parent] = [c for c in self.children[parent] if c.cid != cid]
        if not self.children[parent]:
            self.events[parent] = [e for e in self.events.get(parent, []) if (e.task, e.channel, e.value) in counted]


def _pending(saver: S3ckptSaver, cid: str) -> list[Write]:
    got = saver.get_tuple(_config(cid))
    assert got is not None
    return sorted(got.pending_writes or [])


def _every_pending(saver: S3ckptSaver) -> dict[str, list[Write]]:
    return {t.config["configurable"]["checkpoint_id"]: sorted(t.pending_writes or []) for t in saver.list(_config())}


class Hosts(RuleBasedStateMachine):
    directory: str | None = None

    def open(self) -> s3ckpt.Store:
        return s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(f"hosts-{uuid.uuid4().hex}"))

    def __init__(self) -> None:
        super().__init__()
        self.store = self.open()
        self.savers = [S3ckptSaver(self.store) for _ in range(HOSTS)]
        self.model = Model()
        self.checkpoints: list[str] = []
        self.parents: dict[str, str] = {}
        self.counter = 0

    def teardown(self) -> None:
        self.store.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _new_id(self) -> str:
        self.counter += 1
        return f"{self.counter:06d}"

    def _known(self, host: int, pick: int) -> str | None:
        """One of the newest checkpoints the host knows (``pick`` 0 is the newest): hosts race on
        the same few checkpoints, as they do on a thread's latest."""
        known = sorted(self.model.known[host] & set(self.checkpoints))
        return known[-1 - pick % len(known)] if known else None

    @staticmethod
    def _metadata(cid: str) -> CheckpointMetadata:
        return {**METADATA, "run_id": f"run-{cid}"}  # delete_for_runs removes one checkpoint

    @initialize()
    def root(self) -> None:
        cid = self._new_id()
        self.savers[0].put(_config(), _checkpoint(cid, 0), self._metadata(cid), {"x": f"{0:032}.0"})
        self.checkpoints.append(cid)
        self.model.length = 1
        for host in range(HOSTS):
            self.read_all(host)

    def _read(self, host: int) -> None:
        model = self.model
        model.views[host] = {cid: model.expected(cid) for cid in self.checkpoints}
        model.known[host] = set(self.checkpoints)
        model.position[host] = model.length

    @rule(host=st.integers(0, HOSTS - 1), pick=st.integers(0, 3))
    def read(self, host: int, pick: int) -> None:
        """get_tuple of one checkpoint by its id, known to the saver or not (``pick`` 0-2), or
        list of the thread (3): never stale. Either takes one LIST of the thread, after which the
        saver has seen everything."""
        if pick == 3:
            self.read_all(host)
            return
        cid = self.checkpoints[-1 - pick % len(self.checkpoints)]
        assert _pending(self.savers[host], cid) == self.model.expected(cid)
        self._read(host)

    def read_all(self, host: int) -> None:
        assert _every_pending(self.savers[host]) == {cid: self.model.expected(cid) for cid in self.checkpoints}
        self._read(host)

    @rule(host=st.integers(0, HOSTS - 1), pick=st.integers(0, 2), task=st.sampled_from(TASKS), special=st.booleans())
    def write(self, host: int, pick: int, task: str, special: bool) -> None:
        cid = self._known(host, pick)
        if cid is None:
            return
        self.counter += 1
        value = f"h{host}-{self.counter}"
        channel, idx = (ERROR, -1) if special else ("c", 0)
        self.savers[host].put_writes(_config(cid), [(channel, value)], task)
        events = self.model.events.setdefault(cid, [])
        if not special and any(e.host == host and e.task == task and e.idx == idx for e in events):
            return  # a repeat of the host's own regular write is a no-op
        events.append(Event(host, task, idx, channel, value))

    @rule(host=st.integers(0, HOSTS - 1), pick=st.integers(0, 2))
    def put_child(self, host: int, pick: int) -> None:
        model = self.model
        parent = self._known(host, pick)
        if parent is None:
            return
        cid = self._new_id()
        current = model.position[host] == model.length
        version: ChannelVersions = {"x": f"{self.counter:032}.0"}
        try:
            self.savers[host].put(_config(parent), _checkpoint(cid, self.counter), self._metadata(cid), version)
        except s3ckpt.ConflictError:
            assert not current, "a host that saw the whole log was refused"
            return
        assert current, "a host behind the log committed a record"
        model.length += 1
        model.position[host] = model.length
        model.known[host].add(cid)
        self.checkpoints.append(cid)
        view = model.views[host].get(parent, [])
        model.children.setdefault(parent, []).append(Child(cid, host, view))
        self.parents[cid] = parent

    @rule(host=st.integers(0, HOSTS - 1), pick=st.integers(0, 2))
    def delete_checkpoint(self, host: int, pick: int) -> None:
        """delete_for_runs of one checkpoint's run: it reads the thread, appends a forget marker.
        Other hosts may be behind it: no record is deleted, so their next put conflicts, and a
        write of theirs that the marker hid is written again when they repeat it."""
        model = self.model
        if len(self.checkpoints) < 2:
            return

        cid = self.checkpoints[-1 - pick % len(self.checkpoints)]
        self.savers[host].delete_for_runs([f"run-{cid}"])
        parent = self.parents.get(cid)
        if parent in self.checkpoints:
            model.remove_child(parent, cid)
        self.checkpoints.remove(cid)
        model.events.pop(cid, None)
        model.length += 1
        self._read(host)  # it read the thread first, and applied its own marker

    @invariant()
    def a_fresh_saver_reads_what_each_child_was_computed_from(self) -> None:
        if not self.checkpoints:
            return
        got = _every_pending(S3ckptSaver(self.store))
        assert got == {cid: self.model.expected(cid) for cid in self.checkpoints}


class HostsOnALocalDirectory(Hosts):
    def open(self) -> s3ckpt.Store:
        self.directory = tempfile.mkdtemp(prefix="s3ckpt-hosts-")
        return s3ckpt.open_store(self.directory, key=s3ckpt.generate_key())


for machine, backend in ((Hosts, "memory"), (HostsOnALocalDirectory, "local")):
    machine.TestCase.settings = settings(
        max_examples=EXAMPLES[backend],
        stateful_step_count=STEPS,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
test_hosts_on_one_thread_memory = Hosts.TestCase
test_hosts_on_one_thread_local = HostsOnALocalDirectory.TestCase


def _race(store: s3ckpt.Store, *, ride: bool) -> tuple[S3ckptSaver, str, str]:
    """A checkpoint x whose child y a winner committed after a loser wrote its writes of x first
    (so the old first-write-wins rule would have picked the loser's). The winner's writes are an
    object, or ride in y's record. Returns the winner's saver, x and y."""
    winner, loser = S3ckptSaver(store), S3ckptSaver(store)
    x, y = "000001", "000002"
    root = winner.put(_config(), _checkpoint(x, 1), {**METADATA, "run_id": "r1"}, {"x": f"{1:032}.0"})
    loser.list(_config())
    loser.put_writes(root, [("c", "lost"), ("d", "lost")], "t")
    loser.put_writes(root, [(ERROR, "lost")], "u")
    time.sleep(0.03)  # past the saver's grace for riding writes
    if not ride:
        winner.put_writes(root, [("c", "won"), ("d", "won")], "t")
        winner.put(root, _checkpoint(y, 2), {**METADATA, "run_id": "r2"}, {"x": f"{2:032}.0"})
    else:
        lg = winner._log_of(THREAD, "")
        with lg.lock:
            lg.puts_active += 1  # a put of the run is under way: the writes wait to ride in y
        worker = threading.Thread(target=winner.put_writes, args=(root, [("c", "won"), ("d", "won")], "t"))
        worker.start()
        while not lg.waiting:
            time.sleep(0.002)
        winner.put(root, _checkpoint(y, 2), {**METADATA, "run_id": "r2"}, {"x": f"{2:032}.0"})
        worker.join(timeout=10)
        with lg.lock:
            lg.puts_active -= 1
        assert "pw" in cast(dict[str, Any], lg.records[lg.puts[y]].state)  # they rode
    return winner, x, y


WON = [("t", "c", "won"), ("t", "d", "won")]


@pytest.mark.parametrize("ride", [False, True], ids=["object", "ride"])
def test_removing_the_child_keeps_the_writes_it_was_computed_from(ride: bool) -> None:
    with s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(f"forget-{uuid.uuid4().hex}")) as store:
        winner, x, _ = _race(store, ride=ride)
        assert _pending(S3ckptSaver(store), x) == WON
        # delete_for_runs removes y (run r2) and keeps x: x's writes stay those y was computed from
        winner.delete_for_runs(["r2"])
        fresh = S3ckptSaver(store)
        assert list(_every_pending(fresh)) == [x]
        assert _pending(fresh, x) == WON


def test_a_copied_thread_keeps_which_writes_count() -> None:
    with s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(f"copy-{uuid.uuid4().hex}")) as store:
        winner, x, _ = _race(store, ride=False)
        winner.copy_thread(THREAD, "copy")
        got = S3ckptSaver(store).get_tuple({"configurable": {"thread_id": "copy", "checkpoint_ns": "", "checkpoint_id": x}})
        assert got is not None
        assert sorted(got.pending_writes or []) == WON


def test_writes_objects_from_before_writers_were_named_are_read() -> None:
    """A writes object under the earlier key layout (no writer segment) still counts."""
    from s3ckpt.integrations.langgraph import _Writes, writes_key

    with s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(f"legacy-{uuid.uuid4().hex}")) as store:
        saver = S3ckptSaver(store)
        root = saver.put(_config(), _checkpoint("000001", 1), METADATA, {"x": f"{1:032}.0"})
        lg = saver._log_of(THREAD, "")
        key = writes_key(lg.run.prefix, "000001", "t", [0], None)
        ref = {"t": "json", "b": "Im9sZCI="}  # json "old"
        legacy = _Writes(key, "000001", "t", "", [[0, "c", ref]], {}, time.time_ns(), None)
        assert saver._store_writes(lg, legacy, started=None)
        assert _pending(S3ckptSaver(store), "000001") == [("t", "c", "old")]
        saver.put_writes(root, [("c", "new")], "u")
        assert _pending(S3ckptSaver(store), "000001") == [("t", "c", "old"), ("u", "c", "new")]


def test_a_special_write_superseded_after_the_child_read_it_stays_the_childs() -> None:
    """A writer's later special write of a checkpoint is a new object, so the one a child was
    computed from is still there to name: the child's view holds."""
    with s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(f"special-{uuid.uuid4().hex}")) as store:
        a, b = S3ckptSaver(store), S3ckptSaver(store)
        root = a.put(_config(), _checkpoint("000001", 1), METADATA, {"x": f"{1:032}.0"})
        a.put_writes(root, [(ERROR, "first")], "t")
        assert _pending(b, "000001") == [("t", ERROR, "first")]
        time.sleep(0.03)
        a.put_writes(root, [(ERROR, "second")], "t")
        b.put(root, _checkpoint("000002", 2), METADATA, {"x": f"{2:032}.0"})
        assert _pending(S3ckptSaver(store), "000001") == [("t", ERROR, "first")]
        assert _pending(a, "000001") == [("t", ERROR, "first")]


def _stale_host_rewrites(*, evicted: bool) -> list[Write]:
    """Host b writes a write of checkpoint 1 that does not count (a's child 2 was computed without
    it); a removes 2 (delete_for_runs), which hides b's write; b, which has not read the thread
    since, writes the same (task, idx) again. ``evicted``: b's index of the thread is gone too."""
    with s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(f"stale-{uuid.uuid4().hex}")) as store:
        a, b = S3ckptSaver(store), S3ckptSaver(store)
        a.put(_config(), _checkpoint("000001", 0), {**METADATA, "run_id": "r1"}, {"x": f"{0:032}.0"})
        a.put(_config("000001"), _checkpoint("000002", 1), {**METADATA, "run_id": "r2"}, {"x": f"{1:032}.0"})
        list(b.list(_config()))
        b.put_writes(_config("000001"), [("c", "first")], "t1")
        assert _pending(S3ckptSaver(store), "000001") == []  # a's child counts none of b's
        a.delete_for_runs(["r2"])
        assert _pending(S3ckptSaver(store), "000001") == []  # b's write stays hidden
        if evicted:
            b._logs.clear()
        b.put_writes(_config("000001"), [("c", "again")], "t1")
        pending = _pending(S3ckptSaver(store), "000001")
        assert _pending(b, "000001") == pending
        return pending


@pytest.mark.parametrize("evicted", [False, True], ids=["remembered", "evicted"])
def test_a_write_hidden_by_another_hosts_removal_is_written_again(evicted: bool) -> None:
    """Regression: b remembered its hidden write and skipped the new one, which was lost."""
    assert _stale_host_rewrites(evicted=evicted) == [("t1", "c", "again")]
