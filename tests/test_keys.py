"""Key handling: raw, env:, passphrase (scrypt), AWS KMS through moto; wrong and missing keys."""

from __future__ import annotations

import base64
import logging
import uuid
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

import s3ckpt
from s3ckpt.keyring import parse_key
from s3ckpt.testing.plugin import S3Bucket


def _mem() -> str:
    return f"memory://keys-{uuid.uuid4().hex}"


def test_generate_key_is_32_random_bytes() -> None:
    keys = {s3ckpt.generate_key() for _ in range(100)}
    assert len(keys) == 100
    assert all(len(base64.b64decode(k)) == 32 for k in keys)


def test_missing_key_says_how_to_make_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3CKPT_KEY", raising=False)
    with pytest.raises(s3ckpt.MissingKeyError, match="s3ckpt key new"):
        s3ckpt.open_store(_mem())


@pytest.mark.parametrize("bad", ["short", "A" * 44, "passphrase:short", "kms:", "env:S3CKPT_NOT_SET"])
def test_malformed_keys_are_configuration_errors_without_echo(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("S3CKPT_NOT_SET", raising=False)
    with pytest.raises(s3ckpt.ConfigurationError) as info:
        s3ckpt.open_store(_mem(), key=bad)
    if bad.startswith("passphrase:"):
        assert "short" not in str(info.value)


def test_raw_bytes_and_env_keys_open_the_same_store(monkeypatch: pytest.MonkeyPatch) -> None:
    key = s3ckpt.generate_key()
    url = _mem()
    s3ckpt.open_store(url, key=key).run("r").claim().commit({"x": 1})
    monkeypatch.setenv("MY_CKPT_KEY", key)
    for spec in (base64.b64decode(key), "env:MY_CKPT_KEY", key):
        latest = s3ckpt.open_store(url, key=spec).run("r").latest()
        assert latest is not None
        assert latest.state == {"x": 1}


def test_wrong_key_is_decryption_error() -> None:
    url = _mem()
    s3ckpt.open_store(url, key=s3ckpt.generate_key())
    with pytest.raises(s3ckpt.DecryptionError, match="does not open the store"):
        s3ckpt.open_store(url, key=s3ckpt.generate_key())
    with pytest.raises(s3ckpt.DecryptionError):
        s3ckpt.open_store(url, key="passphrase:correct horse battery")


def test_passphrase_key_and_adding_removing_keys(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = _mem()
    store = s3ckpt.open_store(url, key="passphrase:correct horse battery staple")
    store.run("r").claim().commit({"v": 1})
    raw = s3ckpt.generate_key()
    raw_id = store.add_key(raw, label="ci")
    assert s3ckpt.open_store(url, key=raw).run("r").latest() is not None
    with pytest.raises(s3ckpt.DecryptionError):
        s3ckpt.open_store(url, key="passphrase:wrong horse battery staple")
    assert {k.kind for k in store.key_files()} == {"passphrase", "raw"}
    store.remove_key(raw_id)
    with pytest.raises(s3ckpt.DecryptionError):
        s3ckpt.open_store(url, key=raw)
    only = store.key_files()[0].key_id
    with pytest.raises(s3ckpt.ConfigurationError, match="last key"):
        store.remove_key(only)
    assert raw not in caplog.text
    assert "correct horse" not in caplog.text


def test_key_repr_never_shows_material() -> None:
    key = s3ckpt.generate_key()
    assert key not in repr(parse_key(key))
    assert "hunter22" not in repr(parse_key("passphrase:hunter22"))


def test_kms_key_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    with mock_aws():
        kms = boto3.client("kms", region_name="us-east-1")
        key_id = kms.create_key()["KeyMetadata"]["KeyId"]
        kms.create_alias(AliasName="alias/s3ckpt", TargetKeyId=key_id)
        url = _mem()
        s3ckpt.open_store(url, key="kms:alias/s3ckpt", region="us-east-1").run("r").claim().commit({"k": 1})
        with pytest.raises(s3ckpt.ConfigurationError, match="region"):
            s3ckpt.open_store(url, key=f"kms:{key_id}")
        latest = s3ckpt.open_store(url, key=f"kms:{key_id}", region="us-east-1").run("r").latest()
        assert latest is not None
        assert latest.state == {"k": 1}
        other = kms.create_key()["KeyMetadata"]["KeyId"]
        other_url = _mem()
        s3ckpt.open_store(other_url, key=f"kms:{other}", region="us-east-1")
        with pytest.raises(s3ckpt.DecryptionError, match="does not open"):
            s3ckpt.open_store(other_url, key="kms:alias/s3ckpt", region="us-east-1")


def test_kms_key_over_http(moto_s3: S3Bucket, tmp_path: Path) -> None:
    kms = boto3.client("kms", region_name="us-east-1", endpoint_url=moto_s3.endpoint_url)
    key_id = kms.create_key()["KeyMetadata"]["KeyId"]
    options = {"endpoint_url": moto_s3.endpoint_url, "region": "us-east-1", "kms_endpoint_url": moto_s3.endpoint_url}
    store = s3ckpt.open_store(moto_s3.url, key=f"kms:{key_id}", **options)
    store.run("r").claim().commit({"via": "kms"})
    assert any(k.kind == "kms" for k in store.key_files())
    latest = s3ckpt.open_store(moto_s3.url, key=f"kms:{key_id}", **options).run("r").latest()
    assert latest is not None
    assert latest.state == {"via": "kms"}


def test_missing_config_with_runs_is_not_silently_recreated(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    key = s3ckpt.generate_key()
    s3ckpt.open_store(url, key=key).run("r").claim().commit({"precious": True})
    (tmp_path / "s" / "config").unlink()
    with pytest.raises(s3ckpt.IntegrityError, match="config is missing but the store holds runs"):
        s3ckpt.open_store(url, key=key)
    assert (tmp_path / "s" / "runs").is_dir()
    assert not (tmp_path / "s" / "config").exists()
