"""Deleting under the Terraform module's roles: a worker marks (its `deleted` record needs no
delete permission), the operator collects (docs/operations.md, "Marking is the worker's part")."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest

import s3ckpt
from s3ckpt import AccessDeniedError
from tests.test_iam import bootstrap, iam_enforced


@iam_enforced
def test_a_worker_deletes_a_run_and_the_operator_collects_its_data() -> None:
    aws = bootstrap()
    with aws.open("alpha", aws.workers["alpha"], commit_deadline=1) as worker:
        writer = worker.run("r").claim()
        writer.commit({"x": 1}, artifacts={"a": os.urandom(50_000)})
        worker.run("keep").claim().commit({"y": 2}, artifacts={"b": os.urandom(50_000)})
        assert worker.delete_run("r") == 2  # the worker's part: one create, no delete
        with pytest.raises(s3ckpt.RunDeletedError):
            writer.commit({"x": 2})
        assert worker.run("r").latest() is None
        with pytest.raises(AccessDeniedError, match="operator role"):
            worker.gc(grace=timedelta(seconds=2))
    time.sleep(3.1)  # the grace, by the storage's clock (whole seconds on S3)
    with aws.open("alpha", aws.operator, commit_deadline=1) as operator:
        report = operator.gc(grace=timedelta(seconds=2))
        assert report.packs_deleted == 1  # r's pack; keep's stays
        assert {r.kind for r in operator.run("r").records() if r.seq < 2} == {"pruned"}
        verified = operator.verify(read_data=True)
        assert verified.ok, verified.problems
        assert verified.orphans == []
        latest = operator.run("keep").latest()
        assert latest is not None
        assert len(latest.read_artifact("b")) == 50_000
