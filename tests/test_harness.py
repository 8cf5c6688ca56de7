"""s3ckpt's own crash and fault suites, built on what s3ckpt.testing ships to users.

- kill_and_resume over the agent workload (tests/harness_workload.py) on a local directory and on
  the moto server: every pass of every boundary, plus random times;
- 20% of backend operations failing (500, 503, resets, slow answers, timeouts after the write
  landed) over thousands of operations: no corrupt record, no lost commit, no duplicate effect;
- writer races, threads and processes, under faults; a zombie writer after a newer claim.

``S3CKPT_SOAK=N`` multiplies the work (tasks per run, random kills, operations) for a soak run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import s3ckpt
from s3ckpt.backends import Backend, LocalBackend, MemoryBackend, open_backend
from s3ckpt.testing import BOUNDARIES, FaultyBackend, KillPoint, Outcome, Report, StoreTarget, World
from s3ckpt.testing import kill as kill_module
from s3ckpt.testing.kill import _Harness, boundary_passes
from s3ckpt.testing.plugin import S3Bucket

SOAK = max(1, int(os.environ.get("S3CKPT_SOAK", "1")))
REPO = Path(__file__).resolve().parent.parent


def _target(kind: str, tmp_path: Path, request: pytest.FixtureRequest | None = None) -> StoreTarget:
    key = s3ckpt.generate_key()
    if kind == "local":
        target = StoreTarget(str(tmp_path / "store"), key)
    else:
        assert request is not None
        bucket: S3Bucket = request.getfixturevalue("moto_s3")
        target = StoreTarget(bucket.url, key, {"endpoint_url": bucket.endpoint_url, "region": "us-east-1"})
    s3ckpt.open_store(target.url, key=key, **target.options).close()
    return target


# Every pass of every boundary on a local directory; on moto (slower: one Python server answers
# every request) a sample of passes per boundary. Together at least 200 kill points per run.
KILL_PLANS: dict[str, dict[str, Any]] = {
    "local": {"tasks": 14, "per_point": None, "random": 16, "at_least": 150},
    "moto": {"tasks": 6, "per_point": 5, "random": 16, "at_least": 50},
}


# About 500 child processes: 131 s for "local" on a 2-core machine at load 8, too close to the
# suite's 300 s per test; a hang still stops it.
@pytest.mark.timeout(900 * SOAK)
@pytest.mark.parametrize("kind", ["local", "moto"])
def test_killed_at_every_boundary_and_at_random_the_agent_resumes_as_if_never_killed(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, kill_and_resume: Any
) -> None:
    plan = KILL_PLANS[kind]
    monkeypatch.setenv("S3CKPT_HARNESS_TASKS", str(plan["tasks"] * SOAK))
    report: Report = kill_and_resume(
        "tests.harness_workload:agent",
        _target(kind, tmp_path, request),
        per_point=None if plan["per_point"] is None else plan["per_point"] * SOAK,
        random_kills=plan["random"] * SOAK,
        seed=SOAK,
    )
    print(f"{kind}: {report.summary()}")
    # Every planned kill is a kill, however loaded the machine: a random one that came after the run
    # had ended was tried again. So the count is the plan's, never a matter of timing.
    limit = plan["per_point"] * SOAK if plan["per_point"] is not None else None
    planned = sum(min(report.passes.get(p, 0), limit or 10**9) for p in BOUNDARIES) + plan["random"] * SOAK
    assert report.kill_points == len(report.trials) == planned
    assert sum(1 for t in report.trials if t.planned and t.planned.point is None) == plan["random"] * SOAK
    assert report.kill_points >= plan["at_least"] * SOAK
    killed_at = {t.kill.point for t in report.trials if t.killed}
    assert set(BOUNDARIES) <= killed_at  # every boundary, not only the frequent ones
    assert sum(t.surfaced_unknown for t in report.trials) >= 4  # killed inside send: surfaced before reconciled
    report.assert_ok()


def test_the_harness_catches_a_workload_that_repeats_an_effect(tmp_path: Path, kill_and_resume: Any) -> None:
    """The harness is only worth its kills if it fails a broken workload, readably."""
    report: Report = kill_and_resume(
        "tests.harness_workload:careless", _target("local", tmp_path), points=["after-step"], check=False
    )
    assert report.failed
    text = report.render()
    assert "delivered more than once" in text
    assert "--- uninterrupted" in text
    assert "+++ killed and resumed" in text


def _harness(tmp_path: Path) -> tuple[_Harness, Outcome, float, list[KillPoint]]:
    harness = _Harness("tests.harness_workload:agent", _target("local", tmp_path), tmp_path / "runs", _SETTINGS, 120.0, 0)
    try:
        reference, passes, seconds = harness.reference()
    except BaseException:
        harness.processes.close()
        raise
    return harness, reference, seconds, boundary_passes(passes)


_SETTINGS = {"workflow": "workload", "workflow_version": "1", "budget": None}


def test_a_random_kill_that_comes_after_the_run_ended_is_tried_again_until_it_kills(tmp_path: Path) -> None:
    """A delay far past the run's end misses for sure; the harness runs it again with a delay
    below the run's measured length (or, after repeated misses, at a boundary pass): it kills."""
    harness, reference, seconds, fallback = _harness(tmp_path)
    try:
        trial = harness.trial(0, KillPoint(delay=seconds + 60), reference, seconds, fallback)
    finally:
        harness.processes.close()
    assert trial.problems == [], trial.log[-3000:]
    assert trial.killed
    assert trial.misses >= 1
    assert trial.planned == KillPoint(delay=seconds + 60)
    assert trial.kill != trial.planned
    assert trial.resumes >= 1
    assert trial.outcome is not None


def test_a_random_kill_that_keeps_missing_falls_back_to_a_boundary_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kill_module, "_RANDOM_ATTEMPTS", 1)  # the first miss falls back
    harness, reference, seconds, fallback = _harness(tmp_path)
    try:
        trial = harness.trial(0, KillPoint(delay=seconds + 60), reference, seconds, fallback)
        run, exited = harness.processes.start(*_noop_spec(tmp_path))
        assert exited.result(timeout=60) == 1  # the spec names no workload: the child fails, cleanly
        harness.processes.kill(run)  # after it was reaped: a no-op, and the server serves on
        again = harness.trial(1, KillPoint("after-step", 1), reference, seconds, fallback)
    finally:
        harness.processes.close()
    assert trial.problems == [], trial.log[-3000:]
    assert (trial.misses, trial.fell_back, trial.killed) == (1, True, True)
    assert trial.kill in fallback
    assert again.problems == []
    assert again.killed
    report = Report(reference, {}, [trial, again])
    assert report.kill_points == 2
    assert report.random_misses == 1
    assert "1 random kills came after the run had ended and were tried again (1 fell back" in report.summary()


def _noop_spec(tmp_path: Path) -> tuple[Path, Path, Path]:
    spec = tmp_path / "noop.json"
    spec.write_text("{}")
    return spec, tmp_path, tmp_path / "noop.out"


# -- faults ----------------------------------------------------------------------------------


def _inner(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Backend, dict[str, Any]]:
    if kind == "memory":
        return MemoryBackend(f"faults-{tmp_path.name}"), {}
    if kind == "local":
        return LocalBackend(tmp_path / "store"), {}
    bucket: S3Bucket = request.getfixturevalue("moto_s3")
    return open_backend(bucket.url, endpoint_url=bucket.endpoint_url, region="us-east-1"), {}


@pytest.mark.parametrize("kind", ["memory", "local", "moto"])
def test_a_fifth_of_all_operations_failing_corrupts_loses_and_repeats_nothing(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, faulty: Any
) -> None:
    inner, _ = _inner(kind, tmp_path, request)
    backend: FaultyBackend = faulty(inner, rate=0.2)
    key = s3ckpt.generate_key()
    store = s3ckpt.open_store(backend=backend, key=key)
    world = World(tmp_path / "world")
    committed: dict[tuple[str, int], Any] = {}  # every commit a caller was told succeeded
    runs = 0
    while backend.operations < 2000 * SOAK:
        run_id = f"run-{runs}"
        for resume in range(2):  # each run is resumed once: replays must not send again
            with store.resume(
                run_id, workflow="w", workflow_version="1", reconcile={"email": lambda e: world.lookup(e.idempotency_key)}
            ) as session:
                for i in range(3):
                    result = session.step(f"s{i}", lambda i=i, run_id=run_id: {"i": i, "run": run_id})
                    session.emit(
                        "email", target=f"{run_id}-{i}", payload=result, send=lambda k, r=result: world.deliver("email", k, r)
                    )
                    session.state[f"s{i}"] = resume
                checkpoint = session.checkpoint(artifacts={"blob": os.urandom(70_000)})
                committed[(run_id, checkpoint.seq)] = checkpoint.state
        runs += 1
    store.close()
    print(f"{kind}: {backend.operations} operations, {sum(backend.injected.values())} faults injected {dict(backend.injected)}")
    assert sum(backend.injected.values()) >= 0.15 * backend.operations
    assert backend.injected["timeout-after-write"] > 0

    backend.enabled = False
    with s3ckpt.open_store(backend=backend, key=key) as clean:
        for run_id in (f"run-{r}" for r in range(runs)):
            run = clean.run(run_id)
            assert list(run.records())  # the whole hash chain verifies: no corrupt or missing record
            latest = run.latest(validate="full")  # and every chunk of the latest checkpoint reads back
            assert latest is not None
            assert sorted(latest.steps) == ["s0#0", "s1#0", "s2#0"]
            assert [e.status for e in latest.effects] == ["confirmed"] * 3
        for (run_id, seq), state in committed.items():  # no lost commit
            assert clean.run(run_id).get(seq).state == state
    delivered = world.delivered_keys()
    assert len(delivered) == 3 * runs
    assert set(delivered.values()) == {1}  # no duplicate effect


@pytest.mark.parametrize("s3ckpt_store", ["memory", "local", "moto"], indirect=True)
def test_s3ckpt_store_fixture_gives_a_working_store(s3ckpt_store: s3ckpt.Store) -> None:
    s3ckpt_store.run("r").claim().commit({"ok": True})
    latest = s3ckpt_store.run("r").latest()
    assert latest is not None
    assert latest.state == {"ok": True}


# -- races and zombies under faults ------------------------------------------------------------


def test_writer_threads_race_under_faults(tmp_path: Path, faulty: Any) -> None:
    backend: FaultyBackend = faulty(LocalBackend(tmp_path / "store"), rate=0.2)
    key = s3ckpt.generate_key()
    store = s3ckpt.open_store(backend=backend, key=key)
    wins: Counter[int] = Counter()
    losses = 0
    lock = threading.Lock()

    def racer(n: int) -> None:
        nonlocal losses
        for attempt in range(5):
            try:
                writer = store.run("race").claim(racer=n)
                seq = writer.commit({"by": n, "attempt": attempt}).seq
                with lock:
                    wins[seq] += 1
            except s3ckpt.ConflictError:
                with lock:
                    losses += 1

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(wins.values()) == {1}  # exactly one winner per seq
    assert losses > 0
    backend.enabled = False
    records = list(s3ckpt.open_store(backend=backend, key=key).run("race").records())
    for seq in wins:
        assert records[seq].kind == "checkpoint"


_PROCESS_RACER = """
import sys, s3ckpt
from s3ckpt.backends import LocalBackend
from s3ckpt.testing import FaultyBackend
root, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = s3ckpt.open_store(backend=FaultyBackend(LocalBackend(root), rate=0.2, seed=n), key=key)
won = []
for attempt in range(6):
    try:
        won.append(store.run("race").claim(racer=n).commit({"by": n, "attempt": attempt}).seq)
    except s3ckpt.ConflictError:
        pass
print(" ".join(map(str, won)))
"""


def test_writer_processes_race_under_faults(tmp_path: Path) -> None:
    key = s3ckpt.generate_key()
    s3ckpt.open_store(str(tmp_path / "store"), key=key).close()
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _PROCESS_RACER, str(tmp_path / "store"), key, str(n)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for n in range(3)
    ]
    won = [int(seq) for racer in racers for seq in racer.communicate(timeout=120)[0].split()]
    assert all(racer.returncode == 0 for racer in racers)
    assert len(won) == len(set(won)) > 0  # no seq won twice
    records = list(s3ckpt.open_store(str(tmp_path / "store"), key=key).run("race").records())
    assert {r.seq for r in records if r.kind == "checkpoint"} == set(won)  # every win is in the log


def test_a_zombie_session_is_fenced_by_a_newer_resume_under_faults(tmp_path: Path, faulty: Any) -> None:
    backend: FaultyBackend = faulty(LocalBackend(tmp_path / "store"), rate=0.2)
    store = s3ckpt.open_store(backend=backend, key=s3ckpt.generate_key())
    world = World(tmp_path / "world")
    zombie = store.resume("r", workflow="w", workflow_version="1")
    zombie.step("a", lambda: 1)
    with store.resume("r", workflow="w", workflow_version="1") as newer:
        newer.step("b", lambda: 2)
    with pytest.raises(s3ckpt.FencedError):
        zombie.emit("email", target="x", payload=1, send=lambda k: world.deliver("email", k, 1))
    assert world.deliveries() == []  # fenced before the intent: nothing sent
    with pytest.raises(s3ckpt.FencedError):
        zombie.step("c", lambda: 3)
