"""An agent harness killed mid-run and resumed in a fresh process, with nothing done twice.

    python examples/agent_resume.py

The harness plans three tasks, works on each (a step) and emails the result (an effect). The first
process is SIGKILLed inside the second email's send, after the provider stored the email and before
the harness heard back: the worst moment, since the ledger cannot know whether the email went out.
A second process resumes the run: completed steps come back from the ledger without running, and
a reconciler asks the provider about the email in doubt instead of sending it again.

The "provider" and the step bodies write to files outside the process, so the check at the end
counts what really happened. Exits 1 if an email was sent twice or a completed step ran again.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import s3ckpt

RUN_ID = "support-agent-1"
TASKS = ["refund-order-17", "answer-ticket-42", "close-account-9"]


def append(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it: it survives a kill that comes right after."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def harness(store_dir: Path, world: Path, crash: bool) -> None:
    """The agent. Its key comes from $S3CKPT_KEY; its email provider is world/outbox.log."""
    outbox, executions = world / "outbox.log", world / "executions.log"

    def send_email(key: str, to: str, body: str, crash_now: bool) -> str:
        ref = f"msg-{len(lines(outbox)) + 1}"
        append(outbox, {"key": key, "to": to, "body": body, "ref": ref})  # the provider has it now
        if crash_now:
            os.kill(os.getpid(), signal.SIGKILL)  # ...and the harness dies before it records `ref`
        return ref

    def find_email(effect: s3ckpt.EffectRecord) -> str | None:
        """The reconciler: the provider's reference for this idempotency key, None if it never got it."""
        return next((m["ref"] for m in lines(outbox) if m["key"] == effect.idempotency_key), None)

    def work(task: str) -> str:
        append(executions, {"step": task})  # counts real executions of the body
        return f"{task}: resolved"

    store = s3ckpt.open_store(str(store_dir))
    with store.resume(RUN_ID, workflow="support", workflow_version="1", reconcile={"send-email": find_email}) as session:
        for i, task in enumerate(session.step("plan", lambda: TASKS)):
            summary = session.step("work", work, task)
            to = f"{task}@example.com"
            session.state[task] = session.emit(
                "send-email",
                target=to,
                payload={"body": summary},
                send=functools.partial(send_email, to=to, body=summary, crash_now=crash and i == 1),
            )
        session.state["done"] = True
    store.close()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        store_dir, world = Path(tmp, "store"), Path(tmp, "world")
        world.mkdir()
        key = s3ckpt.generate_key()
        env = {**os.environ, "S3CKPT_KEY": key}

        def child(*extra: str) -> int:  # a fresh Python process: nothing survives but the store and the world
            command = [sys.executable, __file__, "--harness", str(store_dir), str(world), *extra]
            return subprocess.run(command, env=env).returncode

        code = child("--crash")
        if code != -signal.SIGKILL:
            print(f"the first process should have been killed, but exited with {code}")
            return 1
        store = s3ckpt.open_store(str(store_dir), key=key)
        before = store.run(RUN_ID).latest()
        assert before is not None
        pending = [e for e in before.effects if e.status == "pending"]
        held = len(lines(world / "outbox.log"))
        print(f"process 1: killed by SIGKILL; the ledger has {len(before.steps)} steps done, {len(before.effects)} emails,")
        print(f"           {len(pending)} of them in doubt ({pending[0].target}); the provider holds {held}")

        code = child()
        after = store.run(RUN_ID).latest()
        store.close()
        assert after is not None
        if code != 0 or not after.state.get("done"):
            print(f"the resumed process failed (exit code {code})")
            return 1
        reconciled = [e for e in after.effects if e.resolved_by == "reconcile"]
        print(f"process 2: resumed; the reconciler found {', '.join(f'{e.target} as {e.reference}' for e in reconciled)}")
        print(f"           run done: {len(after.steps)} steps, emails {sorted(str(e.reference) for e in after.effects)}")

        sent = Counter(m["key"] for m in lines(world / "outbox.log"))
        ran = Counter(e["step"] for e in lines(world / "executions.log"))
        repeated = [k for k, n in sent.items() if n > 1] + [s for s, n in ran.items() if n > 1]
        if repeated or len(sent) != len(TASKS) or len(ran) != len(TASKS):
            print(f"REPEATED or missing: sent {dict(sent)}, ran {dict(ran)}")
            return 1
        print(f"no effect was repeated: {len(sent)} emails sent once each, {len(ran)} step bodies ran once each")
        return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--harness"]:
        harness(Path(sys.argv[2]), Path(sys.argv[3]), crash=sys.argv[4:] == ["--crash"])
    else:
        sys.exit(main())
