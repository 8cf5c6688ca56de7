"""The s3ckpt side of the file benchmarks, run as a fresh child process per operation.

    python benchmarks/_worker.py init    --store DIR [--avg-chunk BYTES [--min-chunk B] [--max-chunk B]]
    python benchmarks/_worker.py save    --store DIR --run ID --file PATH
    python benchmarks/_worker.py restore --store DIR --run ID --out PATH [--restore-api restore_artifact|open_artifact]
    python benchmarks/_worker.py idle

The key comes from ``$S3CKPT_KEY``. Each command prints one JSON line with the child's own
``ru_maxrss`` in bytes and its in-process timings (``time.perf_counter``):

- ``import_seconds``: ``import s3ckpt`` (interpreter start before it is not measurable in-process);
- ``open_seconds``: ``open_store`` on the existing store (config, key file, key unwrap);
- ``claim_seconds`` (save) or ``latest_seconds`` (restore): finding the run's tail and claiming it,
  or loading its latest checkpoint;
- ``body_seconds``: ``commit`` of the file (save) or writing the artifact to a file (restore);
- ``op_seconds``: the sum of the three above, what a worker that already runs pays for the call:
  open_store + claim + commit, or open_store + latest + restore;
- ``close_seconds``: ``Store.close()`` afterwards (pool shutdown), reported, not in ``op_seconds``.

A save also reports its WriteStats. ``--profile OUT`` writes a cProfile of exactly the
``op_seconds`` span (open_store included); cProfile sees the calling thread only.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import json
import os
import resource
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import s3ckpt

_COPY_BUFFER = 4 << 20
RESTORE_APIS = ("restore_artifact", "open_artifact")


class _Clock:
    """Named in-process spans, and an optional profiler over all of them."""

    def __init__(self, profile: str | None) -> None:
        self.spans: dict[str, float] = {}
        self._profiler = cProfile.Profile() if profile else None
        self._profile = profile

    def span(self, name: str, fn: Callable[[], Any]) -> Any:
        if self._profiler is not None:
            self._profiler.enable()
        start = time.perf_counter()
        try:
            return fn()
        finally:
            self.spans[name] = time.perf_counter() - start
            if self._profiler is not None:
                self._profiler.disable()

    def dump(self) -> None:
        if self._profiler is not None and self._profile:
            self._profiler.dump_stats(self._profile)


def _open(args: argparse.Namespace) -> s3ckpt.Store:
    import s3ckpt

    options: dict[str, Any] = {}
    if args.concurrency:
        options["concurrency"] = args.concurrency
    if args.no_fsync:
        options["fsync"] = False
    return s3ckpt.open_store(args.store, key=os.environ["S3CKPT_KEY"], create=False, **options)


def _init(args: argparse.Namespace) -> dict[str, Any]:
    import s3ckpt
    from s3ckpt.records import ChunkerParams

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


def _finish(clock: _Clock, store: s3ckpt.Store, result: dict[str, Any], work: str) -> dict[str, Any]:
    clock.dump()
    start = time.perf_counter()
    store.close()
    result["close_seconds"] = time.perf_counter() - start
    result["open_seconds"] = clock.spans["open"]
    result[f"{work}_seconds"] = clock.spans[work]
    result["body_seconds"] = clock.spans["body"]
    result["op_seconds"] = clock.spans["open"] + clock.spans[work] + clock.spans["body"]
    return result


def _save(args: argparse.Namespace) -> dict[str, Any]:
    clock = _Clock(args.profile)
    store: s3ckpt.Store = clock.span("open", lambda: _open(args))
    try:
        writer = clock.span("claim", lambda: store.run(args.run).claim())
        checkpoint = clock.span("body", lambda: writer.commit({"source": args.file}, artifacts={"big": args.file}))
        stats = writer.last_stats
        result = {
            "seq": checkpoint.seq,
            "chunks": stats.chunks,
            "bytes_in": stats.bytes_in,
            "uploaded_chunks": stats.uploaded_chunks,
            "uploaded_bytes": stats.uploaded_bytes,
            "packs": stats.packs,
            "reused_chunks": stats.reused_chunks,
        }
    except BaseException:
        store.close()
        raise
    return _finish(clock, store, result, "claim")


def _restore(args: argparse.Namespace) -> dict[str, Any]:
    clock = _Clock(args.profile)
    store: s3ckpt.Store = clock.span("open", lambda: _open(args))
    try:
        checkpoint = clock.span("latest", lambda: store.run(args.run).latest())
        if checkpoint is None:
            raise SystemExit(f"run {args.run!r} has no checkpoint")

        def body() -> None:
            if args.restore_api == "restore_artifact":
                checkpoint.restore_artifact("big", args.out)
            else:
                with checkpoint.open_artifact("big") as src, open(args.out, "wb") as dst:
                    shutil.copyfileobj(src, dst, _COPY_BUFFER)

        clock.span("body", body)
        result = {"seq": checkpoint.seq, "bytes_out": Path(args.out).stat().st_size, "restore_api": args.restore_api}
    except BaseException:
        store.close()
        raise
    return _finish(clock, store, result, "latest")


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
    parser.add_argument("--restore-api", choices=RESTORE_APIS, default=RESTORE_APIS[0])
    args = parser.parse_args()
    start = time.perf_counter()
    importlib.import_module("s3ckpt")
    import_seconds = time.perf_counter() - start
    result = _COMMANDS[args.command](args)
    result["import_seconds"] = import_seconds
    result["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
