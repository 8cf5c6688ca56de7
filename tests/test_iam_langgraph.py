"""The LangGraph saver's deletion under the Terraform module's roles: a worker's delete_thread,
delete_for_runs and prune only append markers (creates), the operator's gc collects
(docs/langgraph.md, "Deletion"; docs/operations.md, "Marking is the worker's part")."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata

import s3ckpt
from s3ckpt.backends import PutResult, S3Backend
from s3ckpt.backends._base import PutMode
from s3ckpt.cli import run_row
from s3ckpt.errors import AccessDeniedError
from s3ckpt.integrations.langgraph import S3ckptSaver, run_id_for
from tests.test_iam import REGION, Aws, bootstrap, iam_enforced

GRACE = timedelta(seconds=2)


class BucketPolicy(S3Backend):
    """The worker's S3 backend as the module's bucket policy treats it (which moto does not
    enforce): a PUT without If-None-Match to a record, pack or key file is refused."""

    def put(self, key: str, data: bytes | bytearray | memoryview, *, mode: PutMode = "overwrite", **kw: Any) -> PutResult:
        write_once = "/log/" in key or key.startswith(("packs/", "keys/"))
        if write_once and mode != "create":
            raise AccessDeniedError(f"AccessDenied: the bucket policy requires If-None-Match on {key}")
        return super().put(key, data, mode=mode, **kw)


def _worker(aws: Aws) -> s3ckpt.Store:
    aws.open("alpha", aws.workers["alpha"], commit_deadline=1).close()  # created by the worker, as in production
    backend = BucketPolicy(aws.bucket, "alpha", region=REGION, credentials=aws.workers["alpha"])
    return s3ckpt.open_store(key=aws.keys["alpha"], backend=backend, create=False, commit_deadline=1)


def _config(thread: str, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _put(saver: S3ckptSaver, thread: str, parent: str | None, cid: str, n: int, value: Any) -> RunnableConfig:
    checkpoint = Checkpoint(
        v=1,
        id=cid,
        ts="2026-01-01T00:00:00+00:00",
        channel_values={"x": value},
        channel_versions={"x": f"{n:032}.0"},
        versions_seen={},
        updated_channels=None,
    )
    metadata: CheckpointMetadata = {"source": "loop", "step": n, "parents": {}, "run_id": f"{thread}-{cid}"}
    return saver.put(_config(thread, parent), checkpoint, metadata, {"x": f"{n:032}.0"})


def _writes_keys(store: s3ckpt.Store, thread: str) -> list[str]:
    prefix = store.run(run_id_for(thread)).prefix + "writes/"
    return sorted(info.key for info in store.backend.list(prefix))


@iam_enforced
def test_a_worker_deletes_threads_and_checkpoints_and_the_operator_collects() -> None:
    aws = bootstrap()
    big = [os.urandom(3000).hex() for _ in range(6)]  # above inline_limit: packs
    with _worker(aws) as worker:
        saver = S3ckptSaver(worker, inline_limit=1024)
        # "gone": deleted whole; "pruned": keeps its latest; "runs": loses one checkpoint by run id
        for thread in ("gone", "pruned", "runs"):
            first = _put(saver, thread, None, "1", 1, big[0] if thread == "gone" else "small")
            saver.put_writes(first, [("w", big[1] if thread == "gone" else "w1")], "task")
            second = _put(saver, thread, "1", "2", 2, big[2] if thread == "gone" else big[3 if thread == "pruned" else 4])
            saver.put_writes(second, [("w", big[5] if thread == "runs" else "w2")], "task")
        # The worker's part: each is one create per namespace; none needs a delete or a replace.
        saver.delete_thread("gone")
        saver.prune(["pruned"])
        saver.delete_for_runs(["runs-2"])
        fresh = S3ckptSaver(worker, inline_limit=1024)
        assert fresh.get_tuple(_config("gone")) is None
        assert [t.checkpoint["id"] for t in fresh.list(_config("pruned"))] == ["2"]
        assert [t.checkpoint["id"] for t in fresh.list(_config("runs"))] == ["1"]
        kept = fresh.get_tuple(_config("runs"))
        assert kept is not None
        assert kept.pending_writes == [("task", "w", "w1")]
        # The core's views agree with the saver's: the dropped thread is deleted, nothing is damaged.
        rows = {thread: run_row(worker, run_id_for(thread)) for thread in ("gone", "pruned", "runs")}
        assert {t: r["status"] for t, r in rows.items()} == {"gone": "deleted", "pruned": "running", "runs": "running"}
        assert all(r["problem"] is None for r in rows.values())
        assert worker.run(run_id_for("gone")).latest() is None
        assert list(worker.run(run_id_for("gone")).history()) == []
        before = {t: len(_writes_keys(worker, t)) for t in ("gone", "pruned", "runs")}
        assert before == {"gone": 2, "pruned": 2, "runs": 2}  # nothing was deleted
    time.sleep(GRACE.total_seconds() + 1.1)  # the grace, by the storage's clock (whole seconds on S3)
    with aws.open("alpha", aws.operator, create=False, commit_deadline=1) as operator:
        assert operator.verify(read_data=True).ok  # before collection: not damage either
        report = operator.gc(grace=GRACE)
        assert report.writes_deleted == 4  # gone's two, pruned's first, runs' second
        assert report.packs_deleted >= 4
        assert {t: len(_writes_keys(operator, t)) for t in ("gone", "pruned", "runs")} == {"gone": 0, "pruned": 1, "runs": 1}
        kinds = {t: [r.kind for r in operator.run(run_id_for(t)).records()] for t in ("gone", "pruned", "runs")}
        assert kinds == {
            "gone": ["pruned", "pruned", "deleted"],
            "pruned": ["pruned", "checkpoint", "checkpoint"],
            "runs": ["checkpoint", "pruned", "checkpoint"],
        }
        verified = operator.verify(read_data=True)
        assert verified.ok, verified.problems
        assert verified.orphans == []
        stats = operator.stats()
        assert stats.garbage_bytes == 0
    with _worker(aws) as worker:
        reader = S3ckptSaver(worker, inline_limit=1024)
        latest = reader.get_tuple(_config("pruned"))
        assert latest is not None
        assert latest.checkpoint["channel_values"] == {"x": big[3]}
        assert latest.pending_writes == [("task", "w", "w2")]
        # A thread id is used again after delete_thread: a new history after the drop marker.
        again = _put(reader, "gone", None, "3", 3, big[0])
        reader.put_writes(again, [("w", "new")], "task")
        fresh = S3ckptSaver(worker, inline_limit=1024).get_tuple(_config("gone"))
        assert fresh is not None
        assert fresh.checkpoint["channel_values"] == {"x": big[0]}
        assert fresh.pending_writes == [("task", "w", "new")]
        assert run_row(worker, run_id_for("gone"))["status"] == "running"
