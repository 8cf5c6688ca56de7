"""kill_and_resume: prove a workflow resumable by killing it, everywhere it can be killed.

A checkpoint is proven complete only by killing the process, resuming in another with nothing
carried over, and comparing the outcome with a run that was never interrupted. This module does
that for a user's workload (a function ``workload(session, world)`` importable by name):

1. one uninterrupted reference run, counting how often each boundary is passed;
2. for every boundary and every pass of it (or a sample), a run killed with SIGKILL right there,
   plus runs killed at random times. A random kill that comes after the run has ended kills
   nothing; it is tried again in a new run with a new delay within the shortest run seen, and
   after ``_RANDOM_ATTEMPTS`` misses it falls back to a boundary pass drawn at random. So every
   planned kill is a kill, and how many there are never depends on the machine's speed;
3. each killed run resumed in a fresh process, from a fresh working directory: first without a
   reconciler (an unknown effect must be surfaced, and nothing sent), then with one that asks
   the world;
4. the final state, the completed steps, the effects and their deliveries, the step bodies run
   and the budget compared with the reference. Differences are listed per kill point, readably.

Runs are processes forked from a clean single-threaded server (``_forkserver``), so a kill point
costs the workload's own time, not an interpreter start.
"""

from __future__ import annotations

import difflib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from .._boundaries import BOUNDARIES
from ._child import UNKNOWN_OUTCOME
from .world import World

__all__ = ["BOUNDARIES", "KillPoint", "Outcome", "Report", "StoreTarget", "Trial", "kill_and_resume"]

#: Tries of a random kill before it falls back to a boundary pass. A retry's delay is drawn below
#: the shortest run measured so far, so a miss needs the machine to speed up again and again.
_RANDOM_ATTEMPTS = 8


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
    kill: KillPoint  # where the run was killed (a random kill's last try, or its fallback)
    planned: KillPoint | None = None  # the kill as first planned (defaults to ``kill``)
    #: tries of a random kill that came after the run had ended, each followed by a new run
    misses: int = 0
    killed: bool = False
    resumes: int = 0
    surfaced_unknown: bool = False
    outcome: Outcome | None = None
    problems: list[str] = field(default_factory=list)
    log: str = ""

    def __post_init__(self) -> None:
        if self.planned is None:
            self.planned = self.kill

    @property
    def fell_back(self) -> bool:
        """A random kill that missed every try and was made at a boundary pass instead."""
        return self.planned is not None and self.planned.point is None and self.kill.point is not None


@dataclass
class Report:
    reference: Outcome
    passes: dict[str, int]  # boundary -> passes in the reference run
    trials: list[Trial]

    @property
    def kill_points(self) -> int:
        """Runs that were really killed: every planned kill, unless a run failed before its kill."""
        return sum(1 for t in self.trials if t.killed)

    @property
    def random_misses(self) -> int:
        """Random kills that came after the run had ended, and were tried again in a new run."""
        return sum(t.misses for t in self.trials)

    @property
    def failed(self) -> list[Trial]:
        return [t for t in self.trials if t.problems]

    def summary(self) -> str:
        by_point = Counter(t.kill.point if t.planned and t.planned.point else "random" for t in self.trials if t.killed)
        points = ", ".join(f"{p} {n}" for p, n in sorted(by_point.items()))
        surfaced = sum(1 for t in self.trials if t.surfaced_unknown)
        retried = ""
        if self.random_misses:
            fell_back = sum(1 for t in self.trials if t.fell_back)
            retried = f"; {self.random_misses} random kills came after the run had ended and were tried again"
            retried += f" ({fell_back} fell back to a boundary pass)" if fell_back else ""
        return (
            f"{self.kill_points} kill points ({points}){retried}; {surfaced} surfaced an unknown effect before "
            f"reconciling; {len(self.failed)} failed"
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
        """Fork a run; returns its number (for ``kill``) and its exit status to come."""
        with self._lock:
            run, self._next = self._next, self._next + 1
            self._started[run], self._exited[run] = Future(), Future()
            assert self._server.stdin is not None
            self._server.stdin.write(json.dumps({"run": run, "spec": str(spec), "cwd": str(cwd), "out": str(out)}) + "\n")
            self._server.stdin.flush()
        self._started[run].result(timeout=60)
        return run, self._exited[run]

    def kill(self, run: int) -> None:
        """SIGKILL ``run``, by its parent, which knows whether it is still running."""
        with self._lock:
            assert self._server.stdin is not None
            self._server.stdin.write(json.dumps({"kill": run}) + "\n")
            self._server.stdin.flush()

    def close(self) -> None:
        if self._server.stdin is not None:
            self._server.stdin.close()
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()


class _Exit(NamedTuple):
    code: int  # -9: killed
    output: str
    seconds: float  # from the fork to the exit


class _Harness:
    def __init__(
        self, workload: str, store: StoreTarget, workdir: Path, settings: dict[str, Any], timeout: float, seed: int
    ) -> None:
        self.workload, self.store, self.workdir = workload, store, workdir
        self.settings, self.timeout, self.seed = settings, timeout, seed
        module = workload.partition(":")[0]
        self.processes = _Processes(["s3ckpt", "s3ckpt.session", "s3ckpt.testing._child", module])

    def child(self, name: str, run_id: str, world: World, *, kill: KillPoint | None = None, reconcile: bool,
              passes: Path | None = None) -> _Exit:  # fmt: skip
        """Run the workload once, killed at ``kill`` if it is still running then."""
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
        started = time.monotonic()
        run, exited = self.processes.start(spec_path, cwd, out)
        if kill is not None and kill.delay is not None:
            try:
                exited.result(timeout=kill.delay)
            except TimeoutError:
                self.processes.kill(run)  # a no-op if it has just finished: its exit code says which
        code = exited.result(timeout=self.timeout)
        return _Exit(code, out.read_text(errors="replace"), time.monotonic() - started)

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
        code, output, seconds = self.child("reference", run_id, world, reconcile=True, passes=passes)
        if code != 0:
            raise AssertionError(f"the uninterrupted reference run failed (exit {code}):\n{output[-3000:]}")
        return self.outcome(run_id, world), json.loads(passes.read_text()), seconds

    def killed_run(self, index: int, trial: Trial, shortest: float, fallback: Sequence[KillPoint]) -> tuple[str, World, int]:
        """Run until ``trial.kill`` lands: a random kill that came after the run ended is tried again,
        in a new run, with a new delay below the shortest run seen; then at a boundary pass."""
        rng = random.Random(f"{self.seed}:{index}")  # per trial: the draws do not depend on scheduling
        while True:
            world = World(self.workdir / f"trial-{index}" / f"try-{trial.misses}" / "world")
            run_id = f"trial-{index}-{uuid.uuid4().hex[:8]}"
            code, output, seconds = self.child(f"t{index}-killed", run_id, world, kill=trial.kill, reconcile=True)
            trial.log += output
            if code != 0 or trial.kill.delay is None:
                return run_id, world, code
            trial.misses += 1
            shortest = min(shortest, seconds)
            if trial.misses < _RANDOM_ATTEMPTS:
                trial.kill = KillPoint(delay=rng.uniform(0.1 * shortest, 0.9 * shortest))
            elif fallback:
                trial.kill = rng.choice(fallback)
            else:
                return run_id, world, code  # the workload passes no boundary: nothing to fall back on

    def trial(self, index: int, kill: KillPoint, reference: Outcome, shortest: float, fallback: Sequence[KillPoint]) -> Trial:
        trial = Trial(kill)
        run_id, world, code = self.killed_run(index, trial, shortest, fallback)
        trial.killed = code == -9
        if not trial.killed:
            trial.problems.append(f"expected to die at {trial.kill}, exited {code}")
            return trial
        killed_events = world.events()
        # First without a reconciler: an effect in doubt must stop the resume before anything is sent.
        delivered = world.delivered_keys()
        code, output, _ = self.child(f"t{index}-resume", run_id, world, reconcile=False)
        trial.resumes += 1
        trial.log += output
        if code == UNKNOWN_OUTCOME:
            trial.surfaced_unknown = True
            if world.delivered_keys() != delivered:
                trial.problems.append("a resume that raised UnknownOutcomeError sent something")
            code, output, _ = self.child(f"t{index}-reconcile", run_id, world, reconcile=True)
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

    Every planned kill is a kill: a random one that comes after the run has ended is tried again
    in a new run (``Report.random_misses`` counts these), so ``Report.kill_points`` is the number
    of planned kills whenever no run failed, however fast or loaded the machine is.

    ``workload`` is ``"module:function"`` (or a module-level function): ``function(session,
    world)`` runs the workflow in an open Session, and delivers every effect through
    ``world.deliver(kind, idempotency_key, payload)`` so that deliveries are counted outside the
    process. Runs are separate run ids in ``store``.
    """
    name = workload if isinstance(workload, str) else f"{workload.__module__}:{workload.__qualname__}"
    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="s3ckpt-kill-"))
    root.mkdir(parents=True, exist_ok=True)
    settings = {"workflow": workflow, "workflow_version": workflow_version, "budget": dict(budget) if budget else None}
    harness = _Harness(name, store, root, settings, timeout, seed)
    try:
        reference, passes, elapsed = harness.reference()
        rng = random.Random(seed)
        kills = [KillPoint(point, occurrence) for point in points for occurrence in _spread(passes.get(point, 0), per_point)]
        kills += [KillPoint(delay=rng.uniform(0.05, max(0.1, elapsed))) for _ in range(random_kills)]
        fallback = boundary_passes(passes)
        with ThreadPoolExecutor(max_workers=parallel or os.cpu_count() or 2) as pool:
            trials = list(
                pool.map(lambda item: harness.trial(item[0], item[1], reference, elapsed, fallback), enumerate(kills))
            )
    finally:
        harness.processes.close()
    report = Report(reference, passes, trials)
    if check:
        report.assert_ok()
    return report


def boundary_passes(passes: Mapping[str, int]) -> list[KillPoint]:
    """Every pass of every boundary: where a random kill that keeps missing is made instead."""
    return [KillPoint(point, n) for point in BOUNDARIES for n in range(1, passes.get(point, 0) + 1)]


def _spread(passes: int, limit: int | None) -> list[int]:
    """Which passes to kill at: all of them, or ``limit`` spread from first to last."""
    if limit is None or passes <= limit:
        return list(range(1, passes + 1))
    if limit <= 1:
        return [1] if limit == 1 else []
    return sorted({1 + round(i * (passes - 1) / (limit - 1)) for i in range(limit)})
