"""s3ckpt vs restic: save, restore and incremental save of one large file to a local directory.

    python benchmarks/bench_restic.py                 # 512 MiB (the target size)
    python benchmarks/bench_restic.py --size-mib 64   # quicker
    python benchmarks/bench_restic.py --concurrency 2 --avg-chunk 196608 --min-chunk 32768 --max-chunk 1048576

Each operation of each side runs in its own fresh child process, timed from spawn to reap, so both
sides pay their own start-up (interpreter and imports; restic's key derivation). The file is in the
page cache before either side reads it, and dirty pages are flushed (sync) before every measured
step. Then 1% of the file is overwritten in 16 places and both sides save again: s3ckpt as a new
checkpoint of the same run (a new writer claims it), restic as a second backup with the first as
parent. "written" is the growth of each side's directory.

Targets: save+restore <= 0.5x restic's wall time; incremental save <= 0.2x restic's wall time and
<= 2% of the artifact's size written.

The time targets are judged as a worker uses s3ckpt: a library call inside a process that is
already running (open_store + claim + commit for a save, open_store + latest + restore for a
restore, timed inside the child) against restic's process wall time, since restic is a process per
backup. The child-process wall times of both sides (s3ckpt's child adds interpreter start-up and
imports) are printed beside them for information; docs/decisions.md says why.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c

import s3ckpt

SAVE_RESTORE_TARGET = 0.5
INCREMENTAL_TIME_TARGET = 0.2
INCREMENTAL_BYTES_TARGET = 0.02


@dataclass(frozen=True)
class Step:
    """One measured operation of one side."""

    seconds: float
    cpu_seconds: float
    maxrss: int
    written: int
    op_seconds: float | None = None
    uploaded: int | None = None
    #: s3ckpt only: the worker's JSON line (in-process spans, WriteStats)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Side:
    save: Step
    restore: Step
    incremental: Step


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=512, help="artifact size in MiB (default 512)")
    parser.add_argument("--workdir", default=None, help="where to put the data and both repositories (default: /var/tmp)")
    parser.add_argument("--concurrency", type=int, default=0, help="s3ckpt store concurrency (default: library default)")
    parser.add_argument("--avg-chunk", type=int, default=0, help="s3ckpt chunker avg_size for the new store")
    parser.add_argument("--min-chunk", type=int, default=0, help="chunker min_size (default avg/4; with --avg-chunk)")
    parser.add_argument("--max-chunk", type=int, default=0, help="chunker max_size (default avg*4; with --avg-chunk)")
    parser.add_argument("--no-fsync", action="store_true", help="open the s3ckpt store with fsync=False")
    parser.add_argument(
        "--restore-api",
        choices=("restore_artifact", "open_artifact"),
        default="restore_artifact",
        help="how s3ckpt restores to a file: Checkpoint.restore_artifact() (default: parallel fetch, verify and "
        "pwrite into a temporary file renamed into place), or stream open_artifact() through shutil.copyfileobj",
    )
    parser.add_argument("--profile-dir", default=None, help="write a cProfile of each s3ckpt operation here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser.parse_args()


class S3ckptSide:
    """Drives the s3ckpt worker in child processes against one local directory store."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.store = work / "s3ckpt-store"
        self.env = {"S3CKPT_KEY": s3ckpt.generate_key()}
        self.common = ["--store", str(self.store), "--run", "bench"]
        if args.concurrency:
            self.common += ["--concurrency", str(args.concurrency)]
        if args.no_fsync:
            self.common.append("--no-fsync")
        self.profile_dir = Path(args.profile_dir) if args.profile_dir else None
        self.restore_api: str = args.restore_api
        init = ["init", "--store", str(self.store)]
        for flag, value in (("--avg-chunk", args.avg_chunk), ("--min-chunk", args.min_chunk), ("--max-chunk", args.max_chunk)):
            if value and args.avg_chunk:
                init += [flag, str(value)]
        self.chunker = c.run_measured(c.worker_argv(*init), env=self.env).check().json()["chunker"]

    def _profile(self, name: str) -> list[str]:
        if self.profile_dir is None:
            return []
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        return ["--profile", str(self.profile_dir / f"s3ckpt-{name}.prof")]

    def save(self, data: Path, name: str) -> Step:
        before = c.tree_size(self.store)
        c.settle()
        argv = c.worker_argv("save", *self.common, "--file", str(data), *self._profile(name))
        result = c.run_measured(argv, env=self.env).check()
        out = result.json()
        written = c.tree_size(self.store) - before
        return Step(result.seconds, result.cpu_seconds, result.maxrss, written, out["op_seconds"], out["uploaded_bytes"], out)

    def restore(self, target: Path, expected: str) -> Step:
        c.settle()
        argv = c.worker_argv("restore", *self.common, "--out", str(target), *self._profile("restore"))
        argv += ["--restore-api", self.restore_api]
        result = c.run_measured(argv, env=self.env).check()
        out = result.json()
        _verify(target, expected, "s3ckpt")
        written = target.stat().st_size
        c.remove(target)
        return Step(result.seconds, result.cpu_seconds, result.maxrss, written, out["op_seconds"], detail=out)


class ResticSide:
    def __init__(self, binary: str, work: Path) -> None:
        self.restic = c.Restic(binary, work / "restic-repo", work / "restic-cache")
        self.restic.init()

    def save(self, data: Path) -> Step:
        before = c.tree_size(self.restic.repo)
        c.settle()
        result = self.restic.backup(data)
        written = c.tree_size(self.restic.repo) - before
        summary = c.restic_summary(result)
        return Step(result.seconds, result.cpu_seconds, result.maxrss, written, uploaded=summary.get("data_added"))

    def restore(self, target: Path, data: Path, expected: str) -> Step:
        c.settle()
        result = self.restic.restore(target)
        restored = target / data.relative_to(data.anchor)
        _verify(restored, expected, "restic")
        written = restored.stat().st_size
        c.remove(target)
        return Step(result.seconds, result.cpu_seconds, result.maxrss, written)


def _verify(path: Path, expected: str, who: str) -> None:
    got = c.sha256_file(path)
    if got != expected:
        raise RuntimeError(f"{who} restored {path} with sha256 {got}, expected {expected}")


def run(args: argparse.Namespace, work: Path) -> tuple[Side, Side, S3ckptSide, str]:
    data = work / "big.bin"
    size = args.size_mib * c.MiB
    print(f"generating {c.fmt_bytes(size)} at {data}: {c.DATA_MIX}", flush=True)
    c.write_mixed_file(data, size)
    expected = c.sha256_file(data)  # also warms the page cache
    c.prefault(work, 3 * size)
    ours = S3ckptSide(args, work)
    theirs = ResticSide(c.ensure_restic(), work)
    print("first save and restore ...", flush=True)
    s_save = ours.save(data, "save")
    r_save = theirs.save(data)
    s_restore = ours.restore(work / "s3ckpt-restored.bin", expected)
    r_restore = theirs.restore(work / "restic-restored", data, expected)
    edits = c.mutate_file(data, fraction=0.01, places=16)
    changed = sum(n for _, n in edits)
    print(f"overwrote {c.fmt_bytes(changed)} ({changed / size:.2%}) in {len(edits)} places; incremental save ...", flush=True)
    c.warm(data)
    s_incr = ours.save(data, "incremental")
    r_incr = theirs.save(data)
    return Side(s_save, s_restore, s_incr), Side(r_save, r_restore, r_incr), ours, theirs.restic.version()


def _secs(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"


def _row(name: str, ours: Step, theirs: Step) -> list[str]:
    return [
        name,
        f"{ours.seconds:.2f}",
        f"{theirs.seconds:.2f}",
        c.fmt_ratio(ours.seconds, theirs.seconds),
        _secs(ours.op_seconds),
        c.fmt_ratio(ours.op_seconds, theirs.seconds) if ours.op_seconds is not None else "-",
        f"{ours.cpu_seconds:.2f}",
        f"{theirs.cpu_seconds:.2f}",
        c.fmt_bytes(ours.written),
        c.fmt_bytes(theirs.written),
        c.fmt_bytes(ours.maxrss),
        c.fmt_bytes(theirs.maxrss),
    ]


def _sum(a: Step, b: Step) -> Step:
    return Step(
        a.seconds + b.seconds,
        a.cpu_seconds + b.cpu_seconds,
        max(a.maxrss, b.maxrss),
        a.written,
        (a.op_seconds or 0) + (b.op_seconds or 0) if a.op_seconds is not None else None,
    )


def _breakdown_row(name: str, step: Step) -> list[str]:
    d = step.detail
    work = d.get("claim_seconds", d.get("latest_seconds"))
    outside = step.seconds - d["op_seconds"] - d["close_seconds"]
    stats = "-"
    if "chunks" in d:
        stats = (
            f"{d['chunks']} chunks: {d['uploaded_chunks']} sealed ({c.fmt_bytes(d['uploaded_bytes'])}) "
            f"in {d['packs']} packs, {d['reused_chunks']} reused"
        )
    return [
        name,
        f"{step.seconds:.2f}",
        f"{outside:.2f}",
        f"{d['import_seconds']:.2f}",
        f"{d['open_seconds']:.3f}",
        f"{work:.3f}",
        f"{d['body_seconds']:.2f}",
        f"{d['op_seconds']:.2f}",
        f"{d['close_seconds']:.3f}",
        stats,
    ]


def _in_process_check(verdicts: c.Verdicts, what: str, target: float, ours: float, theirs: float) -> None:
    verdicts.check(
        f"{what} <= {target}x restic (s3ckpt in-process incl. open_store; restic process wall)",
        ours <= target * theirs,
        f"{ours:.2f} s vs {theirs:.2f} s = {c.fmt_ratio(ours, theirs)}",
    )


def report(ours: Side, theirs: Side, size: int) -> int:
    headers = ["step", "s3ckpt s", "restic s", "ratio", "s3ckpt in-proc s", "in-proc ratio", "s3ckpt CPU s",
               "restic CPU s", "s3ckpt written", "restic written", "s3ckpt peak RSS", "restic peak RSS"]  # fmt: skip
    total, total_theirs = _sum(ours.save, ours.restore), _sum(theirs.save, theirs.restore)
    first_ours, first_theirs = total.seconds, total_theirs.seconds
    c.print_table(
        headers,
        [
            _row("save", ours.save, theirs.save),
            _row("restore", ours.restore, theirs.restore),
            _row("save+restore", total, total_theirs),
            _row("incremental save", ours.incremental, theirs.incremental),
        ],
    )
    print("(s: wall time of the child process, spawn to reap; CPU s: its user+system time)")
    print("(s3ckpt in-proc s: the library call inside the child, open_store included: open_store + claim + commit")
    print(" for a save, open_store + latest + restore for a restore; in-proc ratio: that over restic's process wall)")
    print("(written: growth of the repository directory; for restore, the restored file)")
    print("\ns3ckpt child, where the wall time goes (seconds):")
    breakdown = ["step", "child wall", "outside op", "import s3ckpt", "open_store", "claim/latest", "commit/restore",
                 "in-proc", "close", "WriteStats"]  # fmt: skip
    c.print_table(
        breakdown,
        [
            _breakdown_row("save", ours.save),
            _breakdown_row("restore", ours.restore),
            _breakdown_row("incremental save", ours.incremental),
        ],
    )
    print("(outside op: child wall minus in-proc and close = interpreter start, imports, argument parsing, exit)")
    incr_written = max(ours.incremental.written, ours.incremental.uploaded or 0)
    print(
        f"\nincremental bytes: s3ckpt store grew {c.fmt_bytes(ours.incremental.written)} "
        f"(WriteStats.uploaded_bytes {c.fmt_bytes(ours.incremental.uploaded or 0)}) = "
        f"{incr_written / size:.2%} of the artifact; restic repo grew {c.fmt_bytes(theirs.incremental.written)} "
        f"(data_added {c.fmt_bytes(theirs.incremental.uploaded or 0)}) = {theirs.incremental.written / size:.2%}"
    )
    verdicts = c.Verdicts()
    print("\njudged as a worker uses s3ckpt: a library call in a running process (open_store included),")
    print("against restic's process wall time (restic is a process per backup):")
    _in_process_check(verdicts, "save+restore", SAVE_RESTORE_TARGET, total.op_seconds or 0.0, first_theirs)
    _in_process_check(
        verdicts, "incremental save", INCREMENTAL_TIME_TARGET, ours.incremental.op_seconds or 0.0, theirs.incremental.seconds
    )
    verdicts.check(
        "incremental save writes <= 2% of the artifact",
        incr_written <= INCREMENTAL_BYTES_TARGET * size,
        f"{c.fmt_bytes(incr_written)} = {incr_written / size:.2%} of {c.fmt_bytes(size)}",
    )
    outside = ours.incremental.seconds - (ours.incremental.op_seconds or 0.0)
    print("\nfor information, a fresh s3ckpt process per operation (what a CLI user would see; it adds")
    print(f"interpreter start-up and imports, {outside:.2f} s of the incremental child here):")
    print(f"  save+restore {first_ours:.2f} s vs {first_theirs:.2f} s = {c.fmt_ratio(first_ours, first_theirs)}")
    print(
        f"  incremental save {ours.incremental.seconds:.2f} s vs {theirs.incremental.seconds:.2f} s = "
        f"{c.fmt_ratio(ours.incremental.seconds, theirs.incremental.seconds)}"
    )
    return verdicts.summary()


def main() -> int:
    args = parse_args()
    work = c.scratch_dir("s3ckpt-bench-restic-", args.workdir)
    try:
        ours, theirs, s3side, restic_version = run(args, work)
        print(f"\nbench_restic: {c.fmt_bytes(args.size_mib * c.MiB)} artifact; {c.machine_note(work)}")
        print(f"{c.library_note()}, chunker {s3side.chunker}, concurrency {args.concurrency or 'default'}, "
              f"fsync {'off' if args.no_fsync else 'on'}, restore via {args.restore_api}; {restic_version}")  # fmt: skip
        print(f"data: {c.DATA_MIX}\n")
        return report(ours, theirs, args.size_mib * c.MiB)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            c.remove(work)


if __name__ == "__main__":
    sys.exit(main())
