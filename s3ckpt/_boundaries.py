"""Named points on the commit path where a crash would leave a distinct state behind.

The library announces each point it passes; nothing listens unless a test harness installs a
hook (``s3ckpt.testing.kill_and_resume`` kills the process at the n-th pass of one point, and
records step bodies as they start and commit). With no hook, announcing costs one global read.
"""

from __future__ import annotations

from collections.abc import Callable

#: The points a harness can kill at, in the order a session passes them.
BOUNDARIES = (
    "after-step",  # a step's result is committed
    "before-intent",  # emit: nothing recorded yet
    "between-intent-and-send",  # the intent is committed; send not called
    "inside-send",  # the provider has the effect; its outcome is not committed (announced by the provider)
    "after-confirm",  # the outcome is committed; the next commit is not
    "after-checkpoint",  # session.checkpoint() committed
    "between-record-and-pointer",  # a log record is committed; HEAD not moved
    "mid-upload",  # a pack of a commit is stored; the commit's record is not
)

#: Points a test harness stalls a writer at (a kill there leaves what "mid-upload" leaves).
STALL_POINTS = (
    "before-record",  # a commit's packs are stored and it is about to create its record (in the writer's thread)
)

Hook = Callable[[str, str], None]
_hook: Hook | None = None


def reached(point: str, detail: str = "") -> None:
    """Announce ``point`` (``detail`` names the step, effect or key)."""
    hook = _hook
    if hook is not None:
        hook(point, detail)


def install(hook: Hook | None) -> None:
    """Set the process-wide hook (None removes it)."""
    global _hook
    _hook = hook
