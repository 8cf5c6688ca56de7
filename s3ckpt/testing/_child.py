"""One run of a workload, in its own process, as kill_and_resume starts it.

The spec (JSON) names the workload (``module:function``), the store, the run, the world directory
and, for a killed run, the point and occurrence to die at. Exit status: 0 when the run finished,
3 when resuming met effects of unknown outcome and no reconciler (UnknownOutcomeError), 1 for any
other error, and death by SIGKILL at the kill point.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .. import _boundaries
from ..errors import UnknownOutcomeError
from ..records import EffectRecord
from .world import World

UNKNOWN_OUTCOME = 3


class _EveryKind(Mapping[str, Callable[[EffectRecord], Any]]):
    """``reconcile=`` that asks the world about an effect of any kind."""

    def __init__(self, world: World) -> None:
        self._world = world

    def __getitem__(self, kind: str) -> Callable[[EffectRecord], Any]:
        return lambda effect: self._world.lookup(effect.idempotency_key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def load_workload(name: str) -> Callable[..., Any]:
    module, _, attr = name.partition(":")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{name} is not callable")
    return target  # type: ignore[no-any-return]


def run(spec: Mapping[str, Any]) -> int:
    import s3ckpt

    world = World(spec["world"])
    kill = spec.get("kill")
    passes: Counter[str] = Counter()

    def hook(point: str, detail: str) -> None:
        if point in ("step-start", "step-committed"):
            world.note(point, detail)
        passes[point] += 1
        if kill is not None and point == kill["point"] and passes[point] == kill["occurrence"]:
            os.kill(os.getpid(), signal.SIGKILL)

    _boundaries.install(hook)
    workload = load_workload(spec["workload"])
    store = s3ckpt.open_store(spec["url"], key=spec["key"], **spec.get("options", {}))
    try:
        with store.resume(
            spec["run_id"],
            workflow=spec["workflow"],
            workflow_version=spec["workflow_version"],
            reconcile=_EveryKind(world) if spec.get("reconcile") else None,
            budget=spec.get("budget"),
        ) as session:
            workload(session, world)
    except UnknownOutcomeError as exc:
        print(f"UnknownOutcomeError: {exc}", file=sys.stderr)
        return UNKNOWN_OUTCOME
    finally:
        store.close()
        if spec.get("passes"):
            Path(spec["passes"]).write_text(json.dumps(dict(passes)))
    return 0


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    try:
        return run(spec)
    except BaseException:  # noqa: BLE001 - the parent reads the traceback from stderr
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
