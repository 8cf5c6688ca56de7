"""A thread's latest checkpoint is the last one committed to its log, not the largest checkpoint id.

LangGraph's checkpoint ids are uuid6 values of the writing host's clock. With a host whose clock is
behind, its checkpoints have smaller ids than older ones of another host: taking the largest id as
the latest made every host read that host's finished work back as an older state, a second resume
ran a task again, and ``prune(keep_latest)`` deleted the real latest checkpoint. The saver's log
orders puts (each is a record at a seq, created if absent), and ``get_tuple`` without an id,
``list``'s order and ``before``, and ``prune`` follow it (docs/langgraph.md, "Latest is the last
put of the log").

Two savers in two processes on moto's S3 server, one with LangGraph's id clock ten minutes behind;
and a Hypothesis property over hosts writing checkpoints with ids in any order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

import s3ckpt
from s3ckpt.backends import MemoryBackend
from s3ckpt.integrations.langgraph import S3ckptSaver
from s3ckpt.testing.plugin import S3Bucket

from .langgraph_race import Worker, approvals

#: How far behind the second host's clock is (LangGraph's checkpoint ids are made from it).
BEHIND = -600.0


@pytest.fixture
def skewed(moto_s3: S3Bucket, tmp_path: Path) -> Iterator[tuple[Worker, Worker, s3ckpt.Store, Path]]:
    """Host a (its clock right) and host b (its clock BEHIND), each a process with its own store
    and saver on one bucket; a store of the test process; the side-effects file."""
    key = s3ckpt.generate_key()
    effects = tmp_path / "effects"
    effects.touch()
    with s3ckpt.open_store(moto_s3.url, key=key, endpoint_url=moto_s3.endpoint_url, region="us-east-1") as store:
        a = Worker(moto_s3.url, moto_s3.endpoint_url, key, effects)
        try:
            b = Worker(moto_s3.url, moto_s3.endpoint_url, key, effects, clock_skew=BEHIND)
            try:
                yield a, b, store, effects
            finally:
                b.close()
        finally:
            a.close()


def _config(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _is_chain(history: list[list[str | None]]) -> bool:
    """Whether a newest-first history is one chain: each checkpoint's parent is the next listed."""
    return all(history[i][1] == history[i + 1][0] for i in range(len(history) - 1)) and history[-1][1] is None


def _start_and_resume_behind(a: Worker, b: Worker, thread: str, effects: Path) -> tuple[str, dict[str, Any]]:
    """Host a runs the thread to its first interrupt (checkpoint x); host b, its clock behind,
    resumes it: act1 runs on b, and the thread stops at the second interrupt. Returns x and b's
    state, after checking that b's checkpoints have ids below x's (what used to make x the latest)."""
    x = a.call(op="start", graph="approvals", thread=thread)["checkpoint_id"]
    got = b.call(op="resume", graph="approvals", thread=thread, answer="yes")
    assert got["ok"]["log"] == ["planned", "approve1:yes", "act1"], got
    assert effects.read_text().splitlines() == [f"act1 {b.pid}"]
    state = b.call(op="state", graph="approvals", thread=thread)
    assert state["next"] == ["approve2"], state
    listed = [cid for cid, _ in state["history"]]
    written_by_b = listed[: listed.index(x)]
    assert written_by_b, state
    assert all(cid < x for cid in written_by_b), "b's clock is behind: its checkpoints have ids below x's"
    return x, state


def test_a_host_whose_clock_is_behind_writes_the_latest_checkpoint(
    skewed: tuple[Worker, Worker, s3ckpt.Store, Path],
) -> None:
    a, b, store, effects = skewed
    x, after_b = _start_and_resume_behind(a, b, "skew", effects)
    y = after_b["checkpoint_id"]
    # Host a (and a fresh saver here) reads the thread where b left it, not at x (the largest id).
    seen_by_a = a.call(op="state", graph="approvals", thread="skew")
    assert seen_by_a == after_b
    assert seen_by_a["values"]["log"] == ["planned", "approve1:yes", "act1"]
    history = seen_by_a["history"]
    # Newest first is log order: the list follows the parent chain, which id order does not.
    assert history[0][0] == y
    assert _is_chain(history), history
    assert [cid for cid, _ in history] != sorted((cid for cid, _ in history), reverse=True)
    fresh = S3ckptSaver(store)
    latest = fresh.get_tuple(_config("skew"))
    assert latest is not None
    assert latest.config["configurable"]["checkpoint_id"] == y
    # before=y: the checkpoints committed before y, newest first (y's parent first).
    before = [t.config["configurable"]["checkpoint_id"] for t in fresh.list(_config("skew"), before=_config("skew", y))]
    assert before == [cid for cid, _ in history[1:]]
    # Host a resumes: the graph continues from b's checkpoint (act2 runs), act1 does not run again.
    got = a.call(op="resume", graph="approvals", thread="skew", answer="ok")
    assert got["ok"]["log"] == ["planned", "approve1:yes", "act1", "approve2:ok", "act2"], got
    assert effects.read_text().splitlines() == [f"act1 {b.pid}", f"act2 {a.pid}"]
    # Resuming the finished thread again, on either host, runs nothing.
    for host in (b, a):
        again = host.call(op="resume", graph="approvals", thread="skew", answer="again")
        assert again["ok"]["log"] == ["planned", "approve1:yes", "act1", "approve2:ok", "act2"], again
    assert effects.read_text().splitlines() == [f"act1 {b.pid}", f"act2 {a.pid}"]
    final = approvals(S3ckptSaver(store), effects).get_state(_config("skew"))
    assert final.next == ()
    assert x in [cid for cid, _ in history]


def test_prune_keeps_the_last_checkpoint_of_the_log_whatever_its_id(
    skewed: tuple[Worker, Worker, s3ckpt.Store, Path],
) -> None:
    a, b, store, effects = skewed
    x, after_b = _start_and_resume_behind(a, b, "pruned", effects)
    y = after_b["checkpoint_id"]
    assert a.call(op="prune", thread="pruned") == {"ok": True}
    # The one checkpoint left is b's (the last committed), not x (the largest id).
    left = list(S3ckptSaver(store).list(_config("pruned")))
    assert [t.config["configurable"]["checkpoint_id"] for t in left] == [y]
    assert a.call(op="state", graph="approvals", thread="pruned")["next"] == ["approve2"]
    # Resumed after the prune, the graph goes on from there: act2 runs once, act1 not again.
    got = a.call(op="resume", graph="approvals", thread="pruned", answer="ok")
    assert got["ok"]["log"] == ["planned", "approve1:yes", "act1", "approve2:ok", "act2"], got
    assert effects.read_text().splitlines() == [f"act1 {b.pid}", f"act2 {a.pid}"]
    assert x != y


# -- a property: hosts writing checkpoints with ids in any order --------------------------------

HOSTS = 2
METADATA: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}


def _checkpoint(cid: str, n: int) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=cid,
        ts="2026-01-01T00:00:00+00:00",
        channel_values={"n": n},
        channel_versions={"n": f"{n + 1:032}.0"},
        versions_seen={},
        updated_channels=None,
    )


#: A put by a host (its checkpoint's id is drawn apart), or a forget of one put (delete_for_runs)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, HOSTS - 1), st.booleans()),
        st.tuples(st.just("forget"), st.integers(0, HOSTS - 1), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS, ids=st.lists(st.uuids(), min_size=12, max_size=12, unique=True), pruner=st.integers(0, HOSTS - 1))
def test_latest_list_before_and_prune_follow_the_log(
    ops: list[tuple[str, int, Any]], ids: list[uuid.UUID], pruner: int
) -> None:
    """Model: the live puts in commit order. Each host reads the thread before it writes (as a
    graph does); a put's parent is the latest checkpoint or, for a fork, the first one."""
    with s3ckpt.open_store(key=s3ckpt.generate_key(), backend=MemoryBackend(f"skew-{uuid.uuid4().hex}")) as store:
        savers = [S3ckptSaver(store) for _ in range(HOSTS)]
        thread = "t"
        live: list[str] = []  # the model: live checkpoints, in commit order
        fresh_ids = iter(str(i) for i in ids)
        n = 0
        for op, host, arg in ops:
            saver = savers[host]
            saver.get_tuple(_config(thread))
            if op == "put":
                cid = next(fresh_ids)
                parent = (live[0] if arg else live[-1]) if live else None
                metadata: CheckpointMetadata = {**METADATA, "step": n, "run_id": f"run-{cid}"}
                saver.put(_config(thread, parent), _checkpoint(cid, n), metadata, {"n": f"{n + 1:032}.0"})
                live.append(cid)
                n += 1
            elif live:
                gone = live[arg % len(live)]
                saver.delete_for_runs([f"run-{gone}"])
                live.remove(gone)
            for reader in (*savers, S3ckptSaver(store)):
                latest = reader.get_tuple(_config(thread))
                assert (latest.config["configurable"]["checkpoint_id"] if latest else None) == (live[-1] if live else None)
                listed = [t.config["configurable"]["checkpoint_id"] for t in reader.list(_config(thread))]
                assert listed == live[::-1]
            if live:
                cut = live[len(live) // 2]
                earlier = saver.list(_config(thread), before=_config(thread, cut))
                before = [t.config["configurable"]["checkpoint_id"] for t in earlier]
                assert before == live[: len(live) // 2][::-1]
        savers[pruner].prune([thread])
        for reader in (*savers, S3ckptSaver(store)):
            assert [t.config["configurable"]["checkpoint_id"] for t in reader.list(_config(thread))] == live[-1:]
