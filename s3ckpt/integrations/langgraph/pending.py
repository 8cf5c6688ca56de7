"""Which pending writes of a checkpoint count (docs/langgraph.md, "Pending writes of a checkpoint").

Several hosts may write pending writes of one checkpoint. Until the checkpoint has a child, all of
them count; once it has one, those its latest child was computed from: the child's writer's own
(``wr``) and the other writers' writes it read (``wf``). A host that lost the race to commit the
child keeps its writes, and they never count.
"""

from __future__ import annotations

from typing import Any, cast

from langgraph.checkpoint.base import writes_sort_key

from .ids import writes_prefix
from .index import _Log, _put_writer
from .values import _Ref
from .writes import _Writes


def _pin(lg: _Log, checkpoint_id: str) -> tuple[str, set[str]] | None:
    """What the latest live child of a checkpoint was computed from: its writer (whose writes of
    the checkpoint are its own) and the idents of the other writers' writes it read (``wf``).
    None when the checkpoint has no child (or only one written before children said so)."""
    seqs = lg.children.get(checkpoint_id)
    if not seqs:
        return None
    record = lg.records[max(seqs)]
    state = cast(dict[str, Any], record.state)
    if "wf" not in state:
        return None
    prefix = writes_prefix(lg.run.prefix, checkpoint_id)
    return _put_writer(record), {prefix + tail for tail in state["wf"]}


def _counted(lg: _Log, checkpoint_id: str) -> list[_Writes]:
    """The writes (objects, or carried by records) of a checkpoint that count. Without a child,
    all of them. With one, those its latest child was computed from: for a task its writer
    wrote, that writer's writes only; for any other task, the writes the child's writer read
    (``wf``). A host that lost the race to commit the child wrote its writes too; they are
    kept, and never count."""
    objects = [lg.wobjs[k] for k in lg.writes.get(checkpoint_id, ())]
    pin = _pin(lg, checkpoint_id)
    if pin is None:
        return objects
    writer, read = pin
    own = {wo.task for wo in objects if wo.writer == writer}
    return [wo for wo in objects if (wo.writer == writer if wo.task in own else wo.ident(lg.run.prefix) in read)]


def _pending(lg: _Log, checkpoint_id: str, *, writer: str | None = None) -> list[tuple[str, str, int, str, _Writes, _Ref]]:
    """The pending writes of a checkpoint (only ``writer``'s when given): (task, channel, idx,
    path, object, ref) in writes_sort_key order. Objects apply in the order they were written:
    the first write of a (task, idx) wins; of special (negative idx) ones, the latest."""
    found: dict[tuple[str, int], tuple[str, str, int, str, _Writes, _Ref]] = {}
    if writer is None:
        counted = _counted(lg, checkpoint_id)
    else:
        counted = [lg.wobjs[k] for k in lg.writes.get(checkpoint_id, ()) if lg.wobjs[k].writer == writer]
    objects = sorted(counted, key=lambda wo: (wo.t, wo.key))
    for wo in objects:
        for idx, channel, ref in wo.w:
            key = (wo.task, idx)
            if idx >= 0 and key in found:
                continue
            found[key] = (wo.task, channel, idx, wo.path, wo, ref)
    return sorted(found.values(), key=lambda w: writes_sort_key(w[3], w[0], w[2]))
