"""Workloads for tests/test_harness.py: an agent-like run that passes every boundary several times."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import s3ckpt
from s3ckpt.testing import World

TASKS = int(os.environ.get("S3CKPT_HARNESS_TASKS", "4"))


def _work(task: str, session: s3ckpt.Session) -> dict[str, Any]:
    session.spend(usd=0.25, tokens=100)
    digest = hashlib.sha256(task.encode()).hexdigest()[:12]
    return {"task": task, "answer": digest}


def agent(session: s3ckpt.Session, world: World) -> None:
    tasks = session.step("plan", lambda: [f"task-{i}" for i in range(TASKS)])
    for i, task in enumerate(tasks):
        result = session.step("work", _work, task, session)
        reference = session.emit(
            "email",
            target=f"{task}@example.com",
            payload=result,
            send=lambda key, result=result: world.deliver("email", key, result),
        )
        session.state[task] = reference
        if i % 2 == 1:
            # An artifact makes the commit upload a pack: the mid-upload boundary.
            notes = hashlib.sha256(task.encode()).digest() * 4096  # 128 KiB
            session.checkpoint(artifacts={"notes": notes})
    session.state["done"] = True


def careless(session: s3ckpt.Session, world: World) -> None:
    """Sends an e-mail without session.emit: nothing records it, so a resume sends it again."""
    for i in range(3):
        session.step("work", lambda i=i: i)
        world.deliver("email", f"careless-{i}", {"i": i})
