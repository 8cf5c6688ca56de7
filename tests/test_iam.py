"""s3ckpt under the module's IAM policies, with moto enforcing IAM.

The worker and operator policies are rendered from terraform/iam.tf (tests/test_terraform.py:
render_policy, no terraform binary) and attached to one IAM user per role, because moto enforces
IAM for the credentials of IAM users. ``set_initial_no_auth_action_count(3)`` lets exactly the three
requests that create an administrator through unauthenticated; every later request is signed with
real (moto) credentials and checked against the caller's policies.

What moto checks: the action and the resource ARN of every S3 request against identity policies.
What it does not (terraform/README.md has the list): condition keys (a condition is treated as met,
so ``s3:prefix`` does not narrow a ListBucket), resource policies (bucket policy, key policy), and
KMS resources (it authorizes KMS calls against "*", so a key-scoped Allow never matches). Hence the
stores here use raw keys, and the one kms: case checks how a refused KMS call surfaces.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import boto3
import botocore.exceptions
import pytest
from moto import mock_aws
from moto.core import set_initial_no_auth_action_count

import s3ckpt
from s3ckpt.backends import S3Backend
from s3ckpt.errors import AccessDeniedError, BackendError, ObjectNotFoundError

from .test_terraform import operator_policy_from_tf, worker_policy_from_tf

REGION = "us-east-1"
TENANTS = ("alpha", "beta")
#: create_user, put_user_policy and create_access_key of the administrator.
BOOTSTRAP_REQUESTS = 3
ADMIN_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}

F = TypeVar("F", bound=Callable[..., Any])


def iam_enforced(test: F) -> F:
    """Run ``test`` in moto with IAM enforced after the bootstrap requests."""
    return cast(F, mock_aws(set_initial_no_auth_action_count(BOOTSTRAP_REQUESTS)(test)))


Credentials = dict[str, str]


def client(service: str, credentials: Credentials | None = None) -> Any:
    keys = credentials or {}
    return boto3.client(
        service,  # type: ignore[call-overload]
        region_name=REGION,
        aws_access_key_id=keys.get("aws_access_key_id"),
        aws_secret_access_key=keys.get("aws_secret_access_key"),
    )


def latest(store: s3ckpt.Store, run_id: str) -> s3ckpt.Checkpoint:
    checkpoint = store.run(run_id).latest()
    assert checkpoint is not None, f"run {run_id!r} has no checkpoint"
    return checkpoint


@dataclass
class Aws:
    """A bucket configured as terraform/main.tf configures it, and one IAM user per role."""

    bucket: str
    key_arn: str
    admin: Credentials
    operator: Credentials
    workers: dict[str, Credentials] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)

    def s3(self, credentials: Credentials) -> Any:
        return client("s3", credentials)

    def url(self, tenant: str) -> str:
        return f"s3://{self.bucket}/{tenant}"

    def open(self, tenant: str, credentials: Credentials, **kwargs: Any) -> s3ckpt.Store:
        kwargs.setdefault("key", self.keys[tenant])
        return s3ckpt.open_store(self.url(tenant), region=REGION, credentials=credentials, **kwargs)


def _user(iam: Any, name: str, policy: Mapping[str, Any]) -> Credentials:
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="s3ckpt", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {"aws_access_key_id": key["AccessKeyId"], "aws_secret_access_key": key["SecretAccessKey"]}


def bootstrap() -> Aws:
    # The only unauthenticated requests (BOOTSTRAP_REQUESTS): an administrator.
    admin = _user(client("iam"), "admin", ADMIN_POLICY)
    iam = client("iam", admin)
    key_arn = client("kms", admin).create_key(Description="s3ckpt")["KeyMetadata"]["Arn"]
    bucket = f"s3ckpt-{uuid.uuid4().hex[:12]}"
    s3 = client("s3", admin)
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [
                {
                    "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key_arn},
                    "BucketKeyEnabled": True,
                }
            ]
        },
    )
    s3.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True,
        },
    )  # fmt: skip
    s3.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    aws = Aws(
        bucket=bucket,
        key_arn=key_arn,
        admin=admin,
        operator=_user(iam, "s3ckpt-operator", operator_policy_from_tf(bucket=bucket, kms_key_arn=key_arn, region=REGION)),
    )
    for tenant in TENANTS:
        policy = worker_policy_from_tf(bucket=bucket, prefix=tenant, kms_key_arn=key_arn, region=REGION)
        aws.workers[tenant] = _user(iam, f"s3ckpt-worker-{tenant}", policy)
        aws.keys[tenant] = s3ckpt.generate_key()
    return aws


def _denied(call: Callable[[], Any]) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as info:
        call()
    error = info.value.response.get("Error", {})
    assert error.get("Code") in ("AccessDenied", "403"), error  # HEAD answers have no body: code "403"


# -- IAM is enforced at all ---------------------------------------------------------------------------


@iam_enforced
def test_iam_is_enforced() -> None:
    aws = bootstrap()
    stranger = {"aws_access_key_id": "AKIAIOSFODNN7EXAMPLE", "aws_secret_access_key": "x" * 40}
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidAccessKeyId"):
        aws.s3(stranger).list_objects_v2(Bucket=aws.bucket, Prefix="alpha/")
    worker = aws.s3(aws.workers["alpha"])
    _denied(lambda: worker.create_bucket(Bucket="another-bucket"))
    _denied(lambda: worker.get_bucket_policy(Bucket=aws.bucket))
    _denied(lambda: worker.list_object_versions(Bucket=aws.bucket, Prefix="alpha/"))
    with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
        client("iam", aws.workers["alpha"]).list_users()


# -- the worker: everything s3ckpt does in its own prefix ---------------------------------------------


@iam_enforced
def test_worker_claims_commits_resumes_and_reads_artifacts(tmp_path: Path) -> None:
    aws = bootstrap()
    creds = aws.workers["alpha"]
    weights = tmp_path / "weights.bin"
    weights.write_bytes(os.urandom(1 << 20))

    # A worker creates its tenant's store (open_store creates an absent one: keys/, then config).
    with aws.open("alpha", creds) as store:
        writer = store.run("train/1").claim(host="a")
        writer.commit({"step": 1}, artifacts={"weights": weights})
        writer.commit({"step": 2})  # HEAD moves by If-Match; the artifact carries forward
        assert list(store.runs()) == ["train/1"]
    # s3ckpt only logs a HEAD it could not move (HEAD is a hint), so check it moved: created with
    # If-None-Match at the claim, then replaced with If-Match at each commit.
    versions = aws.s3(aws.operator).list_object_versions(Bucket=aws.bucket, Prefix="alpha/runs/")["Versions"]
    assert len([v for v in versions if v["Key"].endswith("/HEAD")]) >= 2

    # Another host resumes: open, latest, read the artifact, claim and commit again.
    with aws.open("alpha", creds, create=False) as store:
        last = latest(store, "train/1")
        assert last.state == {"step": 2}
        assert last.read_artifact("weights") == weights.read_bytes()
        restored = tmp_path / "restored.bin"
        last.restore_artifact("weights", restored)
        assert restored.read_bytes() == weights.read_bytes()
        writer = store.run("train/1").claim(host="b")
        writer.commit({"step": 3})
        assert latest(store, "train/1").state == {"step": 3}
        assert [c.state for c in store.run("train/1").history()] == [{"step": 1}, {"step": 2}, {"step": 3}]

    # Sessions: a step runs once; a resumed session returns the recorded result.
    calls: list[int] = []

    def fetch() -> dict[str, int]:
        calls.append(1)
        return {"docs": 3}

    with aws.open("alpha", creds) as store:
        with store.resume("agent/7", workflow="refund", workflow_version="1") as session:
            assert session.step("fetch", fetch) == {"docs": 3}
            ref = session.emit("email", target="t@example.com", payload={"n": 1}, send=lambda key: f"sent-{key}")
        with store.resume("agent/7", workflow="refund", workflow_version="1") as session:
            assert session.step("fetch", fetch) == {"docs": 3}
            assert session.emit("email", target="t@example.com", payload={"n": 1}, send=lambda key: "again") == ref
    assert calls == [1]

    # Every object it wrote is in its own prefix, SSE-KMS encrypted as the bucket says.
    listed = aws.s3(aws.operator).list_objects_v2(Bucket=aws.bucket)["Contents"]
    assert listed
    assert all(o["Key"].startswith("alpha/") for o in listed)
    head = aws.s3(creds).head_object(Bucket=aws.bucket, Key="alpha/config")
    assert head["ServerSideEncryption"] == "aws:kms"


# -- the worker: what it may not do -------------------------------------------------------------------


@iam_enforced
def test_worker_cannot_delete(tmp_path: Path) -> None:
    aws = bootstrap()
    creds = aws.workers["alpha"]
    with aws.open("alpha", creds) as store:
        store.run("r").claim().commit({"x": 1})
        second = store.add_key(s3ckpt.generate_key(), label="second")  # create-if-absent: allowed
        keys = [o["Key"] for o in aws.s3(creds).list_objects_v2(Bucket=aws.bucket, Prefix="alpha/")["Contents"]]
        s3 = aws.s3(creds)
        for key in keys:
            _denied(partial(s3.delete_object, Bucket=aws.bucket, Key=key))
        # DeleteObjects answers 200 and refuses each key on its own, as S3 does.
        batch = s3.delete_objects(Bucket=aws.bucket, Delete={"Objects": [{"Key": k} for k in keys]})
        assert not batch.get("Deleted")
        assert sorted(e["Key"] for e in batch["Errors"]) == sorted(keys)
        assert {e["Code"] for e in batch["Errors"]} == {"AccessDenied"}
        # Through s3ckpt: removing a key is an operator's action, and the denial is a BackendError.
        with pytest.raises(AccessDeniedError, match="AccessDenied"):
            store.remove_key(second)
        assert len(store.key_files()) == 2
    after = [o["Key"] for o in aws.s3(aws.admin).list_objects_v2(Bucket=aws.bucket, Prefix="alpha/")["Contents"]]
    assert after == keys, "nothing was deleted"


@iam_enforced
def test_worker_cannot_read_or_write_another_tenant(tmp_path: Path) -> None:
    aws = bootstrap()
    with aws.open("beta", aws.workers["beta"]) as store:
        store.run("secret").claim().commit({"beta": True})
    alpha = aws.workers["alpha"]
    s3 = aws.s3(alpha)

    # boto3: no read, no write, no overwrite, in beta's prefix; nor next to its own prefix.
    for key in ("beta/config", "beta/runs/secret/HEAD", "beta/runs/secret/log/00000000000000000001"):
        _denied(partial(s3.get_object, Bucket=aws.bucket, Key=key))
        _denied(partial(s3.head_object, Bucket=aws.bucket, Key=key))
        _denied(partial(s3.put_object, Bucket=aws.bucket, Key=key, Body=b"x"))
    for key in ("beta/new", "alphabet/x", "alpha", "config", "runs/x/log/1"):
        _denied(partial(s3.put_object, Bucket=aws.bucket, Key=key, Body=b"x"))

    # s3ckpt: opening beta's store with beta's key, as alpha, fails on the first read with a
    # BackendError naming AccessDenied; it is not mistaken for an absent store (which would create one).
    with pytest.raises(AccessDeniedError, match="AccessDenied") as info:
        aws.open("beta", alpha)
    assert not isinstance(info.value, ObjectNotFoundError)
    with pytest.raises(AccessDeniedError, match="AccessDenied"):
        aws.open("beta", alpha, key=s3ckpt.generate_key())
    backend = S3Backend(aws.bucket, "beta", region=REGION, credentials=alpha)
    try:
        with pytest.raises(AccessDeniedError, match="AccessDenied"):
            backend.put("runs/secret/log/00000000000000000002", b"forged", mode="create")
        with pytest.raises(AccessDeniedError, match="AccessDenied"):
            backend.get("config")
        with pytest.raises(BackendError):
            backend.head("config")
    finally:
        backend.close()

    # beta's store is untouched.
    with aws.open("beta", aws.workers["beta"], create=False) as store:
        assert latest(store, "secret").state == {"beta": True}


@iam_enforced
def test_two_workers_create_the_same_store_at_once() -> None:
    aws = bootstrap()
    creds = aws.workers["alpha"]

    class RacingBackend(S3Backend):
        """The other worker creates the store between this one's key file and its config."""

        raced = False

        def put(self, key: str, data: Any, **kwargs: Any) -> Any:
            if key == "config" and not self.raced:
                self.raced = True
                aws.open("alpha", creds).close()
            return super().put(key, data, **kwargs)

    backend = RacingBackend(aws.bucket, "alpha", region=REGION, credentials=creds)
    with s3ckpt.open_store(key=aws.keys["alpha"], backend=backend) as store:  # the winner's store
        assert store.run("r").claim().commit({"ok": True}).seq == 1


@iam_enforced
def test_kms_calls_use_the_stores_credentials_and_a_refusal_says_so() -> None:
    """A store whose key is ``kms:<the module's key>``. KMS is called with the credentials given to
    open_store (like S3), not the default chain. Under moto the worker's KMS calls are all refused,
    because moto matches KMS requests against resource "*" and the policy names the key; so this
    checks that the refusal names the IAM possibility, not only "wrong key"."""
    aws = bootstrap()
    key = f"kms:{aws.key_arn}"
    aws.open("alpha", aws.admin, key=key).close()  # Encrypt, as the admin
    with pytest.raises(s3ckpt.DecryptionError, match="may not use the key"):
        aws.open("alpha", aws.workers["alpha"], key=key, create=False)
    with aws.open("alpha", aws.admin, key=key, create=False) as store:  # the key file is fine
        assert store.config.store_id


# -- the operator: list and delete everything verify, gc and prune need --------------------------------


@iam_enforced
def test_operator_lists_reads_and_deletes_in_every_tenant() -> None:
    aws = bootstrap()
    for tenant in TENANTS:
        with aws.open(tenant, aws.workers[tenant]) as store:
            writer = store.run("job").claim()
            writer.commit({"tenant": tenant})
            writer.commit({"tenant": tenant, "again": True})
    s3 = aws.s3(aws.operator)

    # The whole bucket, without a prefix, paginated as gc lists it; and every version.
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=aws.bucket, PaginationConfig={"PageSize": 5})
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    assert {k.split("/")[0] for k in keys} == set(TENANTS)
    dirs = s3.list_objects_v2(Bucket=aws.bucket, Delimiter="/")["CommonPrefixes"]
    assert sorted(p["Prefix"] for p in dirs) == ["alpha/", "beta/"]
    versions = s3.list_object_versions(Bucket=aws.bucket)["Versions"]
    head = "beta/runs/job/HEAD"
    head_versions = [v["VersionId"] for v in versions if v["Key"] == head]
    assert len(head_versions) >= 2, "HEAD is replaced on every commit; the old versions stay"
    old = s3.get_object(Bucket=aws.bucket, Key=head, VersionId=head_versions[-1])
    assert old["Body"].read()

    # s3ckpt as operator, in any tenant: read runs, add and remove keys (a DELETE).
    for tenant in TENANTS:
        with aws.open(tenant, aws.operator, create=False) as store:
            assert latest(store, "job").state == {"tenant": tenant, "again": True}
            added = store.add_key(s3ckpt.generate_key())
            store.remove_key(added)
            assert len(store.key_files()) == 1

    # Delete in every tenant (prune); on the versioned bucket that is a delete marker.
    for tenant in TENANTS:
        s3.delete_object(Bucket=aws.bucket, Key=f"{tenant}/runs/job/HEAD")
        with pytest.raises(botocore.exceptions.ClientError):
            s3.head_object(Bucket=aws.bucket, Key=f"{tenant}/runs/job/HEAD")
    markers = s3.list_object_versions(Bucket=aws.bucket).get("DeleteMarkers", [])
    assert {m["Key"] for m in markers} >= {"alpha/runs/job/HEAD", "beta/runs/job/HEAD"}
    # Removing history for good is left to the lifecycle rules.
    _denied(lambda: s3.delete_object(Bucket=aws.bucket, Key=head, VersionId=head_versions[-1]))
    # A run without its HEAD is still readable (HEAD is a hint).
    with aws.open("alpha", aws.workers["alpha"], create=False) as store:
        assert latest(store, "job").state == {"tenant": "alpha", "again": True}
