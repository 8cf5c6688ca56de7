"""A small StateGraph for the LangGraph saver tests, runnable as a child process:

    python -m tests.langgraph_workload STORE_URL THREAD_ID [--stall-at NODE --marker PATH]

The key comes from $S3CKPT_KEY. With --stall-at, the node of that name creates MARKER and sleeps
until the process is killed. The final state is printed as JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import operator
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

NODES = ("a", "b", "c", "d")


class State(TypedDict):
    n: int
    visited: Annotated[list[str], operator.add]


def build(
    checkpointer: Any, *, stall_at: str | None = None, marker: Path | None = None, delay: float = 0.0
) -> CompiledStateGraph[Any]:
    graph = StateGraph(State)

    def node(name: str) -> Any:
        def run(state: State) -> dict[str, Any]:
            if name == stall_at:
                assert marker is not None
                marker.write_text(name)
                time.sleep(600)
            if delay:
                time.sleep(delay)
            return {"n": state["n"] * 2 + len(name), "visited": [name]}

        return run

    for name in NODES:
        graph.add_node(name, node(name))
    graph.add_edge(START, NODES[0])
    for first, second in itertools.pairwise(NODES):
        graph.add_edge(first, second)
    graph.add_edge(NODES[-1], END)
    return graph.compile(checkpointer=checkpointer)


def main() -> None:
    import s3ckpt
    from s3ckpt.integrations.langgraph import S3ckptSaver

    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("thread")
    parser.add_argument("--stall-at")
    parser.add_argument("--marker", type=Path)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    with s3ckpt.open_store(args.url) as store:
        app = build(S3ckptSaver(store), stall_at=args.stall_at, marker=args.marker)
        config = {"configurable": {"thread_id": args.thread}}
        result = app.invoke(None if args.resume else {"n": 1, "visited": []}, config, durability="sync")
        print(json.dumps(result))


if __name__ == "__main__":
    main()
