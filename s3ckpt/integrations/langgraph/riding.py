"""Pending writes riding in the next put's record (docs/langgraph.md, "Writes ride in the next put").

With LangGraph's async durability the put chain runs behind the tasks: a task's ``put_writes``
usually arrives while a put of its run is under way. It then waits for the put whose parent is its
checkpoint, and its writes are committed in that put's record (``state.pw``) instead of an object
of their own; it writes its own object when that is not soon, or not possible.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .writes import _Writes

if TYPE_CHECKING:
    from .index import _Log


@dataclass
class _Waiting:
    """A put_writes call waiting to ride in the record of the next put whose parent is its checkpoint."""

    checkpoint_id: str
    #: None while the put_writes call is still serializing its values
    wo: _Writes | None = None
    #: set by the put that took it, once its record is committed (stored) or failed (not stored)
    finished: bool = False
    stored: bool = False


#: How long a waiting put_writes gives LangGraph to start the next put once none is under way.
_WAIT_GRACE = 0.02
#: At most this many put_writes calls of a run wait at once (each holds one of LangGraph's
#: executor threads, which a fan-out's tasks need too); the others write alone at once.
_MAX_RIDERS = 3
#: Longest a put_writes waits for a put to carry its writes.
_WAIT_MAX = 5.0


def _take(lg: _Log, parent_id: str | None) -> list[_Waiting]:
    """The waiting put_writes of ``parent_id`` that ride in the record being built (waiting up
    to _WAIT_GRACE for those still serializing; those that are not ready then write alone).
    Call holding ``lg.commit`` and ``lg.lock``."""
    if parent_id is None:
        return []
    limit = time.monotonic() + _WAIT_GRACE
    while any(w.checkpoint_id == parent_id and w.wo is None for w in lg.waiting):
        left = limit - time.monotonic()
        if left <= 0:
            break
        lg.changed.wait(left)
    mine = [w for w in lg.waiting if w.checkpoint_id == parent_id]
    lg.waiting = [w for w in lg.waiting if w.checkpoint_id != parent_id]
    lg.changed.notify_all()
    return [w for w in mine if w.wo is not None]


def _ride(lg: _Log, me: _Waiting, wo: _Writes) -> bool:
    """While puts of the run are under way (LangGraph's async durability: the put chain runs
    behind the tasks), wait for the put whose parent is ``wo``'s checkpoint to carry ``wo`` in
    its record: True once that record is committed. False (write it alone) when that put was
    made already, when no put is under way _WAIT_GRACE after the last one ended, after
    _WAIT_MAX seconds, and at once for special channels (LangGraph may wait for those, e.g.
    before an error handler runs)."""
    if any(idx < 0 or channel.startswith("__") for idx, channel, _ in wo.w):
        return False
    with lg.lock:
        if me not in lg.waiting:  # the put came before the writes were ready
            return False
        me.wo = wo
        lg.changed.notify_all()
        deadline = time.monotonic() + _WAIT_MAX
        while not me.finished:
            now = time.monotonic()
            if me in lg.waiting:  # not taken by a put yet
                idle = lg.puts_active == 0
                late = idle and now - lg.last_put_end >= _WAIT_GRACE
                if late or wo.checkpoint_id in lg.parents or now >= deadline:
                    return False  # put_writes leaves the queue
                lg.changed.wait(lg.last_put_end + _WAIT_GRACE - now if idle else min(deadline - now, 0.5))
            else:  # taken: wait for its put's commit
                lg.changed.wait()
        return me.stored
