"""Schema versions of every persisted structure, and workflow versions with their policies."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import s3ckpt
from s3ckpt import codec
from s3ckpt._names import log_key
from s3ckpt.migrations import RECORD_MIGRATIONS, migrate_record
from s3ckpt.records import RECORD_SCHEMA_VERSION


def _store() -> s3ckpt.Store:
    return s3ckpt.open_store(f"memory://versions-{uuid.uuid4().hex}", key=s3ckpt.generate_key())


def _written_by(store: s3ckpt.Store, version: str, state: object, **provenance: str) -> None:
    store.run("r").claim(workflow="refund", workflow_version=version, **provenance).commit(state)


def test_migrations_chain_in_order() -> None:
    store = _store()
    _written_by(store, "1", {"log": []})
    store.register_migration("refund", "2", "3", lambda s: {**s, "log": [*s["log"], "2->3"]})
    store.register_migration("refund", "1", "2", lambda s: {**s, "log": [*s["log"], "1->2"]})
    cp = store.run("r").latest(workflow_version="3")
    assert cp is not None
    assert cp.state == {"log": ["1->2", "2->3"]}
    assert cp.version_change is not None
    assert (cp.version_change.from_version, cp.version_change.to_version) == ("1", "3")
    # the stored record is untouched: accept sees what was written
    raw = store.run("r").latest(workflow_version="3", on_version_change="accept")
    assert raw is not None
    assert raw.state == {"log": []}


def test_missing_link_names_it() -> None:
    store = _store()
    _written_by(store, "1", {"n": 1})
    store.register_migration("refund", "2", "3", lambda s: s)
    with pytest.raises(s3ckpt.IncompatibleSchemaError, match="no migration from version '1'") as info:
        store.run("r").latest(workflow_version="3")
    assert "register_migration('refund', '1'" in str(info.value)
    assert "2->3" in str(info.value)


def test_a_failing_migration_is_an_incompatible_schema_error() -> None:
    store = _store()
    _written_by(store, "1", {"n": 1})
    store.register_migration("refund", "1", "2", lambda s: s["missing"])
    with pytest.raises(s3ckpt.IncompatibleSchemaError, match="from '1' to '2' failed"):
        store.run("r").latest(workflow_version="2")


def test_register_refuses_ambiguous_or_looping_chains() -> None:
    store = _store()
    store.register_migration("w", "1", "2", lambda s: s)
    with pytest.raises(s3ckpt.ConfigurationError, match="exactly one next version"):
        store.register_migration("w", "1", "3", lambda s: s)
    with pytest.raises(s3ckpt.ConfigurationError):
        store.register_migration("w", "2", "2", lambda s: s)
    store.register_migration("w", "2", "1", lambda s: s)
    _written_by_w = store.run("x").claim(workflow="w", workflow_version="1")
    _written_by_w.commit({})
    with pytest.raises(s3ckpt.ConfigurationError, match="loop"):
        store.run("x").latest(workflow_version="9")


def test_invalidate_and_accept_policies() -> None:
    store = _store()
    _written_by(store, "1", {"n": 1})
    assert store.run("r").latest(workflow_version="2", on_version_change="invalidate") is None
    accepted = store.run("r").latest(workflow_version="2", on_version_change="accept")
    assert accepted is not None
    assert accepted.state == {"n": 1}
    assert accepted.version_change is not None
    assert accepted.version_change.version_changed
    same = store.run("r").latest(workflow_version="1", on_version_change="invalidate")
    assert same is not None
    assert same.version_change is None
    with pytest.raises(s3ckpt.InvalidArgumentError):
        store.run("r").latest(workflow_version="2", on_version_change="ignore")  # type: ignore[arg-type]


def test_provenance_follows_the_same_policy() -> None:
    store = _store()
    _written_by(store, "1", {"n": 1}, model="m-1", prompt_hash="abc")
    now = {"model": "m-2", "prompt_hash": "abc"}
    assert store.run("r").latest(workflow_version="1", provenance=now, on_version_change="invalidate") is None
    migrated = store.run("r").latest(workflow_version="1", provenance=now)
    assert migrated is not None
    assert migrated.state == {"n": 1}
    assert migrated.version_change is not None
    assert migrated.version_change.provenance == {"model": ("m-1", "m-2")}
    unchanged = store.run("r").latest(workflow_version="1", provenance={"model": "m-1"}, on_version_change="invalidate")
    assert unchanged is not None


def test_migrating_a_checkpoint_without_a_workflow_version_is_refused() -> None:
    store = _store()
    store.run("r").claim().commit({"n": 1})
    with pytest.raises(s3ckpt.IncompatibleSchemaError, match="records no workflow version"):
        store.run("r").latest(workflow_version="2")


def test_newer_record_schema_is_refused_naming_both_versions() -> None:
    store = _store()
    store.run("r").claim().commit({"n": 1})
    record = store.run("r").get(1).record
    document = json.loads(record.model_dump_json())
    document["schema_version"] = RECORD_SCHEMA_VERSION + 5
    document["seq"] = 2
    document["future_field"] = True
    flag, payload = codec.compress(json.dumps(document).encode())
    sealed = store.cipher.seal("log", "r/2", payload, flag=flag)
    store.backend.put(log_key("r", 2), sealed)
    with pytest.raises(s3ckpt.IncompatibleSchemaError) as info:
        store.run("r").get(2)
    assert str(RECORD_SCHEMA_VERSION + 5) in str(info.value)
    assert str(RECORD_SCHEMA_VERSION) in str(info.value)
    assert "upgrade s3ckpt" in str(info.value)


def test_newer_store_format_is_refused(tmp_path: Path) -> None:
    key = s3ckpt.generate_key()
    s3ckpt.open_store(str(tmp_path / "s"), key=key).close()
    config = json.loads((tmp_path / "s" / "config").read_text())
    config["version"] = 99
    (tmp_path / "s" / "config").write_text(json.dumps(config))
    with pytest.raises(s3ckpt.IncompatibleSchemaError, match="format version 99"):
        s3ckpt.open_store(str(tmp_path / "s"), key=key)


def test_newer_key_file_is_refused_with_upgrade_advice(tmp_path: Path) -> None:
    key = s3ckpt.generate_key()
    s3ckpt.open_store(str(tmp_path / "s"), key=key).close()
    (keyfile,) = (tmp_path / "s" / "keys").iterdir()
    document = json.loads(keyfile.read_text())
    document["version"] = 7
    document["new_kdf"] = "argon3"
    keyfile.write_text(json.dumps(document))
    with pytest.raises(s3ckpt.IncompatibleSchemaError, match="key files of version 7"):
        s3ckpt.open_store(str(tmp_path / "s"), key=key)


def test_record_migrations_are_an_ordered_list() -> None:
    assert len(RECORD_MIGRATIONS) == RECORD_SCHEMA_VERSION - 1
    v1 = {"schema_version": 1, "artifacts": {"a": {"size": 3, "chunks": [{"id": "0" * 64, "size": 3}]}}}
    v2 = migrate_record(v1, 1)
    assert v2["schema_version"] == RECORD_SCHEMA_VERSION
    assert v2["artifacts"]["a"]["chunks"] == [{"id": "0" * 64, "size": 3, "pack": None, "offset": 0, "length": None}]


def test_full_validation_reads_every_chunk_on_load() -> None:
    store = _store()
    cp = store.run("r").claim().commit({}, artifacts={"a": b"x" * 1000})
    ref = cp.record.artifacts["a"].chunks[0]
    assert ref.pack is not None
    key = f"packs/{ref.pack[:2]}/{ref.pack}"
    data = bytearray(store.backend.get(key).data)
    data[ref.offset + 40] ^= 1
    store.backend.put(key, bytes(data))
    assert store.run("r").latest() is not None  # exists and is long enough
    with pytest.raises(s3ckpt.IntegrityError):
        store.run("r").latest(validate="full")
    with pytest.raises(s3ckpt.IntegrityError):
        store.run("r").get(1, validate="full")
