"""A fork server: one clean, single-threaded process that imports s3ckpt and the workload once,
then forks a fresh process for every run. Starting Python and importing costs ~0.5 s per
process; hundreds of kill points would spend most of their time there.

Each forked child is a new process (its own pid, memory and working directory) holding nothing
but imported modules: no store objects, no caches, no threads. Commands and replies are JSON
lines on stdin/stdout (no pickle).

    -> {"run": 7, "spec": "/path/spec.json", "cwd": "/tmp/x", "out": "/tmp/x/out.txt"}
    <- {"started": 7, "pid": 1234}
    -> {"kill": 7}
    <- {"exited": 7, "returncode": -9}

The server, the children's parent, sends the kill: it reaps them on the same thread, so a pid it
signals is still its child (alive, or a zombie a signal cannot reach), never a reused pid.
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import sys
import time
from typing import Any


def _warm() -> None:
    """Parse botocore's S3 and KMS models once here, so no forked run pays for it (~0.3 s each)."""
    try:
        import boto3

        from ..backends._s3 import _botocore_session
    except ImportError:  # a store without S3 support
        return
    session = boto3.session.Session(botocore_session=_botocore_session())
    for service in ("s3", "kms"):
        session.client(service, region_name="us-east-1")


def _serve(preload: list[str]) -> None:
    for module in preload:
        importlib.import_module(module)
    _warm()
    running: dict[int, int] = {}  # pid -> run id
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    pending = b""  # read from stdin, not yet a whole line (raw reads: a buffered reader hides lines from select)
    reply = sys.stdout

    def send(message: dict[str, Any]) -> None:
        reply.write(json.dumps(message) + "\n")
        reply.flush()

    send({"ready": True})
    stdin_open = True
    while stdin_open or running:
        if not stdin_open:
            time.sleep(0.005)
        elif selector.select(timeout=0.005):
            chunk = os.read(0, 1 << 16)
            if not chunk:
                stdin_open = False
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                command = json.loads(line)
                if "kill" in command:
                    _kill(running, command["kill"])
                    continue
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    _child(command)  # never returns
                running[pid] = command["run"]
                send({"started": command["run"], "pid": pid})
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            send({"exited": running.pop(pid), "returncode": os.waitstatus_to_exitcode(status)})


def _kill(running: dict[int, int], run: int) -> None:
    """SIGKILL ``run`` unless it was reaped already (then its exit status stands)."""
    for pid, running_run in running.items():
        if running_run == run:
            os.kill(pid, signal.SIGKILL)


def _child(command: dict[str, Any]) -> None:
    code = 1
    try:
        os.chdir(command["cwd"])
        out = os.open(command["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        from ._child import main

        code = main(command["spec"])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve(sys.argv[1:])
