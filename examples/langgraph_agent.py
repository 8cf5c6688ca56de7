"""A small LangGraph agent checkpointed by s3ckpt on the embedded default (a local directory).

    pip install -e ".[langgraph]"
    python examples/langgraph_agent.py

A planner node splits a task into steps, a worker node does one step per turn (looping until the
plan is done), and a reviewer summarises. Every super-step is a commit to the thread's s3ckpt run,
encrypted and content-addressed; a second saver (another process, in effect) reads the thread back
with its whole history. No network and no model: the "tools" are plain functions.
"""

from __future__ import annotations

import operator
import tempfile
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

import s3ckpt
from s3ckpt.integrations.langgraph import S3ckptSaver


class AgentState(TypedDict):
    task: str
    plan: list[str]
    done: Annotated[list[str], operator.add]
    summary: str


def planner(state: AgentState) -> dict[str, Any]:
    return {"plan": [f"{verb} {state['task']}" for verb in ("research", "draft", "check")]}


def worker(state: AgentState) -> dict[str, Any]:
    step = state["plan"][len(state["done"])]
    return {"done": [f"{step}: ok"]}


def more_work(state: AgentState) -> str:
    return "worker" if len(state["done"]) < len(state["plan"]) else "reviewer"


def reviewer(state: AgentState) -> dict[str, Any]:
    return {"summary": f"{len(state['done'])} steps done for {state['task']!r}"}


def build(saver: S3ckptSaver) -> Any:
    graph = StateGraph(AgentState)
    graph.add_node("planner", planner)
    graph.add_node("worker", worker)
    graph.add_node("reviewer", reviewer)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "worker")
    graph.add_conditional_edges("worker", more_work, ["worker", "reviewer"])
    graph.add_edge("reviewer", END)
    return graph.compile(checkpointer=saver)


def main() -> None:
    key = s3ckpt.generate_key()
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / ".s3ckpt")  # what open_store() uses by default is ./.s3ckpt
        config = {"configurable": {"thread_id": "refund-42"}}
        with s3ckpt.open_store(url, key=key) as store:
            result = build(S3ckptSaver(store)).invoke({"task": "the refund email", "plan": [], "done": []}, config)
            print("result:", result["summary"])
        with s3ckpt.open_store(url, key=key) as store:  # a fresh saver: what another host would see
            app = build(S3ckptSaver(store))
            print("state read back:", app.get_state(config).values["summary"])
            for snapshot in app.get_state_history(config):
                print(f"  step {snapshot.metadata['step']:>2}  next={snapshot.next}")


if __name__ == "__main__":
    main()
