"""A harness killed at every boundary of a session resumes in a fresh process without repeating a
completed step or a confirmed effect, on a local directory and on S3 (moto's HTTP server).

The workload (tests/agent_workload.py) runs as a child process and is killed with os._exit at one
boundary during its second task; another child resumes it. Its provider and its step bodies log to
files outside the process, so what really happened is counted, not inferred from the ledger. Every
resumed run is compared with one uninterrupted reference run per backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

import s3ckpt
from s3ckpt.testing import MotoServer

from .agent_workload import BOUNDARIES, KILLED, THINK, UNKNOWN_OUTCOME, read_lines

REPO = Path(__file__).resolve().parent.parent
RUN_ID = "agent-run"  # the same in every store, so idempotency keys compare across runs
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Killed inside send: the intent is committed and the outcome is not, so a resume must reconcile.
UNKNOWN = {"between-intent-and-send", "inside-send-after-received"}
# Killed inside a step body after a nested step committed: that body (and only it) runs again.
INTERRUPTED = {"after-nested-step": {"work#1"}}
# What the re-run of an interrupted body spends again: the part its nested step's commit saved.
# Everywhere else a body's spending is committed with its result, or lost with it, so it is exact.
RESPENT = {"after-nested-step": THINK}


@dataclass(frozen=True)
class Location:
    """Where one store lives, as the child's command line names it."""

    url: str
    endpoint_url: str | None = None

    def args(self) -> list[str]:
        return ["--url", self.url, *(["--endpoint-url", self.endpoint_url] if self.endpoint_url else [])]

    def latest(self, key: str) -> s3ckpt.Checkpoint:
        options: dict[str, Any] = {"endpoint_url": self.endpoint_url, "region": "us-east-1"} if self.endpoint_url else {}
        store = s3ckpt.open_store(self.url, key=key, create=False, **options)
        try:
            checkpoint = store.run(RUN_ID).latest()
        finally:
            store.close()
        assert checkpoint is not None
        return checkpoint


@dataclass
class Backend:
    kind: str
    key: str = field(default_factory=s3ckpt.generate_key)
    server: MotoServer | None = None

    def new_location(self, directory: Path) -> Location:
        if self.server is None:
            return Location(str(directory / "store"))
        bucket = f"crash-{uuid.uuid4().hex[:16]}"
        boto3.client("s3", endpoint_url=self.server.endpoint_url, region_name="us-east-1").create_bucket(Bucket=bucket)
        return Location(f"s3://{bucket}/ckpt", self.server.endpoint_url)


@dataclass
class World:
    """What the outside world saw: the provider's deliveries and the step bodies' executions."""

    directory: Path

    @property
    def deliveries(self) -> list[dict[str, Any]]:
        return read_lines(self.directory / "provider.log")

    @property
    def executions(self) -> list[dict[str, Any]]:
        return read_lines(self.directory / "executions.log")


def workload(
    backend: Backend, location: Location, world: World, *extra: str, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH lets a child started elsewhere import tests.agent_workload: nothing may rely on cwd.
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, **FAKE_AWS, "PYTHONPATH": pythonpath}
    command = [sys.executable, "-m", "tests.agent_workload", *location.args(), "--key", backend.key, "--run", RUN_ID]
    return subprocess.run(
        [*command, "--world", str(world.directory), *extra], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module", params=["local", "moto_http"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "local":
        return Backend("local")
    return Backend("moto_http", server=request.getfixturevalue("moto_server"))


@dataclass
class Reference:
    checkpoint: s3ckpt.Checkpoint
    world: World


@pytest.fixture(scope="module")
def reference(backend: Backend, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """One uninterrupted run per backend, which every crashed-and-resumed run must match."""
    directory = tmp_path_factory.mktemp(f"reference-{backend.kind}")
    location, world = backend.new_location(directory), World(directory / "world")
    done = workload(backend, location, world)
    assert done.returncode == 0, done.stderr
    checkpoint = location.latest(backend.key)
    assert json.loads(done.stdout.splitlines()[-1])["state"] == checkpoint.state
    assert checkpoint.state["done"] is True
    assert len(world.deliveries) == 3
    assert Counter(e["step"] for e in world.executions if e["event"] == "start") == dict.fromkeys(checkpoint.steps, 1)
    return Reference(checkpoint, world)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory for the resuming child that is not the one the killed child used."""
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_a_run_killed_at_a_boundary_resumes_in_a_fresh_process_without_repeating_anything(
    boundary: str, backend: Backend, reference: Reference, tmp_path: Path, elsewhere: Path
) -> None:
    location, world = backend.new_location(tmp_path), World(tmp_path / "world")
    killed = workload(backend, location, world, "--kill-at", boundary)
    assert killed.returncode == KILLED, killed.stderr
    assert killed.stdout == ""
    at_kill = location.latest(backend.key)
    delivered_at_kill = [d["key"] for d in world.deliveries]
    unsettled = [e for e in at_kill.effects if e.status == "pending"]

    if boundary in UNKNOWN:
        # The intent of the second email is committed with no outcome; the provider has it or not.
        (effect,) = unsettled
        assert (effect.idempotency_key in delivered_at_kill) == (boundary == "inside-send-after-received")
        executed_at_kill = world.executions
        failed = workload(backend, location, world, cwd=elsewhere)
        assert failed.returncode == UNKNOWN_OUTCOME, failed.stderr
        assert "UnknownOutcomeError" in failed.stderr
        assert effect.idempotency_key in failed.stderr
        # A resume that cannot decide sends nothing and runs nothing.
        assert [d["key"] for d in world.deliveries] == delivered_at_kill
        assert world.executions == executed_at_kill
        assert [e.status for e in location.latest(backend.key).effects] == [e.status for e in at_kill.effects]
    else:
        assert unsettled == []

    resumed = workload(backend, location, world, *(["--reconcile"] if boundary in UNKNOWN else []), cwd=elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    final = location.latest(backend.key)
    expected = reference.checkpoint

    # The same run as if it had never been killed.
    assert final.state == expected.state
    assert {k: s.result for k, s in final.steps.items()} == {k: s.result for k, s in expected.steps.items()}

    # Every email delivered exactly once, at the same positions with the same payloads as the reference
    # (keys differ between the two stores: they are derived from the store id too).
    deliveries = world.deliveries
    assert [k for k, n in Counter(d["key"] for d in deliveries).items() if n > 1] == []
    assert len(deliveries) == len(reference.world.deliveries)

    def by_position(checkpoint: s3ckpt.Checkpoint, sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
        positions = {e.idempotency_key: e.position for e in checkpoint.effects}
        return sorted(({**d, "key": positions[d["key"]]} for d in sent), key=lambda d: d["ref"])

    assert by_position(final, deliveries) == by_position(expected, reference.world.deliveries)

    # The ledger: every effect confirmed with the reference the provider gave.
    by_key = {d["key"]: d["ref"] for d in deliveries}
    assert {e.idempotency_key: (e.status, e.reference) for e in final.effects} == {
        k: ("confirmed", ref) for k, ref in by_key.items()
    }
    resent = {e.idempotency_key for e in unsettled} if boundary == "between-intent-and-send" else set()
    assert {e.idempotency_key: e.sends for e in final.effects} == {k: 2 if k in resent else 1 for k in by_key}
    reconciled = {e.idempotency_key for e in final.effects if e.resolved_by == "reconcile"}
    assert reconciled == ({e.idempotency_key for e in unsettled} if boundary == "inside-send-after-received" else set())

    # No body whose result was committed ran again; an interrupted one ran again exactly once.
    interrupted = INTERRUPTED.get(boundary, set())
    starts = Counter(e["step"] for e in world.executions if e["event"] == "start")
    assert starts == {k: 2 if k in interrupted else 1 for k in expected.steps}
    for step in expected.steps:
        events = [e["event"] for e in world.executions if e["step"] == step]
        assert events.count("done") == 1
        assert events[-1] == "done", f"{step} started again after it completed: {events}"
    assert len({e["pid"] for e in world.executions}) == 2  # the killed child and the one that finished

    # Spending: exact, except what an interrupted body had spent and committed before the kill.
    respent = RESPENT.get(boundary, {})
    assert set(final.budget) == set(expected.budget)
    for unit, amount in expected.budget.items():
        assert final.budget[unit] == pytest.approx(amount + respent.get(unit, 0)), unit


def test_the_example_survives_its_kill_without_repeating_an_effect(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "agent_resume.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("no effect was repeated")
