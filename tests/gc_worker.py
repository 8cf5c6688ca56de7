"""A committer for the collector-interleaving test: commits to a few shared runs, claiming them
from the other committers (so some of its commits are fenced and leave orphaned packs), and writes
one JSON line per acknowledged checkpoint.

    python -m tests.gc_worker STORE_URL OPTIONS_JSON NAME COMMITS SEED ACK_FILE RUN [RUN ...]

The key comes from $S3CKPT_KEY. ``commit`` (used in-process by threads too) is the loop.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from typing import Any, TextIO

import s3ckpt
from s3ckpt.records import ChunkerParams

SMALL_CHUNKS = ChunkerParams(avg_size=1024, min_size=256, max_size=4096)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def commit(store: s3ckpt.Store, name: str, commits: int, seed: int, runs: list[str], acks: TextIO) -> dict[str, int]:
    """``commits`` attempts; returns how many were acknowledged, fenced and too slow."""
    rng = random.Random(seed)
    writers: dict[str, s3ckpt.Writer] = {}
    current: dict[str, dict[str, str]] = {}  # run -> artifact name -> sha256 of what the next commit carries
    counts = {"acked": 0, "fenced": 0, "deadline": 0}
    home = runs[seed % len(runs)]
    for i in range(commits):
        run = home if rng.random() < 0.85 else rng.choice(runs)  # mostly its own run, sometimes another's
        if run not in writers or rng.random() < 0.05:
            writers[run] = store.run(run).claim(workflow="gc", workflow_version="1")
            parent = writers[run].parent_checkpoint()
            current[run] = {} if parent is None else {a: _digest(parent.read_artifact(a)) for a in parent.artifacts}
        artifacts: dict[str, Any] = {}
        if "shared" not in current[run] or rng.random() < 0.1:
            artifacts["shared"] = random.Random(run).randbytes(30_000)  # the same bytes every time: deduplicated
        if rng.random() < 0.5:
            artifacts["changing"] = rng.randbytes(rng.randrange(1, 20_000))
        if "extra" in current[run] and rng.random() < 0.2:
            artifacts["extra"] = None
        elif rng.random() < 0.2:
            artifacts["extra"] = rng.randbytes(5_000)
        try:
            checkpoint = writers[run].commit({"by": name, "i": i}, artifacts=artifacts)
        except s3ckpt.FencedError:
            counts["fenced"] += 1
            del writers[run]
            continue
        except s3ckpt.CommitDeadlineError:
            counts["deadline"] += 1
            continue
        for key, value in artifacts.items():
            if value is None:
                current[run].pop(key, None)
            else:
                current[run][key] = _digest(value)
        counts["acked"] += 1
        acks.write(json.dumps({"run": run, "seq": checkpoint.seq, "artifacts": current[run], "by": name}) + "\n")
        acks.flush()
    return counts


def main(argv: list[str]) -> None:
    url, options, name, commits, seed, ack_file, *runs = argv
    store = s3ckpt.open_store(url, key=os.environ["S3CKPT_KEY"], chunker=SMALL_CHUNKS, **json.loads(options))
    with open(ack_file, "a") as acks:
        counts = commit(store, name, int(commits), int(seed), runs, acks)
    print(json.dumps(counts))


if __name__ == "__main__":
    main(sys.argv[1:])
