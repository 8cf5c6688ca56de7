"""The collector against live committers: threads and separate processes commit shared runs
(fencing each other, so fenced commits leave orphaned packs) while ``gc`` with a short grace runs
in a loop. Afterwards nothing committed is missing: ``verify(read_data=True)`` is clean and every
acknowledged checkpoint restores byte for byte (docs/operations.md, "The collector")."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

import s3ckpt
from tests.conftest import StoreEnv
from tests.gc_worker import SMALL_CHUNKS, commit

DEADLINE = 1.5
GRACE = timedelta(seconds=3)
RUNS = ["r0", "r1", "r2"]
WORKER = [sys.executable, "-m", "tests.gc_worker"]
#: (processes, commits each, threads, commits each): 1,340 commits across both backends
PLAN = {"local": (2, 350, 2, 200), "moto_http": (1, 160, 2, 120)}


@pytest.mark.parametrize("backend_kind", ["local", "moto_http"])
def test_gc_never_deletes_what_a_committer_acknowledged(env: StoreEnv, tmp_path: Path) -> None:
    options = {**env.options, "commit_deadline": DEADLINE}
    store = env.open(chunker=SMALL_CHUNKS, commit_deadline=DEADLINE)
    processes, per_process, threads, per_thread = PLAN[env.kind]
    acks = tmp_path / "acks.jsonl"
    children = [
        subprocess.Popen(
            [*WORKER, env.url, json.dumps(options), f"p{n}", str(per_process), str(100 + n), str(acks), *RUNS],
            env={**os.environ, "S3CKPT_KEY": env.key},
            cwd=Path(__file__).parent.parent,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(processes)
    ]
    counts: list[dict[str, int]] = []

    def committer(n: int) -> None:
        own = env.open(chunker=SMALL_CHUNKS, **{k: v for k, v in options.items() if k not in env.options})
        with open(acks, "a") as out:
            counts.append(commit(own, f"t{n}", per_thread, n, RUNS, out))

    workers = [threading.Thread(target=committer, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    deleted = passes = 0
    while any(w.is_alive() for w in workers) or any(c.poll() is None for c in children):
        deleted += store.gc(grace=GRACE).packs_deleted
        passes += 1
        time.sleep(0.05)
    for worker in workers:
        worker.join()
    for child in children:
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0, out
        counts.append(json.loads(out.strip().splitlines()[-1]))
    time.sleep(GRACE.total_seconds() + 0.5)
    deleted += store.gc(grace=GRACE).packs_deleted

    lines = [json.loads(line) for line in acks.read_text().splitlines()]
    acked = sum(c["acked"] for c in counts)
    assert len(lines) == acked == len({(line["run"], line["seq"]) for line in lines})
    assert sum(c["acked"] + c["fenced"] + c["deadline"] for c in counts) == processes * per_process + threads * per_thread
    assert acked >= 0.6 * (processes * per_process + threads * per_thread)
    assert sum(c["fenced"] for c in counts) > 0  # fenced commits left orphaned packs...
    assert deleted > 0  # ...and the collector deleted some while committers ran
    report = store.verify(read_data=True)
    assert report.ok, report.problems[:3]
    assert report.orphans == []
    for line in lines:
        checkpoint = store.run(line["run"]).get(line["seq"])
        assert set(checkpoint.artifacts) == set(line["artifacts"])
        for name, digest in line["artifacts"].items():
            assert hashlib.sha256(checkpoint.read_artifact(name)).hexdigest() == digest
    print(f"{env.kind}: {acked} acknowledged commits, {sum(c['fenced'] for c in counts)} fenced, "
          f"{sum(c['deadline'] for c in counts)} past the deadline; gc: {passes} passes, {deleted} packs deleted")  # fmt: skip
    assert isinstance(store, s3ckpt.Store)
