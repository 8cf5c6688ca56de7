"""Helpers shared by the benchmark scripts: test data, measured child processes, restic, tables.

Nothing here is timed on its own; the scripts decide what to measure. Child processes are reaped
with ``os.wait4`` so each one's own peak RSS (``ru_maxrss``) is known exactly, not a maximum over
every child the benchmark ever ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MiB = 1 << 20
GiB = 1 << 30
BENCH_DIR = Path(__file__).resolve().parent
WORKER = BENCH_DIR / "_worker.py"
#: The data mix of every benchmark file, stated once so every report can print it.
DATA_MIX = (
    "alternating 1 MiB segments: 50% seeded-PRNG random bytes (incompressible, like weights), 50% "
    "JSON-lines metric records (~117 B/line, random numbers; zstd ~4.4:1, like logs and optimizer text)"
)
_TAGS = ("train", "eval", "warmup", "decay", "ckpt", "shard-a", "shard-b", "shard-c")


def _record_pool(rng: random.Random, n: int = 1 << 16) -> list[bytes]:
    """Distinct JSON-lines records; segments draw from them at random, so no long run repeats."""
    return [
        (
            f'{{"ts":{1.7e9 + i * 0.137:.3f},"step":{i},"loss":{rng.random() * 4:.6f},"lr":{rng.random() * 1e-3:.4e},'
            f'"tag":"{rng.choice(_TAGS)}","grad_norm":{rng.gauss(1, 0.3):.5f},"tokens":{rng.randrange(1 << 20)}}}\n'
        ).encode()
        for i in range(n)
    ]


def write_mixed_file(path: Path, size: int, *, seed: int = 0, segment: int = MiB) -> None:
    """Write ``size`` bytes of the :data:`DATA_MIX` to ``path`` (fsynced, so it is not dirty later)."""
    rng = random.Random(seed)
    pool = _record_pool(rng)
    lines_per_segment = segment // 100 + 64
    with open(path, "wb") as fh:
        written, index = 0, 0
        while written < size:
            n = min(segment, size - written)
            block = rng.randbytes(n) if index % 2 == 0 else b"".join(rng.choices(pool, k=lines_per_segment))[:n]
            fh.write(block)
            written, index = written + n, index + 1
        fh.flush()
        os.fsync(fh.fileno())


def mutate_file(path: Path, *, fraction: float = 0.01, places: int = 16, seed: int = 1) -> list[tuple[int, int]]:
    """Overwrite ``fraction`` of the file with random bytes, in ``places`` non-overlapping spots.

    The file is cut into ``places`` equal regions and one run of bytes is overwritten at a random
    offset inside each, so the runs never overlap. Returns the (offset, length) pairs.
    """
    size = path.stat().st_size
    length = max(1, int(size * fraction) // places)
    region = size // places
    if region < length:
        raise ValueError(f"file of {size} bytes is too small for {places} edits of {length} bytes")
    rng = random.Random(seed)
    edits = [(i * region + rng.randrange(region - length + 1), length) for i in range(places)]
    with open(path, "r+b") as fh:
        for offset, n in edits:
            fh.seek(offset)
            fh.write(rng.randbytes(n))
        fh.flush()
        os.fsync(fh.fileno())
    return edits


def warm(path: Path) -> None:
    """Read the file once so both sides start with it in the page cache."""
    with open(path, "rb") as fh:
        while fh.read(8 * MiB):
            pass


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(8 * MiB):
            digest.update(block)
    return digest.hexdigest()


def tree_size(root: Path) -> int:
    """Total apparent size of the regular files under ``root``."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                continue
    return total


def default_workdir() -> str | None:
    """``/var/tmp`` where it exists: on disk like ``/tmp`` here, but ``/tmp`` (and ``/work``) on this
    sandbox pay ~1 ms extra per file created (a watcher), which bills a side per object it creates."""
    return "/var/tmp" if os.path.isdir("/var/tmp") and os.access("/var/tmp", os.W_OK) else None


def scratch_dir(prefix: str, base: str | None) -> Path:
    """A fresh temporary directory (under ``base`` if given); the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base or default_workdir()))


def prefault(directory: Path, size: int) -> None:
    """Write and delete ``size`` bytes so later writes reuse memory the VM has already handed over.

    On a fresh VM the first write into a never-touched page of guest memory costs ~5x a reused one
    (measured here: 1.2 s vs 0.23 s per 512 MiB into the page cache); whichever side writes first
    would pay it. Freed page-cache pages are reused by the next writes.
    """
    scratch = directory / ".prefault"
    block = bytes(8 * MiB)
    with open(scratch, "wb") as fh:
        for _ in range(max(1, size // len(block))):
            fh.write(block)
    scratch.unlink()


def create_rate(directory: Path, count: int = 500) -> float:
    """Files created per second in ``directory``: a probe of the metadata cost every object pays."""
    probe = Path(tempfile.mkdtemp(prefix=".probe-", dir=directory))
    start = time.perf_counter()
    for i in range(count):
        os.close(os.open(probe / f"f{i:05d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    rate = count / (time.perf_counter() - start)
    shutil.rmtree(probe, ignore_errors=True)
    return rate


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


# -- measured child processes ------------------------------------------------------------------


@dataclass(frozen=True)
class ChildResult:
    """One child process: wall seconds, its own peak RSS, exit code and output."""

    argv: tuple[str, ...]
    seconds: float
    cpu_seconds: float
    maxrss: int
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> ChildResult:
        if self.returncode != 0:
            raise RuntimeError(
                f"{' '.join(self.argv[:3])} ... exited {self.returncode}\n--- stdout\n{self.stdout[-2000:]}"
                f"\n--- stderr\n{self.stderr[-4000:]}"
            )
        return self

    def json(self) -> dict[str, Any]:
        """The last JSON line the child printed (workers print exactly one)."""
        for line in reversed(self.stdout.splitlines()):
            if line.startswith("{"):
                loaded: dict[str, Any] = json.loads(line)
                return loaded
        raise RuntimeError(f"no JSON result from {' '.join(self.argv[:3])}: {self.stdout[-500:]}")


def run_measured(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> ChildResult:
    """Run ``argv`` to completion; wall time from spawn to reap, peak RSS from ``wait4``."""
    full_env = {**os.environ, **(env or {})}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=full_env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    cpu = usage.ru_utime + usage.ru_stime
    return ChildResult(tuple(argv), seconds, cpu, usage.ru_maxrss * 1024, proc.returncode, stdout, stderr)


def worker_argv(*args: str) -> list[str]:
    """argv for the s3ckpt worker script, run by this interpreter."""
    return [sys.executable, str(WORKER), *args]


def settle() -> None:
    """Flush dirty pages so one side's writeback is not billed to the next side's measurement."""
    os.sync()


# -- restic ------------------------------------------------------------------------------------


def ensure_restic() -> str:
    """The restic binary; installs the Debian package if it is missing."""
    found = shutil.which("restic")
    if found:
        return found
    print("restic not found: installing the Debian package (apt-get install -y restic)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(["apt-get", "install", "-y", "restic"], env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, check=True)
        subprocess.run(["apt-get", "install", "-y", "restic"], env=env, check=True)
    found = shutil.which("restic")
    if not found:
        raise RuntimeError("restic is not installed and could not be installed")
    return found


class Restic:
    """A fresh restic repository in a directory, driven through the CLI."""

    def __init__(self, binary: str, repo: Path, cache: Path) -> None:
        self.binary = binary
        self.repo = repo
        self.env = {
            "RESTIC_REPOSITORY": str(repo),
            "RESTIC_PASSWORD": "s3ckpt-benchmark",
            "RESTIC_CACHE_DIR": str(cache),
        }

    def version(self) -> str:
        return subprocess.run([self.binary, "version"], capture_output=True, text=True, check=True).stdout.strip()

    def init(self) -> None:
        run_measured([self.binary, "init"], env=self.env).check()

    def backup(self, path: Path) -> ChildResult:
        return run_measured([self.binary, "backup", "--json", "--host", "bench", str(path)], env=self.env).check()

    def restore(self, target: Path) -> ChildResult:
        return run_measured([self.binary, "restore", "latest", "--target", str(target)], env=self.env).check()


def restic_summary(result: ChildResult) -> dict[str, Any]:
    for line in reversed(result.stdout.splitlines()):
        if '"message_type":"summary"' in line.replace(" ", ""):
            summary: dict[str, Any] = json.loads(line)
            return summary
    return {}


# -- output ------------------------------------------------------------------------------------


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_ratio(num: float, den: float) -> str:
    return f"{num / den:.2f}x" if den else "n/a"


def print_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


@dataclass
class Verdicts:
    """PASS/FAIL lines, printed as they are decided, and the exit code they add up to."""

    failed: int = 0
    total: int = 0

    def check(self, name: str, ok: bool, detail: str) -> bool:
        self.total += 1
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}: {name}: {detail}")
        return ok

    def summary(self) -> int:
        print(f"\n{self.total - self.failed} of {self.total} targets met")
        return 1 if self.failed else 0


def library_note() -> str:
    """Which s3ckpt this run measured: version, where it was imported from, and its git commit when
    that directory is a git work tree (``+dirty`` if the package has uncommitted changes)."""
    import s3ckpt

    package = Path(s3ckpt.__file__).resolve().parent
    note = f"s3ckpt {s3ckpt.__version__} from {package}"
    try:
        git = ["git", "-C", str(package)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return note
    return f"{note} (git {commit.stdout.strip()}{'+dirty' if dirty.stdout.strip() else ''})"


def machine_note(workdir: Path | None = None) -> str:
    load = os.getloadavg()
    note = f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, Python {sys.version.split()[0]}"
    if workdir is not None:
        note += f"; workdir {workdir} creates {create_rate(workdir):.0f} files/s"
    return note
