"""Names: the run id of a thread's namespace (and where a config points), and the keys of writes
objects under a run.

A thread's namespace is the run ``langgraph/<thread>/<ns>`` (both parts percent-encoded, so the id
parses back). The writes object of one ``put_writes`` call is
``<run prefix>writes/<checkpoint>/<task>/<writer>/<indexes>`` (docs/langgraph.md, "Layout").
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from urllib.parse import quote, unquote

from langchain_core.runnables import RunnableConfig

from ...names import encode_segment

#: Every run this saver writes has an id starting with this.
RUN_PREFIX = "langgraph/"


def run_id_for(thread_id: str, checkpoint_ns: str = "") -> str:
    """The s3ckpt run id of a LangGraph thread's namespace."""
    return f"{RUN_PREFIX}{quote(thread_id, safe='')}/{quote(checkpoint_ns, safe='')}"


def parse_run_id(run_id: str) -> tuple[str, str] | None:
    """(thread_id, checkpoint_ns) of a run written by the saver, or None for any other run."""
    if not run_id.startswith(RUN_PREFIX):
        return None
    parts = run_id[len(RUN_PREFIX) :].split("/")
    if len(parts) != 2:
        return None
    return unquote(parts[0]), unquote(parts[1])


def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id or None) of a config."""
    conf = config["configurable"]
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), conf.get("checkpoint_id")


def _segment(text: str) -> str:
    """A key segment for a checkpoint or task id (injective; "~" alone for the empty string,
    which no escaped name can be)."""
    return encode_segment(text) if text else "~"


def _idx_name(idxs: Sequence[int]) -> str:
    name = "_".join(str(i) for i in idxs)
    return name if len(name) <= 64 else "h" + hashlib.sha256(name.encode()).hexdigest()


def writes_prefix(run_prefix: str, checkpoint_id: str) -> str:
    """Where the writes objects of one checkpoint live, under the run's prefix (``Run.prefix``)."""
    return f"{run_prefix}writes/{_segment(checkpoint_id)}/"


def writes_key(
    run_prefix: str,
    checkpoint_id: str,
    task_id: str,
    idxs: Sequence[int],
    writer: str | None,
    t: int = 0,
    *,
    timed: bool = False,
) -> str:
    """The key of the writes object of one ``put_writes`` call (its writes' indexes, in order) by
    one writer (a saver's ``writer_id``), written at ``t``. A call with a special channel (negative
    index) is named by its time too: special writes supersede earlier ones by a newer object, so
    no object is ever overwritten, and what a key names never changes. So is a call whose key
    without it is taken by an object a forget marker hid (``timed``: the writer writes that
    write again, and the hidden object is never overwritten). ``writer=None`` is the layout before
    writers were named (read, never written)."""
    name = _idx_name(idxs)
    if writer is None:
        return f"{writes_prefix(run_prefix, checkpoint_id)}{_segment(task_id)}/{name}"
    if timed or any(i < 0 for i in idxs):
        name = f"{name}.{t}"
    return f"{writes_prefix(run_prefix, checkpoint_id)}{_segment(task_id)}/{_segment(writer)}/{name}"
