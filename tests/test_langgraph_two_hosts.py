"""Two hosts on one LangGraph thread: two savers in two processes on moto's S3 server.

(a) A saver that already knows a checkpoint still reads the writes another host stored for it
since, so a graph resumed from that checkpoint by id does not run again what finished elsewhere.
(b) Two hosts resuming one interrupted checkpoint at once: the checkpoint's pending writes are
those its committed child was computed from, never the losing host's answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.types import ERROR, RESUME

import s3ckpt
from s3ckpt.integrations.langgraph import S3ckptSaver
from s3ckpt.testing.plugin import S3Bucket

from .langgraph_race import Worker, interview

#: LangGraph's task id for writes of no task (a Command's resume value)
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
#: Concurrent resumes of one checkpoint run until the losing host's writes landed in the order that
#: made them count before (17 of 20 trials on the old saver) RACES times, in at least MIN_TRIALS
#: trials and at most MAX_TRIALS.
RACES = 3
MIN_TRIALS = 6
MAX_TRIALS = 40


@pytest.fixture
def hosts(moto_s3: S3Bucket, tmp_path: Path) -> Iterator[tuple[Worker, Worker, s3ckpt.Store, Path]]:
    key = s3ckpt.generate_key()
    effects = tmp_path / "effects"
    effects.touch()
    with s3ckpt.open_store(moto_s3.url, key=key, endpoint_url=moto_s3.endpoint_url, region="us-east-1") as store:
        workers = [Worker(moto_s3.url, moto_s3.endpoint_url, key, effects) for _ in range(2)]
        try:
            yield workers[0], workers[1], store, effects
        finally:
            for w in workers:
                w.close()


def _config(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def test_resume_by_checkpoint_id_sees_the_tasks_another_host_finished(
    hosts: tuple[Worker, Worker, s3ckpt.Store, Path],
) -> None:
    a, b, _, effects = hosts
    # Host a runs the thread to the interrupt before t1 and t2: its saver knows checkpoint x.
    x = a.call(op="start", graph="fan", thread="fan")["checkpoint_id"]
    # Host b resumes x: t1 finishes (its effect happens), t2 fails, so x gets no child.
    got = b.call(op="resume", graph="fan", thread="fan", answer="go", fail=["t2"])
    assert got["error"] == "RuntimeError", got
    assert effects.read_text().splitlines() == [f"t1 {b.pid}"]
    # Host a resumes x by its id: t1's writes are read, not run again.
    got = a.call(op="resume", graph="fan", thread="fan", answer="go", checkpoint_id=x)
    assert got == {"ok": {"log": ["t1", "t2", "join"]}}, got
    assert effects.read_text().splitlines() == [f"t1 {b.pid}"]


def test_a_saver_that_knows_a_checkpoint_reads_writes_stored_since(
    hosts: tuple[Worker, Worker, s3ckpt.Store, Path],
) -> None:
    a, _, store, _ = hosts
    x = a.call(op="start", graph="fan", thread="known")["checkpoint_id"]
    reader = S3ckptSaver(store)
    before = reader.get_tuple(_config("known", x))
    assert before is not None
    assert before.pending_writes == []
    # Another process's saver stores writes for x: t1's output, t2's error.
    assert a.call(op="resume", graph="fan", thread="known", answer="go", fail=["t2"])["error"] == "RuntimeError"
    after = reader.get_tuple(_config("known", x))
    assert after is not None
    writes = [(channel, value) for _, channel, value in after.pending_writes or []]
    assert ("log", ["t1"]) in writes
    assert ERROR in [channel for channel, _ in writes]
    # the same as the writing host's own saver reads
    assert a.call(op="read", thread="known", checkpoint_id=x)["pending"] == [
        [task, channel, repr(value)] for task, channel, value in after.pending_writes or []
    ]


def _answers(writes: list[tuple[str, str, Any]]) -> set[str]:
    """Every answer a set of pending writes carries (resume values and the stored answer)."""
    found: set[str] = set()
    for _, channel, value in writes:
        if channel == RESUME:
            found.update(value if isinstance(value, list) else [value])
        elif channel == "answer":
            found.add(value)
    return found


def _child_of(saver: S3ckptSaver, thread: str, x: str) -> CheckpointTuple:
    children = [
        t
        for t in saver.list(_config(thread))
        if t.parent_config is not None and t.parent_config["configurable"]["checkpoint_id"] == x
    ]
    assert len(children) == 1, children
    return children[0]


def _loser_would_have_counted(saver: S3ckptSaver, thread: str, x: str) -> tuple[bool, bool]:
    """(whether the losing host stored writes for x at all, whether the rule before children named
    their writes, the first regular and the latest special write of a (task, idx) of any host,
    would have picked one of them over the winner's). Reads the saver's index of x."""
    lg = saver._log_of(thread, "")
    winner = cast(dict[str, Any], lg.records[max(lg.children[x])].state)["wr"]
    objects = sorted((lg.wobjs[k] for k in lg.writes.get(x, ())), key=lambda wo: (wo.t, wo.key))
    ran = {(wo.task, idx) for wo in objects if wo.writer == winner for idx, _, _ in wo.w}
    chosen: dict[tuple[str, int], str | None] = {}
    for wo in objects:
        for idx, _, _ in wo.w:
            if idx >= 0 and (wo.task, idx) in chosen:
                continue
            chosen[(wo.task, idx)] = wo.writer
    loser_wrote = any(wo.writer != winner and wo.task == NULL_TASK_ID for wo in objects)
    return loser_wrote, any(chosen[k] != winner for k in ran)


def test_concurrent_resumes_of_one_checkpoint_keep_the_winners_writes(
    hosts: tuple[Worker, Worker, s3ckpt.Store, Path], tmp_path: Path
) -> None:
    """Both hosts read x before either writes (a barrier after the saver's first read), then race.
    Trials go on until the losing host's writes landed in the order that used to count them
    (RACES times; it happens in most trials) and at least MIN_TRIALS ran."""
    a, b, store, _ = hosts
    races = trials = 0
    while trials < MIN_TRIALS or races < RACES:
        assert trials < MAX_TRIALS, f"the losing host's writes came in the telling order {races} times in {trials}"
        thread = f"race-{trials}"
        x = a.call(op="start", graph="interview", thread=thread)["checkpoint_id"]
        barrier = tmp_path / f"barrier-{trials}"
        barrier.mkdir()
        answers = {a.pid: f"answer-a-{trials}", b.pid: f"answer-b-{trials}"}
        for w in (a, b):
            w.send(op="resume", graph="interview", thread=thread, answer=answers[w.pid], barrier=str(barrier), parties=2)
        results = {w.pid: w.receive() for w in (a, b)}
        won = [pid for pid, r in results.items() if "ok" in r]
        assert len(won) == 1, results
        winner = won[0]
        loser = a.pid if winner == b.pid else b.pid
        assert results[loser]["error"] == "ConflictError", results
        assert results[winner]["ok"]["log"] == ["side", f"recorded {answers[winner]}"]

        saver = S3ckptSaver(store)
        assert _child_of(saver, thread, x).checkpoint["channel_values"]["answer"] == answers[winner]
        parent = saver.get_tuple(_config(thread, x))
        assert parent is not None
        assert _answers(parent.pending_writes or []) == {answers[winner]}, parent.pending_writes
        # get_state of x hands the graph the answer the run acted on
        state = interview(saver).get_state(_config(thread, x))
        assert [t.result for t in state.tasks if t.name == "ask"] == [{"answer": answers[winner]}], state.tasks
        for w in (a, b):  # each host, reading again, sees the same
            assert w.call(op="read", thread=thread, checkpoint_id=x)["pending"] == [
                [task, channel, repr(value)] for task, channel, value in parent.pending_writes or []
            ]
        loser_wrote, telling = _loser_would_have_counted(saver, thread, x)
        assert loser_wrote, "the losing host stored no writes for x: the race was not run"
        races += telling
        trials += 1
    print(f"concurrent resumes: {trials} trials, the loser's writes in the order that used to count them in {races}")
