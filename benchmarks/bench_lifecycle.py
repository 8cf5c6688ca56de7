"""Lifecycle: bounded storage under retention, gc's cost on S3, and verify --read-data; vs restic.

    python benchmarks/bench_lifecycle.py                               # 64 MiB, 200 commits (~5 min)
    python benchmarks/bench_lifecycle.py --size-mib 16 --commits 60    # ~2 min (restic: ~0.7 s per process)
    python benchmarks/bench_lifecycle.py --size-mib 16 --commits 20 --every 10 --gc-runs 20 --verify-mib 0   # ~45 s
    python benchmarks/bench_lifecycle.py --parts storage,verify        # skip the moto part

1. Bounded storage. One artifact of --size-mib, --commits versions, each overwriting one contiguous
   random 1% region with random bytes (one seeded sequence, applied identically by both tools).
   s3ckpt commits each version as bytes (``claim().commit(..., artifacts={"big": data})``) into a
   local-directory store; every --every commits (and after the last) it runs
   ``prune(keep_last=--keep-last)``, waits out the grace, then ``gc(grace=...)``. restic backs up
   the file after each change and runs ``forget --keep-last N --prune`` on the same schedule. At
   the end: stored bytes, on-disk size, the live set and their ratio. Target: s3ckpt's stored
   bytes <= 1.3x its live set. Both tools' last versions are checked equal (SHA-256).
2. gc on the moto server: --gc-runs runs of --gc-commits commits, each with a fresh small artifact
   (one pack per commit); a quarter of the runs deleted (delete_run), half pruned to half their
   checkpoints, a quarter left alone: half the packs are garbage. ``gc`` is timed and its requests
   counted at the server by method and per 1,000 packs listed; then a second gc (nothing should be left).
   A verify afterwards must find no problem and no orphan.
3. verify with read_data against ``restic check --read-data``: on part 1's repositories, and on a
   fresh --verify-mib file saved once by each tool.

The grace wait. gc deletes only what is older than its grace (storage clock: a pack's mtime on a
local directory), and a prune's tombstones keep their data for the grace. gc refuses a grace
shorter than twice the store's commit_deadline, so the store is created with a short deadline
(--commit-deadline, 1 s) and after each prune the benchmark sleeps the grace before gc: the
scheduled maintenance whose grace has passed. No clock is faked. The sleep is reported and is not
in any timing. s3ckpt's times are the library calls timed inside its process (a worker calls
s3ckpt in-process); restic's are its processes' wall times (restic is a process per operation).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import parse_qs

import _common as c

STORED_TARGET = 1.3
RUN = "lifecycle"
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
REGION = "us-east-1"
STORE_PREFIX = "s3ckpt"
#: After a prune, sleep this much beyond the grace: mtimes are coarser than perf_counter.
GRACE_MARGIN = 0.1
#: S3's (and moto's) LastModified has whole seconds, so ages there read up to 1 s short.
S3_CLOCK_STEP = 1.0
#: Threads building the gc store: commits to moto are latency-bound, one run per thread.
BUILDERS = 8
METHODS = ("LIST", "GET", "HEAD", "PUT", "DELETE")
PARTS = ("storage", "gc", "verify")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=64, help="artifact size in MiB for part 1 (default 64)")
    parser.add_argument("--commits", type=int, default=200, help="versions committed / backed up in part 1 (default 200)")
    parser.add_argument("--every", type=int, default=20, help="prune and gc every N commits, and after the last (default 20)")
    parser.add_argument("--keep-last", type=int, default=5, help="checkpoints / snapshots kept by each prune (default 5)")
    parser.add_argument(
        "--commit-deadline", type=float, default=1.0, help="the s3ckpt stores' commit_deadline in seconds (default 1)"
    )
    parser.add_argument("--grace", type=float, default=0.0, help="gc grace in seconds (default 2x the deadline + 0.5)")
    parser.add_argument("--gc-runs", type=int, default=100, help="runs in the part 2 store (default 100)")
    parser.add_argument("--gc-commits", type=int, default=10, help="commits (packs) per run in part 2 (default 10)")
    parser.add_argument("--gc-artifact", type=int, default=4096, help="artifact bytes per part 2 commit (default 4096)")
    parser.add_argument(
        "--verify-mib", type=int, default=-1, help="fresh file for part 3 in MiB (default 8x --size-mib; 0: part 1 only)"
    )
    parser.add_argument("--parts", default=",".join(PARTS), help=f"which parts to run (default {','.join(PARTS)})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and of the version sequence (default 0)")
    parser.add_argument("--workdir", default=None, help="where to put the data and the repositories (default /var/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    # The children: this script run again, one role each (argparse.SUPPRESS keeps --help short).
    parser.add_argument("--child", choices=("storage", "gc", "verify"), help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.size_mib < 1 or args.commits < 1 or args.every < 1 or args.keep_last < 1:
        parser.error("--size-mib, --commits, --every and --keep-last must be at least 1")
    if args.gc_runs < 4 or args.gc_commits < 2:
        parser.error("--gc-runs must be at least 4 and --gc-commits at least 2 (a quarter deleted, half pruned)")
    if args.commit_deadline <= 0:
        parser.error("--commit-deadline must be positive")
    if not args.grace:
        args.grace = 2 * args.commit_deadline + 0.5  # gc's minimum (2x the deadline) and a margin
    if args.verify_mib < 0:
        args.verify_mib = 8 * args.size_mib
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not args.parts or set(args.parts) - set(PARTS):
        parser.error(f"--parts takes a comma-separated subset of {','.join(PARTS)}")
    return args


# -- shared by both sides ----------------------------------------------------------------------


class Versions:
    """The seeded sequence of edits both tools apply: each overwrites one contiguous random region
    of 1% of the artifact with random bytes."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.length = max(1, size // 100)
        self.rng = random.Random(seed + 1)  # not the data's seed: the edits are not the data

    def next(self) -> tuple[int, bytes]:
        at = self.rng.randrange(self.size - self.length + 1)
        return at, self.rng.randbytes(self.length)


def due(i: int, every: int, last: int) -> bool:
    """Maintenance after every ``every`` versions, and after the last so both end maintained."""
    return i % every == 0 or i == last


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # the whole process: the store's threads too
    return usage.ru_utime + usage.ru_stime


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _rchar() -> int | None:
    """Bytes this process has read through read/pread syscalls (page cache hits included)."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


#: Spawns a command and reports its own wall time, CPU and peak RSS. Linux carries the spawning
#: process's peak RSS into a child's ru_maxrss across exec (measured: a child of a 500 MiB parent
#: that runs `true` reports 518 MiB), and this benchmark's parent holds a moto server; spawned from
#: this small interpreter instead, a child's floor is the launcher's few MiB (printed as "idle").
_LAUNCHER = """
import json, os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
start = time.perf_counter()
pid = os.posix_spawnp(argv[0], argv, os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - start
code = os.waitstatus_to_exitcode(status)
with open(out, "w") as fh:
    json.dump({"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime, "maxrss": usage.ru_maxrss * 1024}, fh)
sys.exit(code)
"""


def run_measured(argv: list[str], *, env: dict[str, str] | None = None) -> c.ChildResult:
    """``_common.run_measured`` through the launcher: wall time, CPU and peak RSS of ``argv`` itself."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        result = c.run_measured([sys.executable, "-S", "-c", _LAUNCHER, out.name, *argv], env=env)
        text = Path(out.name).read_text()
    if not text:  # the launcher failed before the command ended: .check() shows its traceback
        return dataclasses.replace(result, returncode=result.returncode or 1)
    measured = json.loads(text)
    return dataclasses.replace(
        result, argv=tuple(argv), seconds=measured["seconds"], cpu_seconds=measured["cpu"], maxrss=measured["maxrss"]
    )


@dataclass
class Span:
    """One kind of operation, summed: wall seconds, process CPU seconds, count, longest."""

    seconds: float = 0.0
    cpu: float = 0.0
    count: int = 0
    longest: float = 0.0

    def add(self, seconds: float, cpu: float) -> None:
        self.seconds += seconds
        self.cpu += cpu
        self.count += 1
        self.longest = max(self.longest, seconds)

    def merge(self, other: Span) -> Span:
        longest = max(self.longest, other.longest)
        return Span(self.seconds + other.seconds, self.cpu + other.cpu, self.count + other.count, longest)


class Spans:
    def __init__(self) -> None:
        self.spans: dict[str, Span] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        cpu, start = _cpu(), time.perf_counter()
        try:
            yield
        finally:
            self.spans.setdefault(name, Span()).add(time.perf_counter() - start, _cpu() - cpu)

    def get(self, name: str) -> Span:
        return self.spans.get(name, Span())


# -- part 1: bounded storage -------------------------------------------------------------------


def storage_child(args: argparse.Namespace) -> dict[str, Any]:
    """The s3ckpt side of part 1, in its own process (its peak RSS is its own)."""
    import s3ckpt

    base = bytearray(Path(args.data).read_bytes())
    copy = bytes(base)  # the loop holds the data and one bytes copy of it: that is the floor
    del copy
    floor = _maxrss()
    store_dir = Path(args.store)
    versions, spans = Versions(len(base), args.seed), Spans()
    with spans("open"):
        store = s3ckpt.open_store(str(store_dir), key=os.environ["S3CKPT_KEY"], commit_deadline=args.commit_deadline)
    with spans("claim"):
        writer = store.run(RUN).claim()
    grace = timedelta(seconds=args.grace)
    rounds: list[dict[str, Any]] = []
    written = uploaded = packs_written = first_rss = 0
    waited = 0.0
    for i in range(1, args.commits + 1):
        at, payload = versions.next()
        base[at : at + len(payload)] = payload
        data = bytes(base)  # what a worker hands over: an immutable snapshot of its buffer
        before = c.tree_size(store_dir)
        with spans("commit"):
            writer.commit({"version": i}, artifacts={"big": data})
        written += c.tree_size(store_dir) - before
        uploaded += writer.last_stats.uploaded_bytes
        packs_written += writer.last_stats.packs
        if i == 1:
            first_rss = _maxrss()  # after the one full upload
        del data
        if not due(i, args.every, args.commits):
            continue
        with spans("prune"):
            pruned = store.prune(keep_last=args.keep_last)
        start = time.perf_counter()
        time.sleep(args.grace + GRACE_MARGIN)  # the tombstones and the packs they free age past the grace
        waited += time.perf_counter() - start
        with spans("gc"):
            collected = store.gc(grace=grace)
        stats = store.stats()
        rounds.append({
            "version": i, "records_pruned": pruned.records_pruned, "packs_deleted": collected.packs_deleted,
            "bytes_freed": collected.bytes_freed, "kept_young": collected.packs_kept_young,
            "stored": stats.stored_bytes, "live": stats.live_bytes, "on_disk": c.tree_size(store_dir), "packs": stats.packs,
            "maxrss": _maxrss(),
        })  # fmt: skip
    loop_rss = _maxrss()  # before the check below, which reads the whole artifact back
    stats = store.stats()
    latest = store.run(RUN).latest()
    restored = hashlib.sha256(latest.read_artifact("big")).hexdigest() if latest is not None else ""
    store.close()
    return {
        "spans": {name: asdict(span) for name, span in spans.spans.items()},
        "waited": waited,
        "rounds": rounds,
        "stats": stats.to_dict(),
        "on_disk": c.tree_size(store_dir),
        "written": written,
        "uploaded": uploaded,
        "packs_written": packs_written,
        "floor_rss": floor,
        "first_commit_rss": first_rss,
        "loop_rss": loop_rss,
        "final_sha256": hashlib.sha256(base).hexdigest(),
        "restored_sha256": restored,
    }


@dataclass
class ToolRun:
    """One tool's part 1, as reported."""

    name: str
    saves: Span
    maintenance: Span
    prune: Span
    gc: Span
    waited: float
    stored: int
    on_disk: int
    live: int
    written: int
    peak_rss: int
    floor_rss: int | None
    #: (version, stored bytes) after each maintenance
    trace: list[tuple[int, int, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def run_s3ckpt_storage(args: argparse.Namespace, work: Path, data: Path, key: str) -> tuple[ToolRun, dict[str, Any]]:
    store_dir = work / "s3ckpt-store"
    argv = [sys.executable, __file__, "--child", "storage", "--store", str(store_dir), "--data", str(data)]
    argv += _passthrough(args)
    result = run_measured(argv, env={"S3CKPT_KEY": key}).check()
    out = result.json()
    spans = {name: Span(**span) for name, span in out["spans"].items()}
    prune, gc = spans.get("prune", Span()), spans.get("gc", Span())
    stats = out["stats"]
    run = ToolRun(
        name="s3ckpt",
        saves=spans["commit"],
        maintenance=prune.merge(gc),
        prune=prune,
        gc=gc,
        waited=out["waited"],
        stored=stats["stored_bytes"],
        on_disk=out["on_disk"],
        live=stats["live_bytes"],
        written=out["written"],
        peak_rss=out["loop_rss"],
        floor_rss=out["floor_rss"],
        trace=[(r["version"], r["stored"], r["live"]) for r in out["rounds"]],
    )
    run.notes.append(
        f"s3ckpt: WriteStats.uploaded_bytes {c.fmt_bytes(out['uploaded'])} in {out['packs_written']} packs "
        f"(repacked chunks included), child process {result.seconds:.1f} s wall incl. "
        f"{out['waited']:.1f} s of grace waits and data generation"
    )
    rounds = out["rounds"]
    totals = {k: sum(r[k] for r in rounds) for k in ("packs_deleted", "bytes_freed", "kept_young", "records_pruned")}
    run.notes.append(
        f"s3ckpt gc: {totals['packs_deleted']} packs deleted ({c.fmt_bytes(totals['bytes_freed'])}), "
        f"{totals['kept_young']} unreferenced packs kept as younger than the grace; prune tombstoned "
        f"{totals['records_pruned']} records"
    )
    peaks = ", ".join(f"{c.fmt_bytes(r['maxrss'])} after version {r['version']}" for r in rounds[:3])
    run.notes.append(
        f"s3ckpt peak RSS so far: {c.fmt_bytes(out['first_commit_rss'])} after the first commit (the full upload), {peaks}, "
        f"{c.fmt_bytes(out['loop_rss'])} at the end of the loop (the table's); {c.fmt_bytes(result.maxrss)} after reading "
        "the last version back to check it"
    )
    return run, out


def _passthrough(args: argparse.Namespace) -> list[str]:
    return [
        "--commits", str(args.commits), "--every", str(args.every), "--keep-last", str(args.keep_last),
        "--commit-deadline", str(args.commit_deadline), "--grace", str(args.grace), "--seed", str(args.seed),
        "--gc-runs", str(args.gc_runs), "--gc-commits", str(args.gc_commits), "--gc-artifact", str(args.gc_artifact),
    ]  # fmt: skip


def run_restic_storage(args: argparse.Namespace, work: Path, data: Path, binary: str) -> tuple[ToolRun, c.Restic, str]:
    restic = c.Restic(binary, work / "restic-repo", work / "restic-cache")
    restic.init()
    source = work / "restic-src" / data.name
    source.parent.mkdir()
    shutil.copyfile(data, source)
    versions = Versions(source.stat().st_size, args.seed)
    saves, maintenance = Span(), Span()
    peak = written = 0
    trace: list[tuple[int, int, int]] = []
    forget = [binary, "forget", "--keep-last", str(args.keep_last), "--prune"]
    backup = [binary, "backup", "--json", "--host", "bench", str(source)]
    with open(source, "r+b") as fh:
        for i in range(1, args.commits + 1):
            at, payload = versions.next()
            fh.seek(at)
            fh.write(payload)
            fh.flush()
            c.settle()  # this edit's writeback is not billed to restic
            before = c.tree_size(restic.repo)
            result = run_measured(backup, env=restic.env).check()
            written += c.tree_size(restic.repo) - before
            saves.add(result.seconds, result.cpu_seconds)
            peak = max(peak, result.maxrss)
            if due(i, args.every, args.commits):
                result = run_measured(forget, env=restic.env).check()
                maintenance.add(result.seconds, result.cpu_seconds)
                peak = max(peak, result.maxrss)
                trace.append((i, c.tree_size(restic.repo / "data"), 0))
    raw = run_measured([binary, "stats", "--mode", "raw-data", "--json"], env=restic.env).check()
    live = int(json.loads(raw.stdout.strip().splitlines()[-1])["total_size"])
    run = ToolRun(
        name="restic",
        saves=saves,
        maintenance=maintenance,
        prune=maintenance,
        gc=Span(),
        waited=0.0,
        stored=c.tree_size(restic.repo / "data"),
        on_disk=c.tree_size(restic.repo),
        live=live,
        written=written,
        peak_rss=peak,
        floor_rss=None,
        trace=trace,
    )
    return run, restic, _restic_dump_sha256(restic, source)


def _restic_floor(restic: c.Restic) -> float:
    """What every restic process pays before any work: start, key derivation (scrypt), config."""
    runs = sorted(run_measured([restic.binary, "cat", "config"], env=restic.env).check().seconds for _ in range(3))
    return runs[1]


def _restic_dump_sha256(restic: c.Restic, source: Path) -> str:
    """SHA-256 of the file in restic's latest snapshot (checks both tools saw the same last version)."""
    digest = hashlib.sha256()
    env = {**os.environ, **restic.env}
    with subprocess.Popen([restic.binary, "dump", "latest", str(source)], stdout=subprocess.PIPE, env=env) as proc:
        assert proc.stdout is not None
        while block := proc.stdout.read(8 * c.MiB):
            digest.update(block)
    if proc.returncode != 0:
        raise RuntimeError(f"restic dump exited {proc.returncode}")
    return digest.hexdigest()


@dataclass
class StoragePart:
    ours: ToolRun
    theirs: ToolRun
    restic: c.Restic
    store_dir: Path
    size: int
    #: wall seconds of a restic process that only opens the repository (median of 3)
    restic_floor: float


def part_storage(args: argparse.Namespace, work: Path, key: str, binary: str) -> StoragePart:
    size = args.size_mib * c.MiB
    data = work / "lifecycle.bin"
    print(f"part 1: generating {c.fmt_bytes(size)} at {data}", flush=True)
    c.write_mixed_file(data, size, seed=args.seed)
    c.prefault(work, 2 * size)
    print(f"part 1: s3ckpt, {args.commits} commits with prune+gc every {args.every} ...", flush=True)
    ours, out = run_s3ckpt_storage(args, work, data, key)
    print(f"part 1: restic, {args.commits} backups with forget --prune every {args.every} ...", flush=True)
    theirs, restic, restic_sha = run_restic_storage(args, work, data, binary)
    if not out["final_sha256"] == out["restored_sha256"] == restic_sha:
        raise RuntimeError(
            f"the last version differs: s3ckpt committed {out['final_sha256']}, restored {out['restored_sha256']}, "
            f"restic dumped {restic_sha}"
        )
    c.remove(data)
    return StoragePart(ours, theirs, restic, work / "s3ckpt-store", size, _restic_floor(restic))


def report_storage(part: StoragePart, args: argparse.Namespace, verdicts: c.Verdicts) -> None:
    ours, theirs = part.ours, part.theirs
    print(f"\n== part 1: bounded storage: {c.fmt_bytes(part.size)} artifact, {args.commits} versions of 1% changed, "
          f"keep last {args.keep_last}, maintenance every {args.every} ==")  # fmt: skip
    headers = ["tool", "versions", "save s", "s/version", "longest", "prune/gc s", "total s", "CPU s",
               "written by saves", "stored", "on disk", "live set", "stored/live", "peak RSS"]  # fmt: skip
    rows = []
    for run in (ours, theirs):
        total = run.saves.seconds + run.maintenance.seconds
        rows.append([
            run.name, run.saves.count, f"{run.saves.seconds:.2f}", f"{run.saves.seconds / run.saves.count:.3f}",
            f"{run.saves.longest:.2f}", f"{run.maintenance.seconds:.2f}", f"{total:.2f}",
            f"{run.saves.cpu + run.maintenance.cpu:.2f}", c.fmt_bytes(run.written), c.fmt_bytes(run.stored),
            c.fmt_bytes(run.on_disk), c.fmt_bytes(run.live), c.fmt_ratio(run.stored, run.live), c.fmt_bytes(run.peak_rss),
        ])  # fmt: skip
    c.print_table(headers, rows)
    total_ours = ours.saves.seconds + ours.maintenance.seconds
    total_theirs = theirs.saves.seconds + theirs.maintenance.seconds
    print(f"(total s3ckpt/restic: {c.fmt_ratio(total_ours, total_theirs)}; prune/gc: "
          f"{c.fmt_ratio(ours.maintenance.seconds, theirs.maintenance.seconds)})")  # fmt: skip
    print(f"(s3ckpt s: library calls timed in its process: commit; prune {ours.prune.seconds:.2f} s + gc "
          f"{ours.gc.seconds:.2f} s over {ours.gc.count} rounds; not its {ours.waited:.1f} s of grace waits)")  # fmt: skip
    print(f"(restic s: wall time of each process, spawn to reap: backup; forget --keep-last {args.keep_last} --prune "
          f"over {theirs.maintenance.count} rounds)")  # fmt: skip
    processes = theirs.saves.count + theirs.maintenance.count
    print(f"(a restic process that only opens the repository (`restic cat config`: start, scrypt key derivation) "
          f"takes {part.restic_floor:.2f} s here; {processes} processes: ~{processes * part.restic_floor:.0f} s of "
          f"restic's {total_theirs:.0f} s)")  # fmt: skip
    print("(CPU s: user+system of the process, the store's threads included; written by saves: sum of each save's")
    print(" growth of the directory; stored: pack bytes (s3ckpt stats().stored_bytes; restic data/), on disk: the")
    print(" whole store/repository directory; live set: s3ckpt stats().live_bytes, the sealed chunks its records")
    print(" name; restic `stats --mode raw-data` total_size, the stored size of the blobs its snapshots reference)")
    if ours.floor_rss is not None:
        print(f"(s3ckpt peak RSS: its whole process through the last gc; holding the data and one bytes copy of it, "
              f"before the store was opened, it was already {c.fmt_bytes(ours.floor_rss)}: "
              f"{c.fmt_bytes(ours.peak_rss - ours.floor_rss)} above that; restic: its largest process)")  # fmt: skip
    for note in ours.notes:
        print(f"({note})")
    print("\nstored bytes after each maintenance round:")
    trace_rows = [
        [version, c.fmt_bytes(stored), c.fmt_bytes(live), c.fmt_ratio(stored, live), c.fmt_bytes(theirs_stored)]
        for (version, stored, live), (_, theirs_stored, _) in zip(ours.trace, theirs.trace, strict=True)
    ]
    c.print_table(["after version", "s3ckpt stored", "s3ckpt live", "s3ckpt stored/live", "restic data/"], trace_rows)
    print()
    verdicts.check(
        f"s3ckpt stored bytes at the end <= {STORED_TARGET}x its live set",
        ours.stored <= STORED_TARGET * ours.live,
        f"{c.fmt_bytes(ours.stored)} / {c.fmt_bytes(ours.live)} = {c.fmt_ratio(ours.stored, ours.live)} "
        f"(restic {c.fmt_bytes(theirs.stored)} / {c.fmt_bytes(theirs.live)} = {c.fmt_ratio(theirs.stored, theirs.live)})",
    )


# -- part 2: gc on the moto server -------------------------------------------------------------


class Bracket:
    """The child's end of the pipe: BEGIN/END around each operation, waiting for the parent's ack so
    the server's counters hold exactly that operation's requests."""

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
        self._send(f"END {time.perf_counter() - start:.6f} {label}")

    def done(self, result: dict[str, Any]) -> None:
        self.out.write("DONE " + json.dumps({**result, "maxrss": _maxrss()}) + "\n")
        self.out.flush()


def gc_child(args: argparse.Namespace) -> None:
    import s3ckpt

    proto = os.fdopen(os.dup(1), "w")
    sys.stdout = sys.stderr  # nothing but the protocol on the pipe
    bracket = Bracket(proto, sys.stdin)
    options: dict[str, Any] = {"endpoint_url": args.endpoint, "region": REGION}
    url, key = f"s3://{args.bucket}/{STORE_PREFIX}", s3ckpt.generate_key()
    runs = [f"gc-{i:05d}" for i in range(args.gc_runs)]
    quarter = len(runs) // 4
    deleted, pruned = runs[:quarter], runs[quarter : 3 * quarter]
    keep = args.gc_commits // 2

    with bracket.op("build"):
        store = s3ckpt.open_store(url, key=key, commit_deadline=args.commit_deadline, **options)

        def build(index: int) -> None:
            rng = random.Random(args.seed * 1_000_003 + index)
            writer = store.run(runs[index]).claim()
            for step in range(args.gc_commits):
                writer.commit({"step": step}, artifacts={"blob": rng.randbytes(args.gc_artifact)})

        with ThreadPoolExecutor(BUILDERS) as pool:
            list(pool.map(build, range(len(runs))))
    with bracket.op("delete_run"):
        for run_id in deleted:
            store.delete_run(run_id)
    with bracket.op("prune"):
        report = store.prune(keep_last=keep, run_ids=pruned)
    time.sleep(args.grace + S3_CLOCK_STEP + GRACE_MARGIN)  # the deleted and pruned data ages past the grace
    reports = []
    for label in ("gc", "gc again"):
        with bracket.op(label):
            collected = store.gc(grace=timedelta(seconds=args.grace))
        reports.append(collected.to_dict() | {"writes_deleted": collected.writes_deleted})
    checked = store.verify()  # not measured: proves the collection lost nothing
    store.close()
    bracket.done({
        "deleted_runs": len(deleted), "pruned_runs": len(pruned), "keep_last": keep, "records_pruned": report.records_pruned,
        "gc": [{k: v for k, v in r.items() if k != "deleted"} for r in reports],
        "verify_ok": checked.ok, "verify_problems": len(checked.problems), "orphans": len(checked.orphans),
    })  # fmt: skip


def key_area(info: Any) -> str:
    """What a request touches: packs, a run's log, the run listing, the collector's clock probe, ..."""
    query = parse_qs(info.query)
    listing = "prefix" in query or "list-type" in query
    key = query.get("prefix", [""])[0] if listing else info.path.lstrip("/").partition("/")[2]
    parts = key.removeprefix(f"{STORE_PREFIX}/").split("/")
    area = (parts[2] or "run") if parts[0] == "runs" and len(parts) >= 3 else (parts[0] or "bucket")
    if parts[0] == "runs" and len(parts) < 3:
        area = "runs"
    return f"{'LIST' if listing else info.method} {area}"


@dataclass
class OpCount:
    seconds: float
    methods: Counter[str]
    areas: Counter[str]
    bytes_in: int
    bytes_out: int


class Recorder:
    """Charges the server's requests to the operation the child is in."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.areas: Counter[str] = Counter()
        self.lock = threading.Lock()
        server.inject = self._observe

    def _observe(self, info: Any) -> None:
        with self.lock:
            self.areas[key_area(info)] += 1

    def reset(self) -> None:
        self.server.log.reset()
        with self.lock:
            self.areas.clear()

    def take(self, seconds: float) -> OpCount:
        log = self.server.log
        with log.lock:
            methods = Counter(dict.fromkeys(METHODS, 0))
            for (_method, kind), n in log.counts.items():
                methods[kind] += n
            bytes_in, bytes_out = log.bytes_in, log.bytes_out
        with self.lock:
            areas = Counter(self.areas)
        return OpCount(seconds, methods, areas, bytes_in, bytes_out)


@dataclass
class GcPart:
    ops: dict[str, OpCount]
    result: dict[str, Any]
    seconds: float


def part_gc(args: argparse.Namespace) -> GcPart:
    import boto3

    from s3ckpt.testing import MotoServer

    os.environ.update(FAKE_AWS)
    ops: dict[str, OpCount] = {}
    start = time.perf_counter()
    with MotoServer() as server:
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=server.endpoint_url, region_name=REGION).create_bucket(Bucket=bucket)
        packs = args.gc_runs * args.gc_commits
        print(f"part 2: moto server at {server.endpoint_url}: {args.gc_runs} runs x {args.gc_commits} commits "
              f"= {packs} packs, then gc ...", flush=True)  # fmt: skip
        recorder = Recorder(server)
        argv = [sys.executable, __file__, "--child", "gc", "--endpoint", server.endpoint_url, "--bucket", bucket]
        argv += _passthrough(args)
        # The client is a child process so it does not share a GIL with the server.
        with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdin is not None
            assert proc.stdout is not None
            for line in proc.stdout:
                word, _, rest = line.rstrip("\n").partition(" ")
                if word == "DONE":
                    return GcPart(ops, json.loads(rest), time.perf_counter() - start)
                if word == "BEGIN":
                    recorder.reset()
                elif word == "END":
                    seconds, _, label = rest.partition(" ")
                    ops[label] = recorder.take(float(seconds))
                    recorder.reset()
                proc.stdin.write("GO\n")
                proc.stdin.flush()
    raise RuntimeError(f"the gc client exited {proc.returncode} before finishing (its stderr is above)")


def report_gc(part: GcPart, args: argparse.Namespace) -> None:
    result = part.result
    packs = args.gc_runs * args.gc_commits
    print(f"\n== part 2: gc on the moto server: {args.gc_runs} runs x {args.gc_commits} commits of a "
          f"{c.fmt_bytes(args.gc_artifact)} artifact = {packs} packs; {result['deleted_runs']} runs deleted, "
          f"{result['pruned_runs']} pruned to their last {result['keep_last']} ==")  # fmt: skip
    headers = ["operation", "s", "packs listed", "deleted", "kept young", "freed", "requests", *METHODS, "up / down"]
    rows = []
    gc_reports = dict(zip(("gc", "gc again"), result["gc"], strict=True))
    for label, op in part.ops.items():
        report = gc_reports.get(label)
        collected: list[object] = ["-"] * 4
        if report:
            collected = [report["packs_total"], report["packs_deleted"], report["packs_kept_young"],
                         c.fmt_bytes(report["bytes_freed"])]  # fmt: skip
        rows.append([label, f"{op.seconds:.2f}", *collected, op.methods.total(), *(op.methods[m] for m in METHODS),
                     f"{c.fmt_bytes(op.bytes_in)} / {c.fmt_bytes(op.bytes_out)}"])  # fmt: skip
    c.print_table(headers, rows)
    print("\nper 1,000 packs listed:")
    per_rows = []
    for label, report in gc_reports.items():
        op, scale = part.ops[label], 1000 / report["packs_total"]
        per_rows.append([label, f"{op.seconds * scale:.2f}", f"{op.methods.total() * scale:.0f}",
                         *(f"{op.methods[m] * scale:.0f}" for m in METHODS)])  # fmt: skip
    c.print_table(["operation", "s", "requests", *METHODS], per_rows)
    first = part.ops["gc"]
    print(f"(gc's GETs follow the record objects, {first.areas['GET log']} here = "
          f"{first.areas['GET log'] / gc_reports['gc']['packs_total']:.2f} per pack listed, its LISTs the runs, its "
          "DELETEs the garbage packs: per 1,000 packs holds for this shape of store only)")  # fmt: skip
    print("\nrequests by key (method and what it names):")
    for label, op in part.ops.items():
        print(f"  {label}: " + ", ".join(f"{area} {n}" for area, n in sorted(op.areas.items())))
    print(f"(every request that reached the server, counted there; prune tombstoned {result['records_pruned']} records;")
    print(" gc: GET log reads every record and tombstone of every run, PUT log are the tombstones over the deleted")
    print(" runs' records, `gc` is its storage-clock probe object, LIST runs lists the runs and then every object")
    print(" under runs/ (looking for LangGraph writes objects), LIST log one per run)")
    print(f"(s: the call timed in the client process against an in-process moto server on loopback: moto's speed, "
          f"not S3's latency; the build ran {BUILDERS} runs at a time, everything else one call at a time)")  # fmt: skip
    print(f"(verify after gc: ok={result['verify_ok']}, {result['verify_problems']} problems, {result['orphans']} "
          f"orphans; client peak RSS {c.fmt_bytes(result['maxrss'])}; part 2 took {part.seconds:.1f} s)")  # fmt: skip
    if not result["verify_ok"] or result["orphans"]:
        raise RuntimeError("verify after gc found problems or orphans on the moto store")


# -- part 3: verify --read-data ----------------------------------------------------------------


def verify_child(args: argparse.Namespace) -> dict[str, Any]:
    import s3ckpt

    spans = Spans()
    with spans("open"):
        store = s3ckpt.open_store(args.store, key=os.environ["S3CKPT_KEY"], create=False)
    before = _rchar()
    with spans("verify"):
        report = store.verify(read_data=True)
    after, peak = _rchar(), _maxrss()
    live = store.stats().live_bytes  # not timed: what the verify read, as the store counts it
    store.close()
    return {
        "open_seconds": spans.get("open").seconds,
        "verify_seconds": spans.get("verify").seconds,
        "verify_cpu": spans.get("verify").cpu,
        "rchar": after - before if after is not None and before is not None else None,
        "live_bytes": live,
        "chunks_read": report.chunks_read,
        "packs_checked": report.packs_checked,
        "ok": report.ok,
        "problems": len(report.problems),
        "verify_rss": peak,
    }


@dataclass
class VerifyRow:
    data: str
    tool: str
    wall: float
    call: float | None
    cpu: float
    checked: int
    read: int | None
    peak_rss: int
    ok: bool


def verify_pair(label: str, store_dir: Path, key: str, restic: c.Restic) -> list[VerifyRow]:
    c.settle()
    argv = [sys.executable, __file__, "--child", "verify", "--store", str(store_dir)]
    ours = run_measured(argv, env={"S3CKPT_KEY": key}).check()
    out = ours.json()
    c.settle()
    theirs = run_measured([restic.binary, "check", "--read-data"], env=restic.env)
    return [
        VerifyRow(label, "s3ckpt", ours.seconds, out["open_seconds"] + out["verify_seconds"], ours.cpu_seconds,
                  out["live_bytes"], out["rchar"], out["verify_rss"], out["ok"]),
        VerifyRow(label, "restic", theirs.seconds, None, theirs.cpu_seconds, c.tree_size(restic.repo / "data"), None,
                  theirs.maxrss, theirs.returncode == 0 and "no errors were found" in theirs.stdout),
    ]  # fmt: skip


def part_verify(args: argparse.Namespace, work: Path, storage: StoragePart | None, key: str, binary: str) -> list[VerifyRow]:
    rows: list[VerifyRow] = []
    if storage is not None:
        print("part 3: verify --read-data on part 1's repositories ...", flush=True)
        rows += verify_pair(f"part 1 ({c.fmt_bytes(storage.size)} x {args.keep_last} kept)", storage.store_dir, key,
                            storage.restic)  # fmt: skip
    if args.verify_mib:
        size = args.verify_mib * c.MiB
        data = work / "verify.bin"
        print(f"part 3: saving a fresh {c.fmt_bytes(size)} file with each tool, then verify --read-data ...", flush=True)
        c.write_mixed_file(data, size, seed=args.seed + 2)
        c.warm(data)
        store_dir = work / "s3ckpt-verify"
        env = {"S3CKPT_KEY": key}
        run_measured(c.worker_argv("init", "--store", str(store_dir)), env=env).check()
        save = c.worker_argv("save", "--store", str(store_dir), "--run", "verify", "--file", str(data))
        run_measured(save, env=env).check()
        restic = c.Restic(binary, work / "restic-verify", work / "restic-verify-cache")
        restic.init()
        restic.backup(data)
        c.remove(data)
        rows += verify_pair(f"fresh {c.fmt_bytes(size)} file", store_dir, key, restic)
    return rows


def report_verify(rows: list[VerifyRow]) -> None:
    print("\n== part 3: verify with read_data vs restic check --read-data ==")
    headers = ["data", "tool", "wall s", "call s", "checked", "MiB/s (wall)", "MiB/s (call)", "bytes read", "CPU s",
               "peak RSS", "ok"]  # fmt: skip
    table = []
    for row in rows:
        table.append([
            row.data, row.tool, f"{row.wall:.2f}", f"{row.call:.2f}" if row.call is not None else "-",
            c.fmt_bytes(row.checked), f"{row.checked / c.MiB / row.wall:.0f}",
            f"{row.checked / c.MiB / row.call:.0f}" if row.call else "-",
            c.fmt_bytes(row.read) if row.read is not None else "-", f"{row.cpu:.2f}", c.fmt_bytes(row.peak_rss), row.ok,
        ])  # fmt: skip
    c.print_table(headers, table)
    for data in dict.fromkeys(row.data for row in rows):
        ours, theirs = (next(r for r in rows if r.data == data and r.tool == t) for t in ("s3ckpt", "restic"))
        print(f"({data}: s3ckpt/restic time: call {c.fmt_ratio(ours.call or 0.0, theirs.wall)}, "
              f"process {c.fmt_ratio(ours.wall, theirs.wall)})")  # fmt: skip
    print("(wall s: the process, spawn to reap; call s: s3ckpt's open_store + verify(read_data=True) inside it;")
    print(" checked: s3ckpt stats().live_bytes, every chunk its records name, each read once; restic: its data/")
    print(" directory, every pack of which check --read-data reads; bytes read: s3ckpt's read syscalls during")
    print(" verify (/proc/self/io rchar); peak RSS: s3ckpt's process as verify returned, restic's process; both")
    print(" repositories are in the page cache: this is CPU, not disk)")
    if not all(row.ok for row in rows):
        raise RuntimeError("a verify reported problems: " + ", ".join(f"{r.tool} on {r.data}" for r in rows if not r.ok))


# -- main --------------------------------------------------------------------------------------


def child_main(args: argparse.Namespace) -> int:
    if args.child == "gc":
        gc_child(args)
        return 0
    handlers: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "storage": storage_child,
        "verify": verify_child,
    }
    result = handlers[args.child](args)
    result["maxrss"] = _maxrss()
    print(json.dumps(result))
    return 0


T = TypeVar("T")


def _timed(took: dict[str, float], name: str, fn: Callable[[], T]) -> T:
    start = time.perf_counter()
    try:
        return fn()
    finally:
        took[name] = time.perf_counter() - start


def main() -> int:
    args = parse_args()
    if args.child:
        return child_main(args)
    import s3ckpt

    work = c.scratch_dir("s3ckpt-bench-lifecycle-", args.workdir)
    try:
        key = s3ckpt.generate_key()
        binary = c.ensure_restic() if {"storage", "verify"} & set(args.parts) else ""
        machine = c.machine_note(work)  # before the run: its load, not ours
        idle = run_measured(["true"]).maxrss
        took: dict[str, float] = {}
        storage = _timed(took, "part 1", lambda: part_storage(args, work, key, binary)) if "storage" in args.parts else None
        gc = _timed(took, "part 2", lambda: part_gc(args)) if "gc" in args.parts else None
        verify = _timed(took, "part 3", lambda: part_verify(args, work, storage, key, binary)) if "verify" in args.parts else []
        restic_version = c.Restic(binary, work, work).version() if binary else "restic not used"
        print(f"\nbench_lifecycle: {machine}")
        print(f"{c.library_note()}; {restic_version}")
        print(f"peak RSS: each measured process's own (spawned from a small launcher, where `true` measures "
              f"{c.fmt_bytes(idle)}: see run_measured)")  # fmt: skip
        print(f"s3ckpt stores: commit_deadline {args.commit_deadline:g} s, gc grace {args.grace:g} s; data (parts 1 and 3): "
              f"{c.DATA_MIX}")  # fmt: skip
        verdicts = c.Verdicts()
        if storage is not None:
            report_storage(storage, args, verdicts)
        if gc is not None:
            report_gc(gc, args)
        if verify:
            report_verify(verify)
        print(f"\nload average now: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              + ", ".join(f"{part} took {seconds:.0f} s" for part, seconds in took.items()))  # fmt: skip
        return verdicts.summary()
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            c.remove(work)


if __name__ == "__main__":
    sys.exit(main())
