"""The s3ckpt side of the file benchmarks, run as a fresh child process per operation.

    python benchmarks/_worker.py init    --store DIR [--avg-chunk BYTES [--min-chunk B] [--max-chunk B]]
    python benchmarks/_worker.py save    --store DIR --run ID --file PATH
    python benchmarks/_worker.py restore --store DIR --run ID --out PATH
    python benchmarks/_worker.py idle

The key comes from ``$S3CKPT_KEY``. Each command prints one JSON line: the in-process seconds of
the operation itself (``op_seconds``, after imports and open_store), the WriteStats of a save, and
the child's own ``ru_maxrss`` in bytes. ``--profile OUT`` writes a cProfile of the operation.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import resource
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import s3ckpt
from s3ckpt.records import ChunkerParams

_COPY_BUFFER = 4 << 20


def _open(args: argparse.Namespace) -> s3ckpt.Store:
    options: dict[str, Any] = {}
    if args.concurrency:
        options["concurrency"] = args.concurrency
    if args.no_fsync:
        options["fsync"] = False
    return s3ckpt.open_store(args.store, key=os.environ["S3CKPT_KEY"], **options)


def _init(args: argparse.Namespace) -> dict[str, Any]:
    chunker = None
    if args.avg_chunk:
        avg = args.avg_chunk
        min_size = args.min_chunk or max(64, avg // 4)
        max_size = args.max_chunk or min(16 << 20, avg * 4)
        chunker = ChunkerParams(avg_size=avg, min_size=min_size, max_size=max_size)
    store = s3ckpt.open_store(args.store, key=os.environ["S3CKPT_KEY"], chunker=chunker)
    params = store.config.chunker.model_dump()
    store.close()
    return {"chunker": params}


def _timed(args: argparse.Namespace, op: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    result = op()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    result["op_seconds"] = time.perf_counter() - start
    return result


def _save(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)

    def op() -> dict[str, Any]:
        writer = store.run(args.run).claim()
        checkpoint = writer.commit({"source": args.file}, artifacts={"big": args.file})
        stats = writer.last_stats
        return {
            "seq": checkpoint.seq,
            "chunks": stats.chunks,
            "bytes_in": stats.bytes_in,
            "uploaded_chunks": stats.uploaded_chunks,
            "uploaded_bytes": stats.uploaded_bytes,
            "reused_chunks": stats.reused_chunks,
            "packs": stats.packs,
        }

    try:
        return _timed(args, op)
    finally:
        store.close()


def _restore(args: argparse.Namespace) -> dict[str, Any]:
    store = _open(args)

    def op() -> dict[str, Any]:
        checkpoint = store.run(args.run).latest()
        if checkpoint is None:
            raise SystemExit(f"run {args.run!r} has no checkpoint")
        if args.restore_api == "restore_artifact":  # a proposed API; absent from s3ckpt until it lands
            getattr(checkpoint, args.restore_api)("big", args.out)
        else:
            with checkpoint.open_artifact("big") as src, open(args.out, "wb") as dst:
                shutil.copyfileobj(src, dst, _COPY_BUFFER)
        return {"seq": checkpoint.seq, "bytes_out": Path(args.out).stat().st_size}

    try:
        return _timed(args, op)
    finally:
        store.close()


def _idle(args: argparse.Namespace) -> dict[str, Any]:
    return {"op_seconds": 0.0}


_COMMANDS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "init": _init,
    "save": _save,
    "restore": _restore,
    "idle": _idle,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=sorted(_COMMANDS))
    parser.add_argument("--store")
    parser.add_argument("--run", default="bench")
    parser.add_argument("--file")
    parser.add_argument("--out")
    parser.add_argument("--concurrency", type=int, default=0)
    parser.add_argument("--avg-chunk", type=int, default=0)
    parser.add_argument("--min-chunk", type=int, default=0)
    parser.add_argument("--max-chunk", type=int, default=0)
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--profile")
    parser.add_argument("--restore-api", choices=("open_artifact", "restore_artifact"), default="open_artifact")
    args = parser.parse_args()
    result = _COMMANDS[args.command](args)
    result["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
