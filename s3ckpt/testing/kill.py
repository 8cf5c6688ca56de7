"""kill_and_resume: prove a workflow resumable by killing it, everywhere it can be killed.

A checkpoint is proven complete only by killing the process, resuming in another with nothing
carried over, and comparing the outcome with a run that was never interrupted. This module does
that for a user's workload (a function ``workload(session, world)`` importable by name):

1. one uninterrupted reference run, counting how often each boundary is passed;
2. for every boundary and every pass of it (or a sample), a run killed with SIGKILL right there,
   plus runs killed at random times;
3. each killed run resumed in a fresh process, from a fresh working directory: first without a
   reconciler (an unknown effect must be surfaced, and nothing sent), then with one that asks
   the world;
4. the final state, the completed steps, the effects and their deliveries, the step bodies run
   and the budget compared with the reference. Differences are listed per kill point, readably.

Runs are processes forked from a clean single-threaded server (``_forkserver``), so a kill point
costs the workload's own time, not an interpreter start.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._boundaries import BOUNDARIES
from ._child import UNKNOWN_OUTCOME
from .world import World

__all__ = ["BOUNDARIES", "KillPoint", "Outcome", "Report", "StoreTarget", "Trial", "kill_and_resume"]


@dataclass(frozen=True)
class StoreTarget:
    """Where the runs' store lives, as a child process opens it."""

    url: str
    key: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KillPoint:
    """Die at the ``occurrence``-th pass of ``point``, or ``delay`` seconds after starting."""

    point: str | None = None
    occurrence: int = 0
    delay: float | None = None

    def __str__(self) -> str:
        return f"{self.point} #{self.occurrence}" if self.point else f"at random, {self.delay:.3f} s in"


@dataclass
class Outcome:
    """What a run left behind: in the store, and in the world."""

    state: Any
    steps: dict[str, Any]  # step key -> result
    effects: dict[str, dict[str, Any]]  # position -> kind, payload hash, status
    budget: dict[str, float]
    deliveries: dict[str, int]  # position -> times delivered ("?<key>" when not in the ledger)
    executions: dict[str, int]  # step key -> times its body started

    def comparable(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "steps": self.steps,
            "effects": self.effects,
            "deliveries": self.deliveries,
            "budget": self.budget,
            "executions": self.executions,
        }


@dataclass
class Trial:
    kill: KillPoint
    killed: bool = False
    resumes: int = 0
    surfaced_unknown: bool = False
    outcome: Outcome | None = None
    problems: list[str] = field(default_factory=list)
    log: str = ""


@dataclass
class Report:
    reference: Outcome
    passes: dict[str, int]  # boundary -> passes in the reference run
    trials: list[Trial]

    @property
    def kill_points(self) -> int:
        """Runs that were really killed (a random kill may come after the run finished)."""
        return sum(1 for t in self.trials if t.killed)

    @property
    def failed(self) -> list[Trial]:
        return [t for t in self.trials if t.problems]

    def summary(self) -> str:
        by_point = Counter(t.kill.point or "random" for t in self.trials if t.killed)
        points = ", ".join(f"{p} {n}" for p, n in sorted(by_point.items()))
        surfaced = sum(1 for t in self.trials if t.surfaced_unknown)
        return (
            f"{self.kill_points} kill points ({points}); {surfaced} surfaced an unknown effect before reconciling; "
            f"{len(self.failed)} failed"
        )

    def render(self) -> str:
        parts = [self.summary()]
        reference = json.dumps(self.reference.comparable(), indent=1, sort_keys=True, default=str).splitlines()
        for trial in self.failed:
            parts.append(f"\n== killed at {trial.kill}: " + "; ".join(trial.problems))
            if trial.outcome is not None:
                got = json.dumps(trial.outcome.comparable(), indent=1, sort_keys=True, default=str).splitlines()
                parts.extend(difflib.unified_diff(reference, got, "uninterrupted", "killed and resumed", lineterm="", n=2))
            if trial.log:
                parts.append("-- child output --\n" + trial.log[-3000:])
        return "\n".join(parts)

    def assert_ok(self) -> None:
        if self.failed:
            raise AssertionError(self.render())


class _Processes:
    """Fresh processes from a fork server (see ``_forkserver``)."""

    def __init__(self, preload: Iterable[str]) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._server = subprocess.Popen(
            [sys.executable, "-m", "s3ckpt.testing._forkserver", *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            bufsize=1,
        )
        self._lock = threading.Lock()
        self._next = 0
        self._started: dict[int, Future[int]] = {}
        self._exited: dict[int, Future[int]] = {}
        assert self._server.stdout is not None
        ready = self._server.stdout.readline()
        if not ready:
            raise RuntimeError("the s3ckpt.testing fork server did not start")
        self._reader = threading.Thread(target=self._read, daemon=True, name="s3ckpt-forkserver")
        self._reader.start()

    def _read(self) -> None:
        assert self._server.stdout is not None
        for line in self._server.stdout:
            message = json.loads(line)
            if "started" in message:
                self._started[message["started"]].set_result(message["pid"])
            elif "exited" in message:
                self._exited[message["exited"]].set_result(message["returncode"])

    def start(self, spec: Path, cwd: Path, out: Path) -> tuple[int, Future[int]]:
        with self._lock:
            run, self._next = self._next, self._next + 1
            self._started[run], self._exited[run] = Future(), Future()
            assert self._server.stdin is not None
            self._server.stdin.write(json.dumps({"run": run, "spec": str(spec), "cwd": str(cwd), "out": str(out)}) + "\n")
            self._server.stdin.flush()
        return self._started[run].result(timeout=60), self._exited[run]

    def close(self) -> None:
        if self._server.stdin is not None:
            self._server.stdin.close()
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()


class _Harness:
    def __init__(self, workload: str, store: StoreTarget, workdir: Path, settings: dict[str, Any], timeout: float) -> None:
        self.workload, self.store, self.workdir = workload, store, workdir
        self.settings, self.timeout = settings, timeout
        module = workload.partition(":")[0]
        self.processes = _Processes(["s3ckpt", "s3ckpt.session", "s3ckpt.testing._child", module])

    def child(self, name: str, run_id: str, world: World, *, kill: KillPoint | None = None, reconcile: bool,
              passes: Path | None = None) -> tuple[int, str]:  # fmt: skip
        """Run the workload once; returns its exit code (-9: killed) and its output."""
        cwd = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir))  # a new working directory per process
        spec = {
            "workload": self.workload,
            "url": self.store.url,
            "key": self.store.key,
            "options": dict(self.store.options),
            "run_id": run_id,
            "world": str(world.root),
            "reconcile": reconcile,
            "kill": {"point": kill.point, "occurrence": kill.occurrence} if kill and kill.point else None,
            "passes": str(passes) if passes else None,
            **self.settings,
        }
        spec_path, out = cwd / "spec.json", cwd / "output.txt"
        spec_path.write_text(json.dumps(spec))
        pid, exited = self.processes.start(spec_path, cwd, out)
        if kill is not None and kill.delay is not None:
            try:
                exited.result(timeout=kill.delay)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):  # it may just have finished
                    os.kill(pid, signal.SIGKILL)
        code = exited.result(timeout=self.timeout)
        return code, out.read_text(errors="replace")

    def outcome(self, run_id: str, world: World) -> Outcome:
        import s3ckpt

        with s3ckpt.open_store(self.store.url, key=self.store.key, create=False, **dict(self.store.options)) as store:
            latest = store.run(run_id).latest(validate="full")
            if latest is None:
                raise AssertionError(f"run {run_id!r} has no checkpoint")
            position = {e.idempotency_key: e.position for e in latest.effects}
            deliveries: Counter[str] = Counter()
            for key, n in world.delivered_keys().items():
                deliveries[position.get(key, "?" + key)] += n
            executions = Counter(e["detail"] for e in world.events() if e["event"] == "step-start")
            return Outcome(
                state=latest.state,
                steps={key: step.result for key, step in latest.steps.items()},
                effects={
                    e.position: {"kind": e.kind, "payload_hash": e.payload_hash, "status": e.status} for e in latest.effects
                },
                budget=dict(latest.budget),
                deliveries=dict(sorted(deliveries.items())),
                executions=dict(sorted(executions.items())),
            )

    def reference(self) -> tuple[Outcome, dict[str, int], float]:
        world = World(self.workdir / "reference" / "world")
        passes = self.workdir / "reference" / "passes.json"
        run_id = f"reference-{uuid.uuid4().hex[:8]}"
        started = time.monotonic()
        code, output = self.child("reference", run_id, world, reconcile=True, passes=passes)
        elapsed = time.monotonic() - started
        if code != 0:
            raise AssertionError(f"the uninterrupted reference run failed (exit {code}):\n{output[-3000:]}")
        return self.outcome(run_id, world), json.loads(passes.read_text()), elapsed

    def trial(self, index: int, kill: KillPoint, reference: Outcome) -> Trial:
        trial = Trial(kill)
        world = World(self.workdir / f"trial-{index}" / "world")
        run_id = f"trial-{index}-{uuid.uuid4().hex[:8]}"
        code, output = self.child(f"t{index}-killed", run_id, world, kill=kill, reconcile=True)
        trial.log = output
        trial.killed = code == -9
        if kill.point is not None and not trial.killed:
            trial.problems.append(f"expected to die at {kill}, exited {code}")
            return trial
        killed_events = world.events()
        if trial.killed or code == UNKNOWN_OUTCOME:
            # First without a reconciler: an effect in doubt must stop the resume before anything is sent.
            delivered = world.delivered_keys()
            code, output = self.child(f"t{index}-resume", run_id, world, reconcile=False)
            trial.resumes += 1
            trial.log += output
            if code == UNKNOWN_OUTCOME:
                trial.surfaced_unknown = True
                if world.delivered_keys() != delivered:
                    trial.problems.append("a resume that raised UnknownOutcomeError sent something")
                code, output = self.child(f"t{index}-reconcile", run_id, world, reconcile=True)
                trial.resumes += 1
                trial.log += output
        if code != 0:
            trial.problems.append(f"the resumed run exited {code}")
            return trial
        trial.outcome = self.outcome(run_id, world)
        trial.problems += _differences(reference, trial.outcome, _interrupted(killed_events))
        return trial


def _interrupted(events: list[dict[str, Any]]) -> set[str]:
    """Step bodies the kill interrupted: started, not committed."""
    open_steps: set[str] = set()
    for event in events:
        if event["event"] == "step-start":
            open_steps.add(event["detail"])
        elif event["event"] == "step-committed":
            open_steps.discard(event["detail"])
    return open_steps


def _differences(reference: Outcome, got: Outcome, interrupted: set[str]) -> list[str]:
    problems = []
    if got.state != reference.state:
        problems.append("final state differs")
    if got.steps != reference.steps:
        problems.append("completed steps differ")
    if got.effects != reference.effects:
        problems.append("effects differ")
    duplicated = sorted(p for p, n in got.deliveries.items() if n > 1)
    if duplicated:
        problems.append(f"delivered more than once: {', '.join(duplicated)}")
    if got.deliveries != reference.deliveries and not duplicated:
        problems.append("deliveries differ")
    for key in sorted(set(got.executions) | set(reference.executions)):
        allowed = reference.executions.get(key, 0) + (1 if key in interrupted else 0)
        if got.executions.get(key, 0) > allowed:
            problems.append(f"step body {key} ran {got.executions[key]} times (a committed step ran again)")
        elif got.executions.get(key, 0) < reference.executions.get(key, 0):
            problems.append(f"step body {key} ran {got.executions.get(key, 0)} times, fewer than uninterrupted")
    if interrupted:
        # A re-run body spends again what a commit inside it had saved; spending is never lost.
        lost = set(got.budget) != set(reference.budget) or any(got.budget[u] < v - 1e-9 for u, v in reference.budget.items())
        if lost:
            problems.append("budget lost spending")
    elif got.budget != reference.budget:
        problems.append("budget differs")
    return problems


def kill_and_resume(
    workload: str | Callable[..., Any],
    store: StoreTarget,
    *,
    workdir: str | os.PathLike[str] | None = None,
    workflow: str = "workload",
    workflow_version: str = "1",
    budget: Mapping[str, float] | None = None,
    points: Iterable[str] = BOUNDARIES,
    per_point: int | None = None,
    random_kills: int = 0,
    seed: int = 0,
    parallel: int | None = None,
    timeout: float = 120.0,
    check: bool = True,
) -> Report:
    """Kill ``workload`` at every pass of every boundary in ``points`` (at most ``per_point``
    passes each, spread evenly) and ``random_kills`` times at random, resume each in a fresh
    process, and compare with an uninterrupted run. Raises AssertionError with a readable diff
    when ``check`` and any run differs; returns the Report either way otherwise.

    ``workload`` is ``"module:function"`` (or a module-level function): ``function(session,
    world)`` runs the workflow in an open Session, and delivers every effect through
    ``world.deliver(kind, idempotency_key, payload)`` so that deliveries are counted outside the
    process. Runs are separate run ids in ``store``.
    """
    name = workload if isinstance(workload, str) else f"{workload.__module__}:{workload.__qualname__}"
    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="s3ckpt-kill-"))
    root.mkdir(parents=True, exist_ok=True)
    settings = {"workflow": workflow, "workflow_version": workflow_version, "budget": dict(budget) if budget else None}
    harness = _Harness(name, store, root, settings, timeout)
    try:
        reference, passes, elapsed = harness.reference()
        rng = random.Random(seed)
        kills = [KillPoint(point, occurrence) for point in points for occurrence in _spread(passes.get(point, 0), per_point)]
        kills += [KillPoint(delay=rng.uniform(0.05, max(0.1, elapsed))) for _ in range(random_kills)]
        with ThreadPoolExecutor(max_workers=parallel or os.cpu_count() or 2) as pool:
            trials = list(pool.map(lambda item: harness.trial(item[0], item[1], reference), enumerate(kills)))
    finally:
        harness.processes.close()
    report = Report(reference, passes, trials)
    if check:
        report.assert_ok()
    return report


def _spread(passes: int, limit: int | None) -> list[int]:
    """Which passes to kill at: all of them, or ``limit`` spread from first to last."""
    if limit is None or passes <= limit:
        return list(range(1, passes + 1))
    if limit <= 1:
        return [1] if limit == 1 else []
    return sorted({1 + round(i * (passes - 1) / (limit - 1)) for i in range(limit)})
