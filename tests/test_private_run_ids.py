"""Run ids are the one thing a store keeps in clear (as directory names). A store created with
``private_run_ids=True`` names run directories by a keyed digest instead, so whoever can list the
bucket learns nothing of the ids (customer names, order numbers, LangGraph thread ids)."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata, empty_checkpoint

import s3ckpt
from s3ckpt.integrations.langgraph import S3ckptSaver
from s3ckpt.testing.plugin import S3Bucket

SECRET_IDS = ["customer-alice/order-4242", "ünïcødé bob", "x" * 300]


def _every_key(store: s3ckpt.Store) -> list[str]:
    return [info.key for info in store.backend.list("")]


def _exercise(store: s3ckpt.Store) -> None:
    for run_id in SECRET_IDS:
        with store.resume(run_id, workflow="w", workflow_version="1") as session:
            session.step("fetch", lambda: {"ok": True})
            session.emit("email", target="t", payload=1, send=lambda key: "ref")
            session.checkpoint(artifacts={"blob": b"z" * 200_000})
    saver = S3ckptSaver(store)
    config: RunnableConfig = {"configurable": {"thread_id": "thread-of-carol", "checkpoint_ns": ""}}
    md: CheckpointMetadata = {"source": "loop", "step": 0, "parents": {}}
    config = saver.put(config, empty_checkpoint(), md, {})
    saver.put_writes(config, [("c", 1)], "task")


@pytest.mark.parametrize("where", ["local", "moto"])
def test_private_run_ids_never_appear_in_object_keys(where: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    key = s3ckpt.generate_key()
    if where == "local":
        url, options = str(tmp_path / "store"), {}
    else:
        bucket: S3Bucket = request.getfixturevalue("moto_s3")
        url, options = bucket.url, {"endpoint_url": bucket.endpoint_url, "region": "us-east-1"}
    with s3ckpt.open_store(url, key=key, private_run_ids=True, **options) as store:
        assert store.config.run_names == "keyed"
        _exercise(store)
        keys = _every_key(store)
    words = ["alice", "4242", "bob", "carol", "xxxxxxxx", "langgraph", "thread"]
    leaked = [k for k in keys for w in words if w in k.lower()]
    assert leaked == []
    # The ids come back through the store (read from the records, authenticated).
    with s3ckpt.open_store(url, key=key, create=False, **options) as store:
        assert sorted(store.runs()) == sorted([*SECRET_IDS, "langgraph/thread-of-carol/"])
        latest = store.run(SECRET_IDS[0]).latest()
        assert latest is not None
        assert latest.read_artifact("blob") == b"z" * 200_000
        assert [e.status for e in latest.effects] == ["confirmed"]
        seen = S3ckptSaver(store).get_tuple({"configurable": {"thread_id": "thread-of-carol", "checkpoint_ns": ""}})
        assert seen is not None
        assert seen.pending_writes == [("task", "c", 1)]


def test_readable_run_ids_are_the_default_and_the_choice_is_fixed(tmp_path: Path) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key) as store:
        store.run("order-42").claim().commit({"n": 1})
        assert any("order-42" in k for k in _every_key(store))
    with pytest.raises(s3ckpt.ConfigurationError, match="cannot change"):
        s3ckpt.open_store(url, key=key, private_run_ids=True)
    private = str(tmp_path / "private")
    s3ckpt.open_store(private, key=key, private_run_ids=True).close()
    with pytest.raises(s3ckpt.ConfigurationError, match="cannot change"):
        s3ckpt.open_store(private, key=key, private_run_ids=False)
    with s3ckpt.open_store(private, key=key) as store:  # left out: whatever the store was created with
        assert store.config.run_names == "keyed"
        assert store.config.version == 3


def test_a_private_store_is_refused_by_a_client_that_would_write_readable_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from s3ckpt import store as store_module

    key = s3ckpt.generate_key()
    url = str(tmp_path / "private")
    s3ckpt.open_store(url, key=key, private_run_ids=True).close()
    monkeypatch.setattr(store_module, "NEWEST_FORMAT_VERSION", 2)  # what an older client reads
    with pytest.raises(s3ckpt.IncompatibleSchemaError, match="format version 3"):
        s3ckpt.open_store(url, key=key)
