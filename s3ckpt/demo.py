"""``s3ckpt demo``: a worker is killed with SIGKILL mid-run and a fresh process finishes the run.

The worker commits one checkpoint per step. Each step also appends a line to a journal outside
the store (standing in for "the world"), so the demo can show which step bodies ran, and in which
process. A step that was in flight when the worker died had not committed, so it runs again; no
step that committed ever runs twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .store import open_store

#: The meta that `s3ckpt runs` reads as "finished" (cli.FINISHED_META, not imported: the worker
#: process stays light).
FINISHED = {"status": "finished"}
DEFAULT_STEPS = 8
KILL_AFTER = 3
STEP_SECONDS = 0.3


def run_worker(url: str, run_id: str, steps: int, journal: Path, step_seconds: float, options: dict[str, Any]) -> None:
    """The workload: resume from the latest checkpoint, do the remaining steps, one commit each."""
    with open_store(url, **options) as store:
        run = store.run(run_id)
        writer = run.claim(workflow="demo", workflow_version="1")
        latest = run.latest()
        state: dict[str, Any] = latest.state if latest is not None else {"next_step": 0, "results": []}
        for step in range(state["next_step"], steps):
            with journal.open("a") as fh:
                fh.write(json.dumps({"step": step, "pid": os.getpid(), "event": "start"}) + "\n")
            time.sleep(step_seconds)  # the expensive part a resume must not repeat
            result = hashlib.sha256(f"step-{step}".encode()).hexdigest()[:12]
            state = {"next_step": step + 1, "results": [*state["results"], result]}
            # The last commit marks the run finished, as `s3ckpt runs` reads it.
            writer.commit(state, meta={"step": step, **(FINISHED if step == steps - 1 else {})})
            with journal.open("a") as fh:
                fh.write(json.dumps({"step": step, "pid": os.getpid(), "event": "committed"}) + "\n")


@dataclass
class DemoResult:
    ok: bool
    lines: list[str]
    #: Where the store is, and the file that holds its key (None: the store went with the demo).
    url: str | None = None
    key_file: Path | None = None


def _spawn(url: str, run_id: str, steps: int, journal: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "s3ckpt.demo", url, run_id, str(steps), str(journal)]
    return subprocess.Popen(args, env=env, cwd=cwd)


def run_demo(*, use_s3: bool = False, steps: int = DEFAULT_STEPS, echo: Any = print) -> DemoResult:
    from .crypto import generate_key

    workdir = Path(tempfile.mkdtemp(prefix="s3ckpt-demo-"))
    journal = workdir / "journal.jsonl"
    key = generate_key()
    key_file = workdir / "key"
    key_file.touch(mode=0o600)
    key_file.write_text(key + "\n")
    env = {**os.environ, "S3CKPT_KEY": key}
    server = None
    options: dict[str, Any] = {"key": key}
    if use_s3:
        server, url, s3_env = _start_moto()
        env.update(s3_env)
        options.update(endpoint_url=s3_env["AWS_ENDPOINT_URL"], region="us-east-1")
        os.environ.update(s3_env)
    else:
        url = str(workdir / "store")
    run_id = "demo-run"
    try:
        echo(f"store: {url}   (local directory, the embedded default)" if not use_s3 else f"store: {url} on moto S3")
        first_cwd = workdir / "host-a"
        first_cwd.mkdir()
        proc = _spawn(url, run_id, steps, journal, env, first_cwd)
        echo(f"worker 1 (pid {proc.pid}) started: {steps} steps, one checkpoint per step")
        committed = _wait_for_commits(url, run_id, KILL_AFTER, options, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        echo(f"worker 1 killed with SIGKILL after {committed} committed steps")
        second_cwd = workdir / "host-b"
        second_cwd.mkdir()
        proc2 = _spawn(url, run_id, steps, journal, env, second_cwd)
        echo(f"worker 2 (pid {proc2.pid}) started in a fresh process and directory, resuming")
        if proc2.wait(timeout=120) != 0:
            return DemoResult(False, [f"worker 2 failed with exit status {proc2.returncode}"])
        result = _check(url, run_id, steps, journal, options, killed_pid=proc.pid)
        result.lines.extend(_where(url, key_file, use_s3=use_s3))
        if not use_s3:
            result.url, result.key_file = url, key_file
        return result
    finally:
        if server is not None:
            server.stop()


def _wait_for_commits(url: str, run_id: str, n: int, options: dict[str, Any], proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 60
    with open_store(url, **options) as store:
        while time.monotonic() < deadline:
            latest = store.run(run_id).latest()
            done = 0 if latest is None else int(latest.state["next_step"])
            if done >= n:
                return done
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited early with status {proc.returncode}")
            time.sleep(0.02)
    raise RuntimeError("worker made no progress in 60 s")


def _check(url: str, run_id: str, steps: int, journal: Path, options: dict[str, Any], *, killed_pid: int) -> DemoResult:
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    with open_store(url, **options) as store:
        history = list(store.run(run_id).history())
        latest = store.run(run_id).latest()
    commits: dict[int, list[int]] = {}
    starts: dict[int, list[int]] = {}
    for ev in events:
        (commits if ev["event"] == "committed" else starts).setdefault(ev["step"], []).append(ev["pid"])
    lines = []
    ok = latest is not None and latest.state["next_step"] == steps and len(history) == steps
    committed_steps = [cp.meta["step"] for cp in history]
    ok = ok and committed_steps == list(range(steps))
    for step in range(steps):
        ran = starts.get(step, [])
        note = ""
        if len(ran) > 1:
            # Only a step that never committed may run again.
            in_flight = ran[0] == killed_pid and killed_pid not in commits.get(step, [])
            note = "ran again: it was in flight, uncommitted, when worker 1 died" if in_flight else "REPEATED"
            ok = ok and in_flight
        who = "worker 1" if ran and ran[-1] == killed_pid else "worker 2"
        lines.append(f"step {step}: committed by {who}{'  (' + note + ')' if note else ''}")
    lines.append(
        "the run finished with no committed step repeated"
        if ok
        else "FAILED: a committed step ran twice or the log is incomplete"
    )
    return DemoResult(ok, lines)


def _where(url: str, key_file: Path, *, use_s3: bool) -> list[str]:
    """How to look at the demo's store afterwards (the moto server stops with the demo)."""
    if use_s3:
        return [f"the store was {url} on a moto server that stopped with the demo; `s3ckpt demo` keeps a local one"]
    from .cli import open_command

    return [
        f"the store is in {url}, its key in {key_file}; open it with:",
        f"  {open_command(url, str(key_file))}",
    ]


def _start_moto() -> tuple[Any, str, dict[str, str]]:
    try:
        import boto3

        from .testing import MotoServer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SystemExit(f"`s3ckpt demo --s3` needs moto: pip install -e '.[dev]' ({exc})") from None
    s3_env = {
        "AWS_ACCESS_KEY_ID": "demo",
        "AWS_SECRET_ACCESS_KEY": "demo",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    os.environ.update(s3_env)
    server = MotoServer().start()
    s3_env["AWS_ENDPOINT_URL"] = server.endpoint_url
    boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1").create_bucket(Bucket="s3ckpt-demo")
    return server, "s3://s3ckpt-demo/checkpoints", s3_env


if __name__ == "__main__":
    _url, _run_id, _steps, _journal = sys.argv[1:5]
    _options: dict[str, Any] = {}
    if os.environ.get("AWS_ENDPOINT_URL"):
        _options = {"endpoint_url": os.environ["AWS_ENDPOINT_URL"], "region": "us-east-1"}
    run_worker(_url, _run_id, int(_steps), Path(_journal), STEP_SECONDS, _options)
