"""A small agent run, as a child process that can be killed at a chosen boundary and resumed.

    python -m tests.agent_workload --url URL --key KEY --run RUN --world DIR
        [--endpoint-url E] [--kill-at BOUNDARY] [--reconcile]

The run: step ``plan`` returns three tasks; for each task, step ``work`` (whose body first spends on
"thinking", then runs a nested step ``research``) returns a result, ``send-email`` emits a message
derived from it, and a checkpoint records the reference in the state. Then ``state["done"]``.

The outside world lives in ``DIR`` so that it survives the kill: ``provider.log`` is the email
provider (one JSON line per delivery, appended and fsynced before the provider answers) and
``executions.log`` gets ``start <step key>`` / ``done <step key>`` around every step body. Neither
deduplicates anything: the parent counts lines to see what really happened.

``--kill-at`` ends the process with ``os._exit(137)`` the first time the run reaches the boundary
during the second task (so some work is committed before the kill and some is left for the resume).
Exit codes: 0 done, 3 the run has effects of unknown outcome and no reconciler was given.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import s3ckpt
from s3ckpt.effects import payload_hash

BOUNDARIES = (
    "after-step",  # a top-level step returned (committed), before the emit that uses its result
    "after-nested-step",  # a step inside another step's body returned: the outer body is interrupted
    "between-intent-and-send",  # inside send: the intent is committed, the provider has nothing
    "inside-send-after-received",  # inside send: the provider stored the delivery, no reference recorded
    "after-confirm",  # emit returned (outcome committed), before the state that records it is committed
    "after-checkpoint",  # session.checkpoint() returned
)
KILL_TASK = 1  # the boundary is crossed during the second task
KILLED = 137
UNKNOWN_OUTCOME = 3
WORKFLOW = ("agent", "1")
TASKS = ("refund-order-17", "answer-ticket-42", "close-account-9")
THINK = {"usd": 0.125, "tokens": 900}  # spent by a work body before its nested step
RESEARCH = {"usd": 0.0625, "tokens": 400}
PLAN = {"usd": 0.03125, "tokens": 250}


def append_line(path: Path, line: dict[str, Any]) -> None:
    """One JSON line, appended and fsynced: durable before the caller goes on (or is killed)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


class Provider:
    """An email provider outside the process: it remembers every delivery, duplicates included."""

    def __init__(self, world: Path, kill_at: str | None) -> None:
        self.log = world / "provider.log"
        self.kill_at = kill_at

    def deliver(self, key: str, kind: str, target: str, payload: dict[str, Any], task: int) -> str:
        boundary(self.kill_at, "between-intent-and-send", task)
        reference = f"msg-{len(read_lines(self.log)) + 1}"
        append_line(
            self.log,
            {"key": key, "kind": kind, "target": target, "payload_hash": payload_hash(payload), "ref": reference},
        )
        boundary(self.kill_at, "inside-send-after-received", task)
        return reference

    def lookup(self, effect: s3ckpt.EffectRecord) -> str | None:
        """The reconciler: the reference of the delivery with this idempotency key, if any."""
        for line in read_lines(self.log):
            if line["key"] == effect.idempotency_key and line["kind"] == effect.kind:
                assert line["payload_hash"] == effect.payload_hash, "the provider holds another payload under this key"
                return str(line["ref"])
        return None


def boundary(kill_at: str | None, name: str, task: int) -> None:
    if kill_at == name and task == KILL_TASK:
        os._exit(KILLED)  # no cleanup, no flush: as abrupt as SIGKILL


def run(args: argparse.Namespace) -> dict[str, Any]:
    world = Path(args.world)
    world.mkdir(parents=True, exist_ok=True)
    executions = world / "executions.log"
    provider = Provider(world, args.kill_at)
    options = {"endpoint_url": args.endpoint_url, "region": "us-east-1"} if args.endpoint_url else {}
    store = s3ckpt.open_store(args.url, key=args.key, **options)
    reconcile = {"send-email": provider.lookup} if args.reconcile else None

    def body(key: str, spend: dict[str, float], result: Any) -> Any:
        append_line(executions, {"event": "start", "step": key, "pid": os.getpid()})
        session.spend(**spend)
        append_line(executions, {"event": "done", "step": key, "pid": os.getpid()})
        return result

    def research(i: int, task: str) -> dict[str, Any]:
        facts: dict[str, Any] = body(
            f"work#{i}/research#0", RESEARCH, {"task": task, "facts": [f"{task}: n{n}" for n in range(2)]}
        )
        return facts

    def work(i: int, task: str) -> dict[str, Any]:
        key = f"work#{i}"
        append_line(executions, {"event": "start", "step": key, "pid": os.getpid()})
        session.spend(**THINK)  # committed with the nested step below, before this body ends
        facts = session.step("research", research, i, task)
        boundary(args.kill_at, "after-nested-step", i)
        append_line(executions, {"event": "done", "step": key, "pid": os.getpid()})
        return {"task": task, "summary": f"{task} handled using {len(facts['facts'])} facts", "priority": i + 1}

    try:
        session = store.resume(args.run, workflow=WORKFLOW[0], workflow_version=WORKFLOW[1], reconcile=reconcile)
    except s3ckpt.UnknownOutcomeError as exc:
        store.close()
        print(f"UnknownOutcomeError: {exc}", file=sys.stderr)
        sys.exit(UNKNOWN_OUTCOME)
    with session:
        tasks = session.step("plan", body, "plan#0", PLAN, list(TASKS))
        session.state.setdefault("sent", {})
        for i, task in enumerate(tasks):
            result = session.step("work", work, i, task)
            boundary(args.kill_at, "after-step", i)
            payload = {"subject": f"Update on {task}", "body": result["summary"], "priority": result["priority"]}
            target = f"{task}@example.com"
            reference = session.emit(
                "send-email",
                target=target,
                payload=payload,
                send=functools.partial(provider.deliver, kind="send-email", target=target, payload=payload, task=i),
            )
            boundary(args.kill_at, "after-confirm", i)
            session.state["sent"][task] = reference
            session.checkpoint()
            boundary(args.kill_at, "after-checkpoint", i)
        session.state["done"] = True
        session.checkpoint()
    latest = store.run(args.run).latest()
    store.close()
    assert latest is not None
    return {
        "run": args.run,
        "pid": os.getpid(),
        "state": latest.state,
        "steps": sorted(latest.steps),
        "effects": {e.idempotency_key: [e.status, e.reference, e.sends] for e in latest.effects},
        "budget": latest.budget,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.agent_workload", description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--run", required=True)
    parser.add_argument("--world", required=True, help="the provider's directory (provider.log, executions.log)")
    parser.add_argument("--endpoint-url")
    parser.add_argument("--kill-at", choices=BOUNDARIES)
    parser.add_argument("--reconcile", action="store_true", help="reconcile send-email effects against provider.log")
    print(json.dumps(run(parser.parse_args(argv)), sort_keys=True))


if __name__ == "__main__":
    main()
