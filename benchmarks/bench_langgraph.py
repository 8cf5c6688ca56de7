"""LangGraph checkpointers side by side on a moto S3 server: s3ckpt's S3ckptSaver,
langgraph-checkpoint-objectstorage, langgraph-checkpoint-s3 and InMemorySaver.

    python benchmarks/bench_langgraph.py
    python benchmarks/bench_langgraph.py --invokes 50 --big-mib 1

A three-node StateGraph (a -> b -> c, each adding to a counter) is invoked ``--invokes`` times on
distinct threads with each saver, twice: with a small state, and with a ``--big-mib`` MiB text
channel set in the input and never changed. Measured per saver: checkpoints per second (puts
counted by a wrapper around the saver; each S3 saver runs in its own child process, so it does not
share a GIL with the in-process moto server), S3 requests per super-step (every request the server saw,
reads included, divided by the number of checkpoints) and bytes stored per checkpoint (the sizes
of every object the saver left in its prefix, divided by the number of checkpoints).

The peers are installed by this script into virtual environments under /var/tmp, never as
dependencies of s3ckpt. langgraph-checkpoint-objectstorage installs beside current LangGraph, so it
goes into ``--venv`` (created with --system-site-packages, so it also sees this checkout's s3ckpt
and LangGraph) and the script runs itself again with that interpreter. langgraph-checkpoint-s3
0.1.3 calls ``serde.dumps``, which langgraph-checkpoint 4 removed, so it gets its own environment
(``--s3-venv``: langgraph 0.6, langgraph-checkpoint 2.1) and runs in a child process that
brackets its timed loop (READY / GO / its result as JSON) against the same moto server.

Targets: S3ckptSaver makes at least 1.5x the checkpoints per second of the best S3 peer, at most 2
requests per super-step, and with the unchanged big channel stores at most 10% of the bytes per
checkpoint of the peers.
"""

from __future__ import annotations

import argparse
import operator
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import _common as c

PEERS = ("langgraph-checkpoint-objectstorage[s3]==0.1.15",)
S3_PEER = ("langgraph==0.6.*", "langgraph-checkpoint>=2.1,<3", "langgraph-checkpoint-s3==0.1.3")
DEFAULT_VENV = "/var/tmp/s3ckpt-bench-langgraph"
DEFAULT_S3_VENV = "/var/tmp/s3ckpt-bench-langgraph-s3"
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
SPEED_TARGET = 1.5
REQUESTS_TARGET = 2.0
BYTES_TARGET = 0.10
S3CKPT = "s3ckpt S3ckptSaver"
OBJECTSTORAGE = "langgraph-checkpoint-objectstorage"
CHECKPOINT_S3 = "langgraph-checkpoint-s3"
MEMORY = "InMemorySaver"


def ensure_venv(venv: Path, module: str, packages: tuple[str, ...], *, system: bool) -> Path:
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0:
        return python
    print(f"installing {' '.join(packages)} into {venv} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", *(["--system-site-packages"] if system else []), str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python


# -- the graph -------------------------------------------------------------------------------


class State(TypedDict):
    n: int
    steps: Annotated[list[str], operator.add]
    big: str


def build_graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    for name in ("a", "b", "c"):
        graph.add_node(name, lambda s, name=name: {"n": s["n"] + 1, "steps": [name]})
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("b", "c")
    graph.add_edge("c", END)
    return graph.compile(checkpointer=saver)


def big_text(size: int, seed: int = 7) -> str:
    """Text like a document or a tool result: words from a 4,000-word vocabulary (zstd ~3:1)."""
    rng = random.Random(seed)
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 10))) for _ in range(4000)]
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(vocabulary)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def counting(saver: Any) -> tuple[Any, list[int]]:
    """The saver with its put counted (a subclass made on the fly, so LangGraph sees the same type)."""
    puts = [0]
    cls = type(saver)

    class Counting(cls):  # type: ignore[valid-type, misc]
        def put(self, *args: Any, **kwargs: Any) -> Any:
            puts[0] += 1
            return super().put(*args, **kwargs)

        async def aput(self, *args: Any, **kwargs: Any) -> Any:
            puts[0] += 1
            return await super().aput(*args, **kwargs)

    saver.__class__ = Counting
    return saver, puts


# -- the sides -------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    scenario: str
    checkpoints: int
    seconds: float
    requests: int | None
    stored: int | None

    @property
    def per_second(self) -> float:
        return self.checkpoints / self.seconds if self.seconds else 0.0

    @property
    def requests_per_step(self) -> float | None:
        return None if self.requests is None else self.requests / self.checkpoints

    @property
    def bytes_per_checkpoint(self) -> float | None:
        return None if self.stored is None else self.stored / self.checkpoints


def make_saver(name: str, endpoint: str, bucket: str, prefix: str) -> tuple[Any, Callable[[], None]]:
    import boto3

    if name == S3CKPT:
        import s3ckpt
        from s3ckpt.integrations.langgraph import S3ckptSaver

        store = s3ckpt.open_store(f"s3://{bucket}/{prefix}", key=s3ckpt.generate_key(), endpoint_url=endpoint)
        return S3ckptSaver(store), store.close
    if name == OBJECTSTORAGE:
        from langgraph_checkpoint_objectstorage import ObjectStorageSaver

        saver = ObjectStorageSaver.from_conn_string(f"s3://{bucket}/{prefix}", client_kwargs={"endpoint_url": endpoint})
        return saver, lambda: None
    if name == CHECKPOINT_S3:
        from langgraph_checkpoint_s3 import S3CheckpointSaver

        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        return S3CheckpointSaver(bucket_name=bucket, prefix=f"{prefix}/", s3_client=client), client.close
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver(), lambda: None


def stored_bytes(endpoint: str, bucket: str, prefix: str) -> int:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        total += sum(obj["Size"] for obj in page.get("Contents", []))
    return total


def run_side(name: str, scenario: str, server: Any, bucket: str, invokes: int, big: str) -> Result:
    prefix = f"{name.split()[0]}-{scenario}-{uuid.uuid4().hex[:8]}"
    saver, close = make_saver(name, server.endpoint_url, bucket, prefix)
    saver, puts = counting(saver)
    app = build_graph(saver)
    app.invoke({"n": 0, "steps": [], "big": big}, {"configurable": {"thread_id": "warm-up"}})  # imports, connections
    puts[0] = 0
    server.log.reset()
    start = time.perf_counter()
    for i in range(invokes):
        out = app.invoke({"n": 0, "steps": [], "big": big}, {"configurable": {"thread_id": f"thread-{i}"}})
        assert out["n"] == 3, out
    seconds = time.perf_counter() - start
    requests = server.log.total
    close()
    on_s3 = name != MEMORY
    stored = stored_bytes(server.endpoint_url, bucket, prefix) if on_s3 else None
    return Result(name, scenario, puts[0], seconds, requests if on_s3 else None, stored)


def side_child(args: argparse.Namespace) -> int:
    """One S3 saver in a child process: warm up, say READY, wait for GO, run, report as JSON."""
    import json

    saver, close = make_saver(args.side, args.endpoint, args.bucket, args.prefix)
    saver, puts = counting(saver)
    app = build_graph(saver)
    big = big_text(int(args.big_mib * c.MiB)) if args.big_mib else ""
    app.invoke({"n": 0, "steps": [], "big": big}, {"configurable": {"thread_id": "warm-up"}})
    puts[0] = 0
    print("READY", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    for i in range(args.invokes):
        out = app.invoke({"n": 0, "steps": [], "big": big}, {"configurable": {"thread_id": f"thread-{i}"}})
        assert out["n"] == 3, out
    seconds = time.perf_counter() - start
    close()
    print(json.dumps({"puts": puts[0], "seconds": seconds}), flush=True)
    return 0


def run_child(side: str, python: str, scenario: str, server: Any, bucket: str, args: argparse.Namespace) -> Result:
    """Each S3 saver runs in a child process, so none shares the moto server's GIL."""
    import json

    prefix = f"{side.split()[0]}-{scenario}-{uuid.uuid4().hex[:8]}"
    argv = [python, __file__, "--side-child", side, "--endpoint", server.endpoint_url, "--bucket", bucket]
    argv += ["--prefix", prefix, "--invokes", str(args.invokes), "--big-mib", str(args.big_mib if scenario == "big" else 0)]
    env = {**os.environ, **FAKE_AWS, "PYTHONPATH": str(c.BENCH_DIR)}
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdin is not None
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip() == "READY", line
    server.log.reset()
    child.stdin.write("GO\n")
    child.stdin.flush()
    report = json.loads(child.stdout.readline())
    requests = server.log.total
    assert child.wait() == 0
    stored = stored_bytes(server.endpoint_url, bucket, prefix)
    return Result(side, scenario, report["puts"], report["seconds"], requests, stored)


def inner(args: argparse.Namespace) -> int:
    import boto3

    from s3ckpt.testing import MotoServer

    os.environ.update(FAKE_AWS)
    big = big_text(int(args.big_mib * c.MiB))
    sides = [S3CKPT, OBJECTSTORAGE, CHECKPOINT_S3, MEMORY]
    results: list[Result] = []
    with MotoServer() as server:
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1").create_bucket(Bucket=bucket)
        for scenario, payload in (("small", ""), ("big", big)):
            for side in sides:
                if side != MEMORY:
                    python = args.s3_python if side == CHECKPOINT_S3 else sys.executable
                    results.append(run_child(side, python, scenario, server, bucket, args))
                else:
                    results.append(run_side(side, scenario, server, bucket, args.invokes, payload))
                r = results[-1]
                print(f"  {scenario:5} {side:36} {r.per_second:8.1f} checkpoints/s", flush=True)
    print()
    print(
        f"{args.invokes} invokes of a three-node StateGraph on distinct threads, per saver; moto server "
        f"(in-process, loopback); big = a {args.big_mib:g} MiB text channel set in the input and never changed"
    )
    print(c.library_note())
    print(c.machine_note())
    print()
    rows = []
    for r in results:
        rows.append(
            [
                r.name,
                r.scenario,
                r.checkpoints,
                f"{r.per_second:.1f}",
                "-" if r.requests_per_step is None else f"{r.requests_per_step:.2f}",
                "-" if r.bytes_per_checkpoint is None else c.fmt_bytes(r.bytes_per_checkpoint),
            ]
        )
    c.print_table(["saver", "state", "checkpoints", "checkpoints/s", "S3 requests/super-step", "bytes/checkpoint"], rows)
    print()
    by = {(r.name, r.scenario): r for r in results}
    verdicts = c.Verdicts()
    for scenario in ("small", "big"):
        ours = by[(S3CKPT, scenario)]
        best = max((by[(p, scenario)] for p in (OBJECTSTORAGE, CHECKPOINT_S3)), key=lambda r: r.per_second)
        verdicts.check(
            f"checkpoints/s ({scenario} state)",
            ours.per_second >= SPEED_TARGET * best.per_second,
            f"{ours.per_second:.1f} vs {best.name} {best.per_second:.1f}: {c.fmt_ratio(ours.per_second, best.per_second)} "
            f"(target >= {SPEED_TARGET}x)",
        )
        assert ours.requests_per_step is not None
        verdicts.check(
            f"S3 requests per super-step ({scenario} state)",
            ours.requests_per_step <= REQUESTS_TARGET,
            f"{ours.requests_per_step:.2f} (target <= {REQUESTS_TARGET:g}; every request the server saw, reads included)",
        )
    ours_big = by[(S3CKPT, "big")].bytes_per_checkpoint
    assert ours_big is not None
    for peer in (OBJECTSTORAGE, CHECKPOINT_S3):
        theirs = by[(peer, "big")].bytes_per_checkpoint
        assert theirs is not None
        verdicts.check(
            f"bytes per checkpoint with the unchanged big channel vs {peer}",
            ours_big <= BYTES_TARGET * theirs,
            f"{c.fmt_bytes(ours_big)} vs {c.fmt_bytes(theirs)}: {ours_big / theirs:.1%} (target <= {BYTES_TARGET:.0%})",
        )
    return verdicts.summary()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--invokes", type=int, default=50)
    parser.add_argument("--big-mib", type=float, default=1.0)
    parser.add_argument("--venv", default=DEFAULT_VENV)
    parser.add_argument("--s3-venv", default=DEFAULT_S3_VENV)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--s3-python", help=argparse.SUPPRESS)
    parser.add_argument("--side-child", help=argparse.SUPPRESS)
    for hidden in ("--endpoint", "--bucket", "--prefix"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side_child:
        args.side = args.side_child
        return side_child(args)
    if args.inner:
        return inner(args)
    python = ensure_venv(Path(args.venv), "langgraph_checkpoint_objectstorage", PEERS, system=True)
    s3_python = ensure_venv(Path(args.s3_venv), "langgraph_checkpoint_s3", S3_PEER, system=False)
    argv = [str(python), __file__, "--inner", "--invokes", str(args.invokes), "--big-mib", str(args.big_mib)]
    argv += ["--s3-python", str(s3_python)]
    return subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(c.BENCH_DIR)}).returncode


if __name__ == "__main__":
    sys.exit(main())
