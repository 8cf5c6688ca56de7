"""Every create-if-absent s3ckpt makes resolves a lost answer the same way.

At the moto server, the first PUT of each kind of object lands and then answers 500, so botocore
retries it by itself and the retry meets 412: exactly what S3 does when a response is lost. Nothing
on the client says a retry happened; the retry layer (backends/_retry.py) reads the object back and
recognises its own bytes. Before this, a store whose config PUT lost its answer concluded that another
process had won, deleted its own key file, and was left unopenable forever.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata, empty_checkpoint

import s3ckpt
from s3ckpt.integrations.langgraph import S3ckptSaver
from s3ckpt.testing import RequestInfo
from s3ckpt.testing.plugin import S3Bucket


def _land_then_fail_first(bucket: S3Bucket, fragment: str) -> list[str]:
    """Make the first PUT whose path contains ``fragment`` land, then answer 500."""
    hit: list[str] = []

    def inject(info: RequestInfo) -> Any:
        if info.method == "PUT" and fragment in info.path and not hit:
            hit.append(info.path)
            return "after-500"
        return None

    bucket.server.inject = inject
    return hit


def _open(bucket: S3Bucket, key: str, **kw: Any) -> s3ckpt.Store:
    return s3ckpt.open_store(bucket.url, key=key, endpoint_url=bucket.endpoint_url, region="us-east-1", **kw)


@pytest.mark.parametrize("fragment", ["/config", "/keys/"])
def test_store_creation_survives_a_lost_answer(moto_s3: S3Bucket, s3ckpt_key: str, fragment: str) -> None:
    hit = _land_then_fail_first(moto_s3, fragment)
    with _open(moto_s3, s3ckpt_key) as created:
        store_id = created.config.store_id
    moto_s3.server.inject = None
    assert hit, "the fault was not injected"
    with _open(moto_s3, s3ckpt_key, create=False) as reopened:  # the config and its key file are both there
        assert reopened.config.store_id == store_id
        assert len(reopened.key_files()) == 1


def test_adding_a_key_survives_a_lost_answer(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    second = s3ckpt.generate_key()
    with _open(moto_s3, s3ckpt_key) as store:
        hit = _land_then_fail_first(moto_s3, "/keys/")
        store.add_key(second)
    moto_s3.server.inject = None
    assert hit
    _open(moto_s3, second, create=False).close()


@pytest.mark.parametrize("fragment", ["/packs/", "/log/", "/HEAD"])
def test_a_commit_survives_a_lost_answer_on_each_of_its_objects(moto_s3: S3Bucket, s3ckpt_key: str, fragment: str) -> None:
    with _open(moto_s3, s3ckpt_key) as store:
        writer = store.run("r").claim()
        hit = _land_then_fail_first(moto_s3, fragment)
        committed = writer.commit({"n": 1}, artifacts={"blob": b"x" * 300_000})
        moto_s3.server.inject = None
        assert hit
        assert writer.commit({"n": 2}).seq == committed.seq + 1
    with _open(moto_s3, s3ckpt_key, create=False) as fresh:
        latest = fresh.run("r").latest(validate="full")
        assert latest is not None
        assert latest.state == {"n": 2}
        assert latest.read_artifact("blob") == b"x" * 300_000
        assert [r.seq for r in fresh.run("r").records()] == [0, 1, 2]


def test_a_claim_survives_a_lost_answer(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    with _open(moto_s3, s3ckpt_key) as store:
        store.run("r").claim().commit({"n": 1})
        hit = _land_then_fail_first(moto_s3, "/log/")
        writer = store.run("r").claim()  # the claim record is the one that lands and "fails"
        moto_s3.server.inject = None
        assert hit
        assert writer.commit({"n": 2}).seq == 3


def test_removing_a_key_survives_a_lost_answer(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    second = s3ckpt.generate_key()
    with _open(moto_s3, s3ckpt_key) as store:
        added = store.add_key(second)
        hit = _land_then_fail_first(moto_s3, "/key-removals/")
        store.remove_key(added)
        moto_s3.server.inject = None
        assert hit
        assert [k.key_id for k in store.key_files()] != [added]
        assert list(store.backend.list("key-removals/")) == []


def test_langgraph_pending_writes_survive_a_lost_answer(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    with _open(moto_s3, s3ckpt_key) as store:
        saver = S3ckptSaver(store)
        config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
        config = saver.put(config, empty_checkpoint(), md, {})
        hit = _land_then_fail_first(moto_s3, "/writes/")
        saver.put_writes(config, [("channel", {"v": 1})], "task-1")
        moto_s3.server.inject = None
        assert hit
        seen = S3ckptSaver(store).get_tuple(config)
        assert seen is not None
        assert seen.pending_writes == [("task-1", "channel", {"v": 1})]


def test_a_create_another_writer_won_is_still_a_conflict(moto_s3: S3Bucket, s3ckpt_key: str) -> None:
    """Reading back tells our landed write from another writer's: a real race still loses."""
    with _open(moto_s3, s3ckpt_key) as store:
        writer = store.run("r").claim()
        store.run("r").claim()  # a newer writer takes the next seq first
        with pytest.raises(s3ckpt.FencedError):
            writer.commit({"stale": True})
        store_id = store.config.store_id
    with pytest.raises(s3ckpt.DecryptionError):  # another key meets the existing store, not a new one
        _open(moto_s3, s3ckpt.generate_key())
    with _open(moto_s3, s3ckpt_key, create=False) as again:
        assert again.config.store_id == store_id
