"""A LangGraph checkpointer on s3ckpt: ``S3ckptSaver(store)`` (docs/langgraph.md).

Each (thread_id, checkpoint_ns) is one s3ckpt run, ``langgraph/<thread>/<ns>`` (both parts
percent-encoded, so the run id parses back). Every checkpoint (``put``) and the markers of
``prune``/``delete_for_runs`` (``forget``) and ``delete_thread`` (``drop``) are records of that
run's log, created with create-if-absent at the next sequence number after the last record this
saver observed. If another writer appended since this saver last read the thread, the sequence
number is taken and the call raises :class:`s3ckpt.ConflictError`: two graphs (processes, or
savers) cannot fork one thread. A ``put_writes`` call is one sealed object beside the log,
``runs/<run>/writes/<checkpoint>/<task>/<writer>/<indexes>``, created with create-if-absent and
never overwritten: it takes no log position, so it overlaps the next ``put``. While puts of the
run are under way (LangGraph's async durability), a ``put_writes`` instead waits for the put whose
parent is its checkpoint and rides in that put's record (``pw``).

Several hosts may write pending writes of one checkpoint (two resumes of one interrupt, a resume
by id after another host ran some tasks). Every read lists the thread, so each host's writes are
seen; and a put names its writer and the other writers' writes it was computed from (``wr``,
``wf``), so once a checkpoint has a child its pending writes are that child's, never a losing
host's.

A thread's latest checkpoint (``get_tuple`` without an id, ``prune``'s keep_latest, ``list``'s
newest first) is the last put of its log, never the largest id: ids are uuid6 values of the
writing host's clock.

What the saver stores that is not a channel value goes through the store's redactor (checkpoint
metadata, task paths); names LangGraph reads back (channel and node names, ids) are checked and
refused when the redactor finds a secret in them (docs/langgraph.md, "Redaction").

Channel values are serialized with the saver's ``serde`` (LangGraph's JsonPlusSerializer, pickle
fallback off). A small value is stored in the record; a large one is an artifact of the record,
content-addressed and deduplicated by chunk. A channel whose version did not change is not stored
again: the record names the stored value of its parent (the large ones by manifest, no upload).

One idea a module (the saver's methods live in the classes of ``redaction``, ``values``, ``writes``,
``thread_log``, ``reading``, ``deletion`` and ``aio``, which :class:`S3ckptSaver` is made of):

- ``ids``: run ids of threads and the keys of writes objects;
- ``redaction``: checks of the names LangGraph reads back, redaction of metadata;
- ``values``: serialization of values, inline or as chunked artifacts;
- ``writes``: writes objects, sealed beside the log;
- ``index``: what a saver knows of a run (``_Log``) and how each record changes it;
- ``pending``: which pending writes of a checkpoint count;
- ``riding``: pending writes carried by the next put's record;
- ``reuse``: chunks and unchanged channel values a put reuses;
- ``thread_log``: reading a run's log into the index, appending at the next seq;
- ``reading``: ``get_tuple`` and ``list``;
- ``deletion``: ``delete_thread``, ``delete_for_runs``, ``prune``;
- ``aio``: the async methods;
- ``saver``: :class:`S3ckptSaver`, with ``put``, ``put_writes`` and ``copy_thread``.
"""

from __future__ import annotations

from .ids import RUN_PREFIX as RUN_PREFIX
from .ids import parse_run_id, run_id_for
from .ids import writes_key as writes_key
from .ids import writes_prefix as writes_prefix
from .saver import S3ckptSaver
from .values import DEFAULT_INLINE_LIMIT as DEFAULT_INLINE_LIMIT
from .writes import WRITES_KIND as WRITES_KIND
from .writes import _Writes as _Writes

__all__ = ["S3ckptSaver", "parse_run_id", "run_id_for"]
