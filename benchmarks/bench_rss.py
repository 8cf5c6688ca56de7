"""Peak RSS of saving and restoring a 1 GiB file with s3ckpt, next to restic backup and restore.

    python benchmarks/bench_rss.py                  # 1 GiB (the target size)
    python benchmarks/bench_rss.py --size-mib 256   # quicker
    python benchmarks/bench_rss.py --concurrency 4  # try a store option

The file is generated on disk by this process first; every measured operation then runs in a fresh
child process whose own peak RSS (``ru_maxrss`` from ``wait4``) is reported. A child that only
imports s3ckpt is measured too, to show the fixed cost of the interpreter and its imports.

s3ckpt restores with Checkpoint.restore_artifact() (parallel fetch, verify and pwrite into a temporary
file renamed into place); ``--restore-api open_artifact`` streams open_artifact() through
shutil.copyfileobj instead.

Target: saving the file peaks at <= 256 MiB RSS. Restoring is held to the same bound.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import _common as c

import s3ckpt

RSS_TARGET = 256 * c.MiB


@dataclass(frozen=True)
class Measured:
    seconds: float
    cpu_seconds: float
    maxrss: int


def _measured(result: c.ChildResult) -> Measured:
    return Measured(result.seconds, result.cpu_seconds, result.maxrss)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024, help="file size in MiB (default 1024)")
    parser.add_argument("--workdir", default=None, help="where to put the data and both repositories (default: /var/tmp)")
    parser.add_argument("--concurrency", type=int, default=0, help="s3ckpt store concurrency (default: library default)")
    parser.add_argument(
        "--restore-api",
        choices=("restore_artifact", "open_artifact"),
        default="restore_artifact",
        help="how s3ckpt restores to a file: Checkpoint.restore_artifact() (default) or open_artifact() streamed",
    )
    parser.add_argument("--skip-restic", action="store_true", help="measure s3ckpt only")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser.parse_args()


def measure_s3ckpt(args: argparse.Namespace, work: Path, data: Path, expected: str) -> dict[str, Measured]:
    env = {"S3CKPT_KEY": s3ckpt.generate_key()}
    store = work / "s3ckpt-store"
    common = ["--store", str(store), "--run", "bench"]
    if args.concurrency:
        common += ["--concurrency", str(args.concurrency)]
    idle = c.run_measured(c.worker_argv("idle"), env=env).check()
    c.run_measured(c.worker_argv("init", "--store", str(store)), env=env).check()
    c.settle()
    save = c.run_measured(c.worker_argv("save", *common, "--file", str(data)), env=env).check()
    restored = work / "s3ckpt-restored.bin"
    c.settle()
    argv = c.worker_argv("restore", *common, "--out", str(restored), "--restore-api", args.restore_api)
    restore = c.run_measured(argv, env=env).check()
    if c.sha256_file(restored) != expected:
        raise RuntimeError("s3ckpt restored different bytes")
    c.remove(restored)
    return {
        "idle": _measured(idle),
        "save": _measured(save),
        "restore": _measured(restore),
    }


def measure_restic(work: Path, data: Path, expected: str) -> dict[str, Measured]:
    restic = c.Restic(c.ensure_restic(), work / "restic-repo", work / "restic-cache")
    restic.init()
    c.settle()
    save = restic.backup(data)
    target = work / "restic-restored"
    c.settle()
    restore = restic.restore(target)
    if c.sha256_file(target / data.relative_to(data.anchor)) != expected:
        raise RuntimeError("restic restored different bytes")
    c.remove(target)
    return {"save": _measured(save), "restore": _measured(restore)}


def _cells(m: Measured | None) -> tuple[str, str, str]:
    return (c.fmt_bytes(m.maxrss), f"{m.seconds:.2f}", f"{m.cpu_seconds:.2f}") if m else ("-", "-", "-")


def report(ours: dict[str, Measured], theirs: dict[str, Measured], size: int) -> int:
    rows = []
    for step, label in (("idle", "idle child (imports only)"), ("save", "save"), ("restore", "restore")):
        mine, other = ours[step], theirs.get(step)
        ratio = c.fmt_ratio(mine.maxrss, other.maxrss) if other else "-"
        rows.append([label, *_cells(mine), *_cells(other), ratio])
    headers = ["step", "s3ckpt peak RSS", "s3ckpt s", "s3ckpt CPU s", "restic peak RSS", "restic s", "restic CPU s"]
    c.print_table([*headers, "RSS ratio"], rows)
    verdicts = c.Verdicts()
    print()
    for step in ("save", "restore"):
        peak = ours[step].maxrss
        verdicts.check(
            f"{step} of {c.fmt_bytes(size)}: peak RSS <= {c.fmt_bytes(RSS_TARGET)}",
            peak <= RSS_TARGET,
            f"{c.fmt_bytes(peak)} ({c.fmt_bytes(peak - ours['idle'].maxrss)} above an idle interpreter with s3ckpt imported)",
        )
    return verdicts.summary()


def main() -> int:
    args = parse_args()
    size = args.size_mib * c.MiB
    work = c.scratch_dir("s3ckpt-bench-rss-", args.workdir)
    try:
        data = work / "big.bin"
        print(f"generating {c.fmt_bytes(size)} at {data} (in this process, before any measured child)", flush=True)
        c.write_mixed_file(data, size)
        expected = c.sha256_file(data)  # also warms the page cache
        c.prefault(work, 2 * size)
        print("measuring s3ckpt save and restore in fresh children ...", flush=True)
        ours = measure_s3ckpt(args, work, data, expected)
        theirs: dict[str, Measured] = {}
        if not args.skip_restic:
            print("measuring restic backup and restore ...", flush=True)
            theirs = measure_restic(work, data, expected)
        print(f"\nbench_rss: {c.fmt_bytes(size)} file; {c.machine_note(work)}")
        print(f"{c.library_note()}, concurrency {args.concurrency or 'default'}, restore via {args.restore_api}")
        print(f"data: {c.DATA_MIX}\n")
        return report(ours, theirs, size)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            c.remove(work)


if __name__ == "__main__":
    sys.exit(main())
