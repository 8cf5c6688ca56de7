"""A worker process for the two-host LangGraph tests: one store, one S3ckptSaver, commands on stdin.

    python -m tests.langgraph_race STORE_URL ENDPOINT_URL SIDE_EFFECTS_FILE

The key comes from $S3CKPT_KEY. Each line of stdin is a JSON command, answered by one JSON line on
stdout:

- ``{"op": "start", "graph": G, "thread": T}``: run graph G from its input until it stops (an
  interrupt): ``{"checkpoint_id": ...}`` of the checkpoint it stopped at.
- ``{"op": "read", "thread": T, "checkpoint_id": X}``: the saver's ``get_tuple`` of X.
- ``{"op": "resume", "graph": G, "thread": T, "answer": A, "checkpoint_id": X | null,
  "barrier": DIR | null, "parties": N, "fail": [node, ...]}``: ``ainvoke(Command(resume=A))`` (the
  async API, LangGraph's default durability), at checkpoint X when given. With a barrier, the
  saver's first read waits until N workers have made theirs (all resume the same checkpoint).
  Nodes named in ``fail`` raise. ``{"ok": values}`` (the final state, or where it stopped at an
  interrupt) or ``{"error": class name}``.

- ``{"op": "state", "graph": G, "thread": T}``: ``get_state`` of the thread's latest checkpoint
  and its history: ``{"checkpoint_id", "values", "next", "history": [[id, parent id], ...]}``,
  ``list``'s order (newest first).
- ``{"op": "prune", "thread": T}``: ``prune([T])`` (keep_latest): ``{"ok": true}``.

Graphs: ``interview``, START -> [ask, side] -> record: ``ask`` interrupts and stores the answer,
``side`` finishes in the first super-step. ``fan``, START -> [t1, t2] -> join, compiled with an
interrupt before t1 and t2; t1 appends its process id to SIDE_EFFECTS_FILE (an effect that must
happen once), t2 waits until t1 has run (on any host) and may fail. ``approvals``, START -> plan ->
approve1 -> act1 -> approve2 -> act2: each approve interrupts, each act appends ``<name> <pid>`` to
SIDE_EFFECTS_FILE.

With $LANGGRAPH_CLOCK_SKEW (seconds, may be negative), LangGraph's checkpoint ids (uuid6) are made
from a clock that far off the host's: a host whose clock is behind.

``Worker`` (used by the tests) runs this module as a child process and talks to it.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

import s3ckpt
from s3ckpt.integrations.langgraph import S3ckptSaver


class Interview(TypedDict, total=False):
    answer: str
    log: Annotated[list[str], operator.add]


def interview(saver: Any) -> CompiledStateGraph[Any]:
    graph = StateGraph(Interview)

    def ask(state: Interview) -> dict[str, Any]:
        return {"answer": interrupt("what is the answer?")}

    def side(state: Interview) -> dict[str, Any]:
        return {"log": ["side"]}

    def record(state: Interview) -> dict[str, Any]:
        return {"log": [f"recorded {state['answer']}"]}

    graph.add_node("ask", ask)
    graph.add_node("side", side)
    graph.add_node("record", record)
    graph.add_edge(START, "ask")
    graph.add_edge(START, "side")
    graph.add_edge(["ask", "side"], "record")
    graph.add_edge("record", END)
    return graph.compile(checkpointer=saver)


class Fan(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def fan(saver: Any, effects: Path, fail: frozenset[str] = frozenset()) -> CompiledStateGraph[Any]:
    graph = StateGraph(Fan)

    def t1(state: Fan) -> dict[str, Any]:
        with effects.open("a") as fh:
            fh.write(f"t1 {os.getpid()}\n")
        return {"log": ["t1"]}

    def t2(state: Fan) -> dict[str, Any]:
        # t1 finishes first (here, or on the host that ran it before)
        deadline = time.monotonic() + 60
        while "t1 " not in effects.read_text():
            if time.monotonic() > deadline:
                raise TimeoutError("t1 never ran")
            time.sleep(0.01)
        time.sleep(0.2)  # and LangGraph has its writes
        if "t2" in fail:
            raise RuntimeError("t2 failed on purpose")
        return {"log": ["t2"]}

    def join(state: Fan) -> dict[str, Any]:
        return {"log": ["join"]}

    graph.add_node("t1", t1)
    graph.add_node("t2", t2)
    graph.add_node("join", join)
    graph.add_edge(START, "t1")
    graph.add_edge(START, "t2")
    graph.add_edge(["t1", "t2"], "join")
    graph.add_edge("join", END)
    return graph.compile(checkpointer=saver, interrupt_before=["t1", "t2"])


class Approvals(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def approvals(saver: Any, effects: Path) -> CompiledStateGraph[Any]:
    graph = StateGraph(Approvals)

    def plan(state: Approvals) -> dict[str, Any]:
        return {"log": ["planned"]}

    def approve(name: str) -> Any:
        def run(state: Approvals) -> dict[str, Any]:
            return {"log": [f"{name}:{interrupt(name)}"]}

        return run

    def act(name: str) -> Any:
        def run(state: Approvals) -> dict[str, Any]:
            with effects.open("a") as fh:  # the side effect that must happen once
                fh.write(f"{name} {os.getpid()}\n")
            return {"log": [name]}

        return run

    graph.add_node("plan", plan)
    graph.add_node("approve1", approve("approve1"))
    graph.add_node("act1", act("act1"))
    graph.add_node("approve2", approve("approve2"))
    graph.add_node("act2", act("act2"))
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "approve1")
    graph.add_edge("approve1", "act1")
    graph.add_edge("act1", "approve2")
    graph.add_edge("approve2", "act2")
    graph.add_edge("act2", END)
    return graph.compile(checkpointer=saver)


class BarrierSaver(S3ckptSaver):
    """A saver whose first read after ``arm`` waits until ``parties`` workers have read: every
    worker then resumes the same checkpoint, as hosts picking up one thread at once do."""

    barrier: tuple[Path, int] | None = None

    def arm(self, directory: Path, parties: int) -> None:
        self.barrier = (directory, parties)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        out = super().get_tuple(config)
        if self.barrier is not None:
            directory, parties = self.barrier
            self.barrier = None
            (directory / str(os.getpid())).touch()
            deadline = time.monotonic() + 60
            while len(list(directory.iterdir())) < parties:
                if time.monotonic() > deadline:
                    raise TimeoutError("the other workers never reached the barrier")
                time.sleep(0.001)
        return out


def _config(thread: str, checkpoint_id: str | None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread}
    if checkpoint_id:
        conf["checkpoint_ns"] = ""
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _graph(name: str, saver: S3ckptSaver, effects: Path, fail: frozenset[str] = frozenset()) -> CompiledStateGraph[Any]:
    if name == "approvals":
        return approvals(saver, effects)
    return interview(saver) if name == "interview" else fan(saver, effects, fail)


def handle(saver: BarrierSaver, effects: Path, cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd["op"]
    if op == "start":
        app = _graph(cmd["graph"], saver, effects)
        config = _config(cmd["thread"], None)
        app.invoke({"log": []}, config, durability="sync")
        return {"checkpoint_id": app.get_state(config).config["configurable"]["checkpoint_id"]}
    if op == "read":
        got = saver.get_tuple(_config(cmd["thread"], cmd["checkpoint_id"]))
        assert got is not None
        return {"pending": [[task, channel, repr(value)] for task, channel, value in got.pending_writes or []]}
    if op == "resume":
        app = _graph(cmd["graph"], saver, effects, frozenset(cmd.get("fail") or ()))
        if cmd.get("barrier"):
            saver.arm(Path(cmd["barrier"]), int(cmd["parties"]))
        try:
            out = asyncio.run(app.ainvoke(Command(resume=cmd["answer"]), _config(cmd["thread"], cmd.get("checkpoint_id"))))
        except Exception as exc:
            return {"error": type(exc).__name__, "message": str(exc)[:300]}
        # a graph stopped at an interrupt answers with "__interrupt__" too (not JSON): its values only
        return {"ok": {k: v for k, v in out.items() if k != "__interrupt__"}}
    if op == "state":
        app = _graph(cmd["graph"], saver, effects)
        config = _config(cmd["thread"], None)
        state = app.get_state(config)
        history = [
            [t.config["configurable"]["checkpoint_id"], (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")]
            for t in saver.list(config)
        ]
        return {
            "checkpoint_id": state.config["configurable"]["checkpoint_id"],
            "values": state.values,
            "next": list(state.next),
            "history": history,
        }
    if op == "prune":
        saver.prune([cmd["thread"]])
        return {"ok": True}
    raise ValueError(f"unknown op {op!r}")


def skew_checkpoint_ids(seconds: float) -> None:
    """Make LangGraph's checkpoint ids (uuid6 of time.time_ns) from a clock ``seconds`` off."""
    import langgraph.checkpoint.base.id as ids

    real = time.time_ns
    offset = int(seconds * 1e9)

    class Clock:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def time_ns(self) -> int:
            return real() + offset

    setattr(ids, "time", Clock())  # noqa: B010 - the module's name for the time module, replaced


class Worker:
    """A child process running this module: its own store and saver, commands on stdin."""

    def __init__(self, url: str, endpoint_url: str, key: str, effects: Path, *, clock_skew: float = 0.0) -> None:
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "S3CKPT_KEY": key, "PYTHONPATH": str(root), "LANGGRAPH_CLOCK_SKEW": str(clock_skew)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.langgraph_race", url, endpoint_url, str(effects)],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = int(self._read()["ready"])

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"worker exited with {self.proc.poll()}"
        out: dict[str, Any] = json.loads(line)
        return out

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        return self._read()

    def call(self, **cmd: Any) -> dict[str, Any]:
        self.send(**cmd)
        return self._read()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    url, endpoint, effects = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    skew = float(os.environ.get("LANGGRAPH_CLOCK_SKEW") or 0)
    if skew:
        skew_checkpoint_ids(skew)
    options: dict[str, Any] = {"endpoint_url": endpoint, "region": "us-east-1"} if endpoint else {}
    with s3ckpt.open_store(url, **options) as store:
        saver = BarrierSaver(store)
        print(json.dumps({"ready": os.getpid()}), flush=True)
        for line in sys.stdin:
            print(json.dumps(handle(saver, effects, json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
