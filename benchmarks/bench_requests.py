"""S3 requests per small commit and per cold ``latest()``, counted at a moto server.

    python benchmarks/bench_requests.py
    python benchmarks/bench_requests.py --commits 200 --loads 50

The moto server (s3ckpt.testing.MotoServer) runs in this process and counts every request that
reaches it, by method and by the kind of key (log record, HEAD pointer, pack, config, key file).
Each client runs in its own child process, so its peak RSS is its own and it does not share a GIL
with the server. The child brackets every operation with BEGIN/END lines on a pipe; the server's
counters are reset at BEGIN and read at END, so each operation is charged exactly its requests.

Sides: s3ckpt (open_store on s3://, claim, commit, latest) and a naive baseline that keeps one JSON
object per run with boto3: put_object per commit, get_object per load (last writer wins, no
history, no encryption, no fencing).

Targets: a small commit makes at most 1 PUT on its critical path (the log record; the HEAD
pointer is written after the commit point) and at most 2 requests in total; a cold latest()
(fresh store object, counters reset after open_store) makes at most 3 requests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import parse_qs

import _common as c

FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
REGION = "us-east-1"
COMMIT = "commit (small state)"
OPEN = "open_store (existing)"
LATEST = "cold latest()"
ARTIFACT_COMMIT = "commit (state + 4 KiB artifact)"
ARTIFACT_LOAD = "cold latest() + read artifact"
CRITICAL_PUT_TARGET = 1
COMMIT_TOTAL_TARGET = 2
LATEST_TOTAL_TARGET = 3


# -- the client side (child process) -----------------------------------------------------------


class Bracket:
    """The child's end of the pipe: BEGIN/END around each operation, waiting for the server's ack."""

    def __init__(self, out: IO[str], inp: IO[str]) -> None:
        self.out, self.inp = out, inp

    def _send(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()
        if self.inp.readline().strip() != "GO":
            raise SystemExit("benchmark parent went away")

    @contextmanager
    def op(self, label: str) -> Iterator[None]:
        self._send(f"BEGIN {label}")
        start = time.perf_counter()
        yield
        self._send(f"END {(time.perf_counter() - start) * 1000:.3f} {label}")

    def done(self) -> None:
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self.out.write("DONE " + json.dumps({"maxrss": maxrss}) + "\n")
        self.out.flush()


def small_state(step: int) -> dict[str, Any]:
    return {"step": step, "loss": 1.0 / (step + 1), "cursor": f"shard-{step % 7}/offset-{step * 4096}"}


def s3ckpt_client(args: argparse.Namespace, bracket: Bracket) -> None:
    import s3ckpt

    url, key = f"s3://{args.bucket}/s3ckpt", s3ckpt.generate_key()
    options: dict[str, Any] = {"endpoint_url": args.endpoint, "region": REGION}
    with bracket.op("open_store (create)"):
        store = s3ckpt.open_store(url, key=key, **options)
    with bracket.op("claim"):
        writer = store.run("bench").claim()
    for step in range(args.commits):
        with bracket.op(COMMIT):
            writer.commit(small_state(step))
    for _ in range(args.loads):
        with bracket.op(OPEN):
            reader = s3ckpt.open_store(url, key=key, create=False, **options)
        with bracket.op(LATEST):
            latest = reader.run("bench").latest()
        reader.close()
        if latest is None or latest.state != small_state(args.commits - 1):
            raise SystemExit(f"latest() returned {latest!r}, not the last commit")
    for step in range(args.commits, args.commits + args.artifact_commits):
        artifact = os.urandom(4096)  # a new artifact each time: no dedupe
        with bracket.op(ARTIFACT_COMMIT):
            writer.commit(small_state(step), artifacts={"extra.bin": artifact})
    for _ in range(args.artifact_commits):
        with bracket.op(OPEN):
            reader = s3ckpt.open_store(url, key=key, create=False, **options)
        with bracket.op(ARTIFACT_LOAD):
            latest = reader.run("bench").latest()
            data = latest.read_artifact("extra.bin") if latest is not None else b""
        reader.close()
        if data != artifact:
            raise SystemExit("artifact did not round-trip")
    store.close()


def naive_client(args: argparse.Namespace, bracket: Bracket) -> None:
    import boto3

    def client() -> Any:
        return boto3.client("s3", endpoint_url=args.endpoint, region_name=REGION)

    s3, key = client(), "naive/bench/state.json"
    for step in range(args.commits):
        with bracket.op(COMMIT):
            s3.put_object(Bucket=args.bucket, Key=key, Body=json.dumps(small_state(step)).encode())
    for _ in range(args.loads):
        with bracket.op(OPEN):
            s3 = client()
        with bracket.op(LATEST):
            state = json.loads(s3.get_object(Bucket=args.bucket, Key=key)["Body"].read())
        if state != small_state(args.commits - 1):
            raise SystemExit(f"naive load returned {state!r}")
    for step in range(args.commits, args.commits + args.artifact_commits):
        artifact = os.urandom(4096)
        with bracket.op(ARTIFACT_COMMIT):
            s3.put_object(Bucket=args.bucket, Key="naive/bench/extra.bin", Body=artifact)
            s3.put_object(Bucket=args.bucket, Key=key, Body=json.dumps(small_state(step)).encode())
    for _ in range(args.artifact_commits):
        with bracket.op(OPEN):
            s3 = client()
        with bracket.op(ARTIFACT_LOAD):
            json.loads(s3.get_object(Bucket=args.bucket, Key=key)["Body"].read())
            data = s3.get_object(Bucket=args.bucket, Key="naive/bench/extra.bin")["Body"].read()
        if data != artifact:
            raise SystemExit("naive artifact did not round-trip")


CLIENTS: dict[str, Callable[[argparse.Namespace, Bracket], None]] = {"s3ckpt": s3ckpt_client, "naive": naive_client}


def child_main(args: argparse.Namespace) -> None:
    proto = os.fdopen(os.dup(1), "w")
    sys.stdout = sys.stderr  # nothing but the protocol on the pipe
    bracket = Bracket(proto, sys.stdin)
    CLIENTS[args.child](args, bracket)
    bracket.done()


# -- the server side (this process) ------------------------------------------------------------


def key_kind(path: str, query: str) -> str:
    """What an S3 request names, for telling the commit's critical path from the HEAD hint."""
    prefix = parse_qs(query).get("prefix")
    if prefix is not None or "list-type" in query:
        return f"list {_key_kind(prefix[0]) if prefix else 'bucket'}"
    return _key_kind(path)


def _key_kind(key: str) -> str:
    if key.endswith("/HEAD"):
        return "HEAD"
    markers = (("/log/", "log"), ("/packs/", "pack"), ("/blobs/", "blob"), ("/keys/", "keys"), ("/runs/", "runs"))
    for marker, kind in markers:
        if marker in key or key.startswith(marker[1:]):
            return kind
    return "config" if key.endswith("config") else "other"


@dataclass
class OpStats:
    """Every measured occurrence of one operation label."""

    totals: list[int] = field(default_factory=list)
    critical_puts: list[int] = field(default_factory=list)
    methods: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    bytes_in: int = 0
    bytes_out: int = 0
    millis: list[float] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.totals)

    def mean(self) -> float:
        return sum(self.totals) / self.n if self.n else 0.0

    def per_op(self, counter: Counter[str]) -> str:
        return ", ".join(f"{name} {count / self.n:g}" for name, count in sorted(counter.items())) or "none"


@dataclass
class SideResult:
    ops: dict[str, OpStats]
    maxrss: int
    unattributed: int


class Recorder:
    """Attributes the server's requests to the operation the child is in."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.kinds: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()
        server.inject = self._observe

    def _observe(self, info: Any) -> None:
        with self.lock:
            self.kinds[(info.method, key_kind(info.path, info.query))] += 1

    def reset(self) -> None:
        self.server.log.reset()
        with self.lock:
            self.kinds.clear()

    def charge(self, stats: OpStats, millis: float) -> None:
        log = self.server.log
        with log.lock:
            counts = Counter(log.counts)
            bytes_in, bytes_out = log.bytes_in, log.bytes_out
        with self.lock:
            kinds = Counter(self.kinds)
        stats.totals.append(sum(counts.values()))
        stats.critical_puts.append(sum(n for (method, kind), n in kinds.items() if method == "PUT" and kind != "HEAD"))
        stats.methods.update({kind: n for (_method, kind), n in counts.items()})
        stats.kinds.update({_kind_label(method, kind): n for (method, kind), n in kinds.items()})
        stats.bytes_in += bytes_in
        stats.bytes_out += bytes_out
        stats.millis.append(millis)


def _kind_label(method: str, kind: str) -> str:
    return f"LIST {kind.removeprefix('list ')}" if kind.startswith("list ") else f"{method} {kind}"


def run_side(side: str, args: argparse.Namespace, server: Any, bucket: str) -> SideResult:
    recorder = Recorder(server)
    argv = [sys.executable, __file__, "--child", side, "--endpoint", server.endpoint_url, "--bucket", bucket]
    argv += ["--commits", str(args.commits), "--loads", str(args.loads), "--artifact-commits", str(args.artifact_commits)]
    ops: dict[str, OpStats] = defaultdict(OpStats)
    unattributed = 0
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        recorder.reset()
        for line in proc.stdout:
            word, _, rest = line.rstrip("\n").partition(" ")
            if word == "DONE":
                return SideResult(dict(ops), json.loads(rest)["maxrss"], unattributed)
            if word == "BEGIN":
                unattributed += server.log.total
                recorder.reset()
            elif word == "END":
                millis, _, label = rest.partition(" ")
                recorder.charge(ops[label], float(millis))
                recorder.reset()
            proc.stdin.write("GO\n")
            proc.stdin.flush()
    raise RuntimeError(f"the {side} client exited {proc.returncode} before finishing (its stderr is above)")


# -- report ------------------------------------------------------------------------------------

ROW_ORDER = ("open_store (create)", "claim", COMMIT, OPEN, LATEST, ARTIFACT_COMMIT, ARTIFACT_LOAD)


def _ms(stats: OpStats | None) -> str:
    if stats is None or not stats.n:
        return "-"
    ordered = sorted(stats.millis)
    return f"{sum(ordered) / len(ordered):.1f} / {ordered[len(ordered) // 2]:.1f}"


def _per_op_bytes(stats: OpStats | None) -> str:
    if stats is None or not stats.n:
        return "-"
    return f"{c.fmt_bytes(stats.bytes_in / stats.n)} / {c.fmt_bytes(stats.bytes_out / stats.n)}"


def _method_row(label: str, ours: SideResult, naive: SideResult) -> list[str]:
    mine, theirs = ours.ops[label], naive.ops.get(label)
    return [label, mine.per_op(mine.methods), mine.per_op(mine.kinds), theirs.per_op(theirs.methods) if theirs else "-"]


def print_tables(ours: SideResult, naive: SideResult) -> None:
    headers = ["operation", "n", "s3ckpt req/op", "max", "naive req/op", "ratio", "s3ckpt up/down per op",
               "naive up/down per op", "s3ckpt ms mean/p50", "naive ms mean/p50"]  # fmt: skip
    rows = []
    for label in ROW_ORDER:
        mine, theirs = ours.ops.get(label), naive.ops.get(label)
        if mine is None:
            continue
        theirs_mean = theirs.mean() if theirs else 0.0
        rows.append([label, mine.n, f"{mine.mean():.2f}", max(mine.totals), f"{theirs_mean:.2f}" if theirs else "-",
                     c.fmt_ratio(mine.mean(), theirs_mean) if theirs else "-", _per_op_bytes(mine), _per_op_bytes(theirs),
                     _ms(mine), _ms(theirs)])  # fmt: skip
    c.print_table(headers, rows)
    print("\nper-method requests per operation, counted at the server (s3ckpt | naive):")
    c.print_table(
        ["operation", "s3ckpt by method", "s3ckpt by key", "naive by method"],
        [_method_row(label, ours, naive) for label in ROW_ORDER if label in ours.ops],
    )
    print(f"\npeak RSS of the client process: s3ckpt {c.fmt_bytes(ours.maxrss)}, naive boto3 {c.fmt_bytes(naive.maxrss)}")
    if ours.unattributed or naive.unattributed:
        print(f"WARNING: requests outside any operation: s3ckpt {ours.unattributed}, naive {naive.unattributed}")


def verdicts(ours: SideResult) -> int:
    v = c.Verdicts()
    commit, latest = ours.ops[COMMIT], ours.ops[LATEST]
    print()
    v.check(
        f"small commit: <= {CRITICAL_PUT_TARGET} PUT on the critical path",
        max(commit.critical_puts) <= CRITICAL_PUT_TARGET,
        f"max {max(commit.critical_puts)}, mean {sum(commit.critical_puts) / commit.n:.2f} PUTs (HEAD excluded) "
        f"over {commit.n} commits",
    )
    v.check(
        f"small commit: <= {COMMIT_TOTAL_TARGET} requests including the HEAD pointer",
        max(commit.totals) <= COMMIT_TOTAL_TARGET,
        f"max {max(commit.totals)}, mean {commit.mean():.2f} over {commit.n} commits",
    )
    v.check(
        f"cold latest(): <= {LATEST_TOTAL_TARGET} requests after open_store",
        max(latest.totals) <= LATEST_TOTAL_TARGET,
        f"max {max(latest.totals)}, mean {latest.mean():.2f} over {latest.n} fresh stores",
    )
    return v.summary()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=50, help="small commits to measure (default 50)")
    parser.add_argument("--loads", type=int, default=20, help="cold latest() calls, each on a fresh store (default 20)")
    parser.add_argument("--artifact-commits", type=int, default=5, help="commits with a 4 KiB artifact (default 5)")
    parser.add_argument("--child", choices=sorted(CLIENTS), help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.commits < 1 or args.loads < 1:
        parser.error("--commits and --loads must be at least 1")
    return args


def main() -> int:
    args = parse_args()
    os.environ.update(FAKE_AWS)
    if args.child:
        child_main(args)
        return 0
    import boto3

    from s3ckpt.testing import MotoServer

    with MotoServer() as server:
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=server.endpoint_url, region_name=REGION).create_bucket(Bucket=bucket)
        print(f"moto server at {server.endpoint_url}, bucket {bucket}; {args.commits} commits, {args.loads} cold loads",
              flush=True)  # fmt: skip
        ours = run_side("s3ckpt", args, server, bucket)
        naive = run_side("naive", args, server, bucket)
    print(f"\nbench_requests: {c.machine_note()}; {c.library_note()}\n")
    print_tables(ours, naive)
    return verdicts(ours)


if __name__ == "__main__":
    sys.exit(main())
