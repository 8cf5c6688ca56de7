"""The scheduled maintenance handler (s3ckpt/aws_maintenance.py) against real stores.

Each test commits real checkpoints, then invokes ``handler(event, context)`` as Lambda would, with
its configuration in the environment: on a local directory, on the moto server with a ``kms:`` key,
and on moto with IAM enforced under the maintenance policy rendered from terraform/maintenance.tf.
A record that prune replaces by a tombstone keeps its data for gc's grace (a writer stalled before
the prune may still name it), so, as on a schedule, the data a run prunes is freed by the next run
once the grace has passed: the tests run the handler twice with the grace in between.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

import s3ckpt
from s3ckpt import aws_maintenance
from s3ckpt.aws_maintenance import config_from_env, handler
from s3ckpt.testing.plugin import S3Bucket

from .test_iam import REGION, _denied, _user, bootstrap, client, iam_enforced
from .test_terraform import maintenance_policy_from_tf

ARTIFACT = 64 << 10
#: The writers' commit deadline (their claims record it), so that gc accepts a grace of a second.
DEADLINE = "0.4"
GRACE_SECONDS = 1


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No maintenance variable leaks in from the machine or from another test."""
    for name in aws_maintenance.ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def configure(monkeypatch: pytest.MonkeyPatch, url: str, key: str, **settings: str) -> None:
    monkeypatch.setenv("S3CKPT_URL", url)
    monkeypatch.setenv("S3CKPT_KEY", key)
    monkeypatch.setenv("S3CKPT_GC_GRACE_SECONDS", str(GRACE_SECONDS))
    monkeypatch.setenv("S3CKPT_COMMIT_DEADLINE_SECONDS", DEADLINE)
    for name, value in settings.items():
        monkeypatch.setenv(f"S3CKPT_{name.upper()}", value)


def commit_steps(store: s3ckpt.Store, run_id: str, steps: int) -> list[bytes]:
    """``steps`` checkpoints, each with a new random artifact (its own pack); their payloads."""
    writer = store.run(run_id).claim()
    payloads = []
    for step in range(steps):
        payloads.append(os.urandom(ARTIFACT))
        writer.commit({"step": step}, artifacts={"weights": payloads[-1]})
    return payloads


def steps_of(store: s3ckpt.Store, run_id: str) -> list[int]:
    return [checkpoint.state["step"] for checkpoint in store.run(run_id).history()]


def past_the_grace(slack: float = 0.6) -> None:
    """Wait until what was written or tombstoned so far is older than the grace, by the storage's
    clock (S3's LastModified has whole seconds, so the moto tests pass more slack)."""
    time.sleep(GRACE_SECONDS + slack)


def invoke(event: object = None) -> dict[str, Any]:
    result = handler({} if event is None else event, None)
    json.dumps(result)  # Lambda returns it as JSON
    return result


def check_pruned_then_collected(
    store: s3ckpt.Store, payloads: list[bytes], *, slack: float = 0.6, verifier: s3ckpt.Store | None = None
) -> None:
    """Two scheduled runs with keep_last=2 over one run of six checkpoints: the first prunes the
    four oldest, the next (after the grace) frees their packs; the two kept restore byte for byte
    and ``verifier`` (default ``store``; verify lists object versions, an operator's permission)
    finds nothing missing."""
    before = store.stats()
    first = invoke()
    assert first["prune"]["records_pruned"] == 4
    assert not first["prune"]["dry_run"]
    assert steps_of(store, "train") == [4, 5]
    past_the_grace(slack)
    second = invoke()
    assert second["prune"]["records_pruned"] == 0, "nothing more to prune"
    gc = second["gc"]
    assert gc["packs_deleted"] >= 4
    assert gc["bytes_freed"] >= 4 * ARTIFACT
    after = store.stats()
    assert after.garbage_bytes == 0
    assert after.stored_bytes <= before.stored_bytes - gc["bytes_freed"]
    for seq_back, payload in ((1, payloads[-1]), (2, payloads[-2])):
        checkpoint = list(store.run("train").history())[-seq_back]
        assert checkpoint.read_artifact("weights") == payload
    assert (verifier or store).verify(read_data=True).ok


# -- a local directory ---------------------------------------------------------------------------------


def test_prune_then_gc_on_a_local_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key, commit_deadline=float(DEADLINE)) as store:
        payloads = commit_steps(store, "train", 6)
        commit_steps(store, "eval", 2)
        configure(monkeypatch, url, key, keep_last="2")
        with caplog.at_level(logging.INFO, logger="s3ckpt.maintenance"):
            check_pruned_then_collected(store, payloads)
        assert steps_of(store, "eval") == [0, 1], "a run within the policy is untouched"
    # One summary line per run, with the counts; never the key, nor a run id.
    lines = [r.getMessage() for r in caplog.records if r.name == "s3ckpt.maintenance"]
    assert len(lines) == 2
    assert all(line.startswith("s3ckpt maintenance: ") for line in lines)
    summary = json.loads(lines[0].removeprefix("s3ckpt maintenance: "))
    assert summary["prune"]["records_pruned"] == 4
    assert summary["keep_last"] == 2
    assert "packs_deleted" in summary["gc"]
    assert key not in caplog.text
    assert "train" not in caplog.text
    assert "eval" not in caplog.text


def test_dry_run_from_the_environment_or_the_event_deletes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key, commit_deadline=float(DEADLINE)) as store:
        commit_steps(store, "train", 6)
        configure(monkeypatch, url, key, keep_last="2", dry_run="true")
        planned = invoke({"version": "0", "detail-type": "Scheduled Event", "detail": {}})  # what EventBridge sends
        assert planned["prune"]["dry_run"]
        assert planned["gc"]["dry_run"]
        assert planned["prune"]["records_pruned"] == 4, "it says what it would prune"
        assert steps_of(store, "train") == [0, 1, 2, 3, 4, 5]
        # The event overrides the environment, both ways.
        assert not invoke({"dry_run": False})["prune"]["dry_run"]
        assert steps_of(store, "train") == [4, 5]
        monkeypatch.setenv("S3CKPT_DRY_RUN", "false")
        past_the_grace()
        stored = store.stats().stored_bytes
        would = invoke({"dry_run": True})["gc"]
        assert would["packs_deleted"] >= 4
        assert store.stats().stored_bytes == stored, "a dry run deletes nothing"
        assert invoke()["gc"]["bytes_freed"] == would["bytes_freed"]
        assert store.stats().garbage_bytes == 0


def test_without_a_retention_policy_it_only_collects_garbage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key, commit_deadline=float(DEADLINE)) as store:
        commit_steps(store, "train", 3)
        commit_steps(store, "abandoned", 3)
        store.delete_run("abandoned")  # an operator's `s3ckpt rm`: its data is garbage after the grace
        configure(monkeypatch, url, key)
        past_the_grace()
        result = invoke()
        assert result["prune"] is None
        assert result["gc"]["packs_deleted"] >= 3
        assert steps_of(store, "train") == [0, 1, 2]
        stats = store.stats()
        assert stats.garbage_bytes == 0
        assert stats.live_bytes >= 3 * ARTIFACT


def test_keep_within_keeps_young_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key, commit_deadline=float(DEADLINE)) as store:
        commit_steps(store, "train", 4)
        configure(monkeypatch, url, key, keep_within_hours="1")
        assert invoke()["prune"]["records_pruned"] == 0
        monkeypatch.delenv("S3CKPT_KEEP_WITHIN_HOURS")
        monkeypatch.setenv("S3CKPT_KEEP_WITHIN_DAYS", "0.00001")  # 0.86 s: every checkpoint is older
        time.sleep(1)
        assert invoke()["prune"]["records_pruned"] == 3, "all but the latest"
        assert steps_of(store, "train") == [3]


def test_it_never_creates_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, str(tmp_path / "nothing-here"), s3ckpt.generate_key(), keep_last="1")
    with pytest.raises(s3ckpt.StoreNotFoundError):
        invoke()
    assert not (tmp_path / "nothing-here" / "config").exists()


def test_a_grace_within_the_commit_deadline_stops_it_before_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key) as store:  # the default deadline, 30 minutes: a grace of 1 s is refused
        commit_steps(store, "train", 3)
        configure(monkeypatch, url, key, keep_last="1", commit_deadline_seconds="5")
        with pytest.raises(s3ckpt.ConfigurationError, match="S3CKPT_GC_GRACE_SECONDS"):
            invoke()
        assert steps_of(store, "train") == [0, 1, 2], "nothing was pruned"



def test_a_grace_the_stores_deadline_refuses_stops_it_before_prune_whatever_the_job_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's own shorter deadline does not shorten the store's: gc would refuse a 20 s grace on a
    store with the default 30 minutes, so nothing is pruned either."""
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key) as store:
        commit_steps(store, "train", 3)
        configure(monkeypatch, url, key, keep_last="1", commit_deadline_seconds="5", gc_grace_seconds="20")
        with pytest.raises(s3ckpt.ConfigurationError, match="S3CKPT_GC_GRACE_SECONDS"):
            invoke()
        assert steps_of(store, "train") == [0, 1, 2], "nothing was pruned"

# -- the moto server, with a kms: key --------------------------------------------------------------------


def test_prune_then_gc_on_s3_with_a_kms_key(moto_s3: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the module deploys it: S3CKPT_KEY=kms:..., the endpoint and region from the environment."""
    kms = boto3.client("kms", region_name="us-east-1", endpoint_url=moto_s3.endpoint_url)
    alias = f"alias/s3ckpt-{uuid.uuid4().hex[:8]}"
    kms.create_alias(AliasName=alias, TargetKeyId=kms.create_key()["KeyMetadata"]["KeyId"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_s3.endpoint_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with s3ckpt.open_store(moto_s3.url, key=f"kms:{alias}", commit_deadline=float(DEADLINE)) as store:
        payloads = commit_steps(store, "train", 6)
        configure(monkeypatch, moto_s3.url, f"kms:{alias}", keep_last="2")
        check_pruned_then_collected(store, payloads, slack=1.5)


# -- moto with IAM enforced, under the policy rendered from terraform/maintenance.tf ----------------------


@iam_enforced
def test_the_maintenance_policy_is_enough_for_prune_and_gc_and_stays_in_its_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    aws = bootstrap()
    policy = maintenance_policy_from_tf(bucket=aws.bucket, prefix="alpha", kms_key_arn=aws.key_arn, region=REGION)
    job = _user(client("iam", aws.admin), "s3ckpt-maint-alpha", policy)
    with aws.open("beta", aws.workers["beta"], commit_deadline=float(DEADLINE)) as store:
        commit_steps(store, "other", 2)
    # The worker writes; the job prunes and collects.
    with aws.open("alpha", aws.workers["alpha"], commit_deadline=float(DEADLINE)) as store:
        payloads = commit_steps(store, "train", 6)
    # The handler uses the default credential chain, as in Lambda: the job's keys in the environment.
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_KMS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", job["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", job["aws_secret_access_key"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    configure(monkeypatch, aws.url("alpha"), aws.keys["alpha"], keep_last="2")
    with aws.open("alpha", job, create=False) as store, aws.open("alpha", aws.operator, create=False) as operator:
        check_pruned_then_collected(store, payloads, slack=1.5, verifier=operator)

    # Nothing outside its tenant, and no history: another tenant's store is refused, unchanged.
    configure(monkeypatch, aws.url("beta"), aws.keys["beta"], keep_last="1")
    with pytest.raises(s3ckpt.AccessDeniedError, match="AccessDenied"):
        invoke()
    s3 = aws.s3(job)
    _denied(lambda: s3.get_object(Bucket=aws.bucket, Key="beta/config"))
    _denied(lambda: s3.delete_object(Bucket=aws.bucket, Key="beta/config"))
    _denied(lambda: s3.list_object_versions(Bucket=aws.bucket, Prefix="alpha/"))
    with aws.open("beta", aws.workers["beta"], create=False) as store:
        assert steps_of(store, "other") == [0, 1]


# -- configuration ------------------------------------------------------------------------------------------

BASE = {"S3CKPT_URL": "s3://bucket/tenant", "S3CKPT_KEY": "kms:alias/s3ckpt"}


def test_configuration_from_the_environment() -> None:
    config = config_from_env(BASE)
    assert (config.url, config.key) == ("s3://bucket/tenant", "kms:alias/s3ckpt")
    assert (config.keep_last, config.keep_within, config.dry_run, config.commit_deadline) == (None, None, False, None)
    assert config.gc_grace == timedelta(hours=1)
    assert not config.prunes
    config = config_from_env(
        {**BASE, "S3CKPT_KEEP_LAST": "5", "S3CKPT_KEEP_WITHIN_DAYS": "1.5", "S3CKPT_GC_GRACE_SECONDS": "86400",
         "S3CKPT_DRY_RUN": "TRUE", "S3CKPT_COMMIT_DEADLINE_SECONDS": "600"}
    )  # fmt: skip
    assert (config.keep_last, config.keep_within, config.gc_grace) == (5, timedelta(days=1.5), timedelta(days=1))
    assert config.dry_run
    assert config.prunes
    assert config.commit_deadline == 600
    assert config_from_env({**BASE, "S3CKPT_KEEP_WITHIN_HOURS": "12"}).keep_within == timedelta(hours=12)
    assert config_from_env({**BASE, "S3CKPT_DRY_RUN": "1"}, {"dry_run": False}).dry_run is False
    assert config_from_env(BASE, {"dry_run": True}).dry_run is True
    assert config_from_env(BASE, {"detail-type": "Scheduled Event"}).dry_run is False
    assert config_from_env(BASE, None).dry_run is False


def test_the_configuration_never_shows_the_key() -> None:
    raw = s3ckpt.generate_key()
    config = config_from_env({**BASE, "S3CKPT_KEY": raw, "S3CKPT_URL": "sftp://me:hunter22@host/store"})
    assert raw not in repr(config)
    assert "hunter22" not in repr(config)


@pytest.mark.parametrize(
    ("environment", "event", "names"),
    [
        ({"S3CKPT_KEY": "kms:alias/x"}, None, "S3CKPT_URL"),
        ({"S3CKPT_URL": "s3://b/t", "S3CKPT_KEY": "  "}, None, "S3CKPT_KEY"),
        ({**BASE, "S3CKPT_KEEP_LAST": "0"}, None, "S3CKPT_KEEP_LAST"),
        ({**BASE, "S3CKPT_KEEP_LAST": "2.5"}, None, "S3CKPT_KEEP_LAST"),
        ({**BASE, "S3CKPT_KEEP_LAST": "five"}, None, "S3CKPT_KEEP_LAST"),
        ({**BASE, "S3CKPT_KEEP_WITHIN_DAYS": "0"}, None, "S3CKPT_KEEP_WITHIN_DAYS"),
        ({**BASE, "S3CKPT_KEEP_WITHIN_DAYS": "nan"}, None, "S3CKPT_KEEP_WITHIN_DAYS"),
        ({**BASE, "S3CKPT_KEEP_WITHIN_DAYS": "1e30"}, None, "S3CKPT_KEEP_WITHIN_DAYS"),
        ({**BASE, "S3CKPT_KEEP_WITHIN_HOURS": "-1"}, None, "S3CKPT_KEEP_WITHIN_HOURS"),
        ({**BASE, "S3CKPT_KEEP_WITHIN_DAYS": "1", "S3CKPT_KEEP_WITHIN_HOURS": "1"}, None, "not both"),
        ({**BASE, "S3CKPT_GC_GRACE_SECONDS": "-1"}, None, "S3CKPT_GC_GRACE_SECONDS"),
        ({**BASE, "S3CKPT_GC_GRACE_SECONDS": "1.5"}, None, "S3CKPT_GC_GRACE_SECONDS"),
        ({**BASE, "S3CKPT_COMMIT_DEADLINE_SECONDS": "0"}, None, "S3CKPT_COMMIT_DEADLINE_SECONDS"),
        ({**BASE, "S3CKPT_DRY_RUN": "maybe"}, None, "S3CKPT_DRY_RUN"),
        (BASE, {"dry_run": "perhaps"}, "dry_run"),
        (BASE, {"dry_run": 1}, "dry_run"),
    ],
)
def test_bad_configuration_says_what_to_set(environment: dict[str, str], event: object, names: str) -> None:
    with pytest.raises(s3ckpt.ConfigurationError, match=names):
        config_from_env(environment, event)


def test_the_handler_checks_its_configuration_before_opening_anything(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("S3CKPT_URL", str(tmp_path / "store"))
    with pytest.raises(s3ckpt.ConfigurationError, match="S3CKPT_KEY"):
        invoke()
    monkeypatch.setenv("S3CKPT_KEY", s3ckpt.generate_key())
    monkeypatch.setenv("S3CKPT_KEEP_LAST", "-3")
    with pytest.raises(s3ckpt.ConfigurationError, match="S3CKPT_KEEP_LAST"):
        invoke()
    assert not (tmp_path / "store").exists()
