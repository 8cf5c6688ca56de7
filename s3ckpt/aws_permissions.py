"""Every S3 and KMS action s3ckpt needs, by role: the one list that ``terraform/iam.tf`` must match.

``tests/test_terraform.py`` checks that the policies in ``terraform/iam.tf`` grant exactly these
actions, and ``tests/test_iam.py`` runs s3ckpt under those policies (moto, IAM enforced). When the
library starts calling another API, add the action here, then to ``iam.tf``; the tests say where.

Roles:

- **worker**: runs claim / commit / latest / resume in ONE tenant, a store prefix
  (``s3://bucket/<tenant prefix>``). It reads and writes objects under that prefix, lists it, and
  may create the store there (``open_store`` creates an absent store). It never deletes: commit
  records, packs and key files are create-if-absent, and the HEAD pointer is replaced in place
  (compare-and-swap). One library path does delete: the loser of a race to create the same store
  removes its orphan key file (``store._create``); as a worker it gets AccessDenied there
  (``tests/test_iam.py::test_two_workers_create_the_same_store_at_once``, an expected failure).
- **operator**: ``s3ckpt`` CLI, ``remove_key``, and the verify / gc / prune jobs, over every tenant
  of the bucket. The worker's actions, plus deletion, plus read access to object versions.
- **maintenance** (optional, one per tenant): the scheduled prune + gc job
  (``s3ckpt/aws_maintenance.py``, ``terraform/maintenance.tf``) in ONE tenant. The worker's S3
  actions plus ``s3:DeleteObject``, and of the key-wrapping pair only ``kms:Decrypt``: it opens an
  existing store (``create=False``) and never wraps a key. No versions: prune and gc read current
  objects only.

Which boto3 call needs which action (``s3ckpt/backends/_s3.py``, ``s3ckpt/keyring.py``):

- ``get_object`` (whole, or a ``Range``) and ``head_object``: ``s3:GetObject`` (S3 authorizes HEAD as GET).
- ``put_object``, plain, with ``IfNoneMatch="*"`` or with ``IfMatch=<etag>``: ``s3:PutObject``
  (conditional headers need no other permission).
- ``list_objects_v2`` (paginated; with ``Delimiter`` to list runs): ``s3:ListBucket`` on the bucket,
  narrowed for a worker by the ``s3:prefix`` condition key.
- ``delete_object``: ``s3:DeleteObject`` (operator and maintenance only).
- ``list_object_versions`` (verify's delete markers): ``s3:ListBucketVersions`` (operator only).
- KMS ``Encrypt`` of a ``kms:`` key (store creation, ``s3ckpt key add``): ``kms:Encrypt``.
- KMS ``Decrypt`` of a ``kms:`` key (every ``open_store``): ``kms:Decrypt``.

SSE-KMS on the bucket (``terraform/main.tf``) adds two KMS actions that s3ckpt never calls itself:
S3 calls KMS *with the caller's permissions*. A PutObject needs ``kms:GenerateDataKey`` (S3 asks
KMS for the data key; with an S3 Bucket Key, for the bucket-level key that S3 then caches, so far
fewer KMS requests but the same permission), and a GetObject, ranged or not, needs ``kms:Decrypt``
of that data key (a HeadObject needs no KMS permission). ``kms:Encrypt`` is not needed for SSE-KMS. The
Terraform policies grant these two only through S3 (``kms:ViaService``) and only for this bucket
(``kms:EncryptionContext:aws:s3:arn``), and the key-wrapping pair only for requests whose
encryption context is s3ckpt's own (``s3ckpt:store`` / ``s3ckpt:key``), so a worker cannot use
the key to decrypt arbitrary ciphertext.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "ACTION_REASONS",
    "KMS_KEY_WRAP_ACTIONS",
    "KMS_SSE_ACTIONS",
    "MAINTENANCE_ACTIONS",
    "MAINTENANCE_KMS_ACTIONS",
    "MAINTENANCE_KMS_UNWRAP_ACTIONS",
    "MAINTENANCE_S3_BUCKET_ACTIONS",
    "MAINTENANCE_S3_OBJECT_ACTIONS",
    "OPERATOR_ACTIONS",
    "OPERATOR_KMS_ACTIONS",
    "OPERATOR_S3_BUCKET_ACTIONS",
    "OPERATOR_S3_OBJECT_ACTIONS",
    "S3CKPT_ENCRYPTION_CONTEXT_KEYS",
    "WORKER_ACTIONS",
    "WORKER_KMS_ACTIONS",
    "WORKER_S3_BUCKET_ACTIONS",
    "WORKER_S3_OBJECT_ACTIONS",
    "maintenance_policy",
    "operator_policy",
    "worker_policy",
]

#: Why each action is granted. Every action of every set below has an entry (a test checks it).
ACTION_REASONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "s3:GetObject": (
            "get_object of config, keys/*, packs/* (whole and Range), legacy blobs/*, runs/*/log/*, runs/*/HEAD; "
            "head_object is authorized as GetObject"
        ),
        "s3:PutObject": (
            "put_object of packs, commit records, key files and config (If-None-Match: *) and of the HEAD "
            "pointer (If-Match: etag); conditional headers need no extra permission"
        ),
        "s3:ListBucket": (
            "list_objects_v2 of keys/ (opening a store), runs/ with a delimiter (run listing, the 'store holds "
            "runs' check) and runs/<run>/log/ (finding the tail of a log); the worker only under its prefix"
        ),
        "s3:DeleteObject": (
            "Store.remove_key, the orphan key file of a lost store-creation race, gc and prune (operator and "
            "the scheduled maintenance role only; on a versioned bucket this writes a delete marker, history "
            "stays until lifecycle)"
        ),
        "s3:GetObjectVersion": (
            "verify: read an earlier version of an object that was overwritten or deleted, to show what "
            "changed and to restore it (not called by s3ckpt yet)"
        ),
        "s3:ListBucketVersions": (
            "verify: list_object_versions of runs/ to find delete markers (a deleted log record is reported as "
            "truncation); operator only, gc and prune do not call it"
        ),
        "kms:Encrypt": "wrap the store's master key under a kms: key (store creation, `s3ckpt key add`)",
        "kms:Decrypt": (
            "unwrap the master key with a kms: key (every open_store); and, through S3, decrypt the SSE-KMS "
            "data key of every GetObject"
        ),
        "kms:GenerateDataKey": "through S3 only: the SSE-KMS data key (or S3 Bucket Key) of every PutObject",
    }
)

#: Object-level actions of a worker, on ``arn:aws:s3:::<bucket>/<tenant prefix>/*`` only.
WORKER_S3_OBJECT_ACTIONS: Final[frozenset[str]] = frozenset({"s3:GetObject", "s3:PutObject"})

#: Bucket-level actions of a worker, on the bucket ARN with ``s3:prefix`` like ``<tenant prefix>/*``.
WORKER_S3_BUCKET_ACTIONS: Final[frozenset[str]] = frozenset({"s3:ListBucket"})

#: KMS actions that S3 performs with the caller's permissions for an SSE-KMS bucket
#: (condition ``kms:ViaService`` = S3, encryption context ``aws:s3:arn`` = this bucket).
KMS_SSE_ACTIONS: Final[frozenset[str]] = frozenset({"kms:GenerateDataKey", "kms:Decrypt"})

#: KMS actions s3ckpt calls itself for a ``kms:`` key, with the encryption context keys below.
KMS_KEY_WRAP_ACTIONS: Final[frozenset[str]] = frozenset({"kms:Encrypt", "kms:Decrypt"})

#: The encryption context keys of s3ckpt's own KMS calls (``s3ckpt/keyring.py``).
S3CKPT_ENCRYPTION_CONTEXT_KEYS: Final[tuple[str, ...]] = ("s3ckpt:key", "s3ckpt:store")

#: Every KMS action of a worker, on the store's key only.
WORKER_KMS_ACTIONS: Final[frozenset[str]] = KMS_SSE_ACTIONS | KMS_KEY_WRAP_ACTIONS

#: Everything a worker may do. No ``s3:Delete*``: workers never delete.
WORKER_ACTIONS: Final[frozenset[str]] = WORKER_S3_OBJECT_ACTIONS | WORKER_S3_BUCKET_ACTIONS | WORKER_KMS_ACTIONS

#: Object-level actions of the operator, on every object of the bucket. Not ``s3:DeleteObjectVersion``:
#: removing history for good is left to the bucket's lifecycle rules, so even an operator's mistake
#: (or stolen operator credentials) stays recoverable for the noncurrent-version retention period.
OPERATOR_S3_OBJECT_ACTIONS: Final[frozenset[str]] = WORKER_S3_OBJECT_ACTIONS | {"s3:DeleteObject", "s3:GetObjectVersion"}

#: Bucket-level actions of the operator, on the whole bucket (no prefix condition).
OPERATOR_S3_BUCKET_ACTIONS: Final[frozenset[str]] = WORKER_S3_BUCKET_ACTIONS | {"s3:ListBucketVersions"}

#: The operator's KMS actions: the worker's (it reads, writes and adds keys to every store).
OPERATOR_KMS_ACTIONS: Final[frozenset[str]] = WORKER_KMS_ACTIONS

#: Everything the operator may do.
OPERATOR_ACTIONS: Final[frozenset[str]] = OPERATOR_S3_OBJECT_ACTIONS | OPERATOR_S3_BUCKET_ACTIONS | OPERATOR_KMS_ACTIONS

#: Object-level actions of the scheduled maintenance job, on ``<tenant prefix>/*`` only: prune and
#: gc read records and packs, write tombstones and repacked packs, and delete dead packs.
MAINTENANCE_S3_OBJECT_ACTIONS: Final[frozenset[str]] = WORKER_S3_OBJECT_ACTIONS | {"s3:DeleteObject"}

#: Bucket-level actions of the maintenance job: the worker's prefix-narrowed listing.
MAINTENANCE_S3_BUCKET_ACTIONS: Final[frozenset[str]] = WORKER_S3_BUCKET_ACTIONS

#: s3ckpt's own KMS calls of the maintenance job: it only unwraps the store's key (open_store with
#: create=False), so no ``kms:Encrypt``.
MAINTENANCE_KMS_UNWRAP_ACTIONS: Final[frozenset[str]] = frozenset({"kms:Decrypt"})

#: Every KMS action of the maintenance job: SSE-KMS through S3, and unwrapping.
MAINTENANCE_KMS_ACTIONS: Final[frozenset[str]] = KMS_SSE_ACTIONS | MAINTENANCE_KMS_UNWRAP_ACTIONS

#: Everything the maintenance job may do (its logs are Lambda's, granted apart in terraform/).
MAINTENANCE_ACTIONS: Final[frozenset[str]] = (
    MAINTENANCE_S3_OBJECT_ACTIONS | MAINTENANCE_S3_BUCKET_ACTIONS | MAINTENANCE_KMS_ACTIONS
)


def _statement(
    sid: str, actions: frozenset[str], resources: list[str], condition: dict[str, Any] | None = None
) -> dict[str, Any]:
    statement: dict[str, Any] = {"Sid": sid, "Effect": "Allow", "Action": sorted(actions), "Resource": resources}
    if condition:
        statement["Condition"] = condition
    return statement


def _kms_statements(
    bucket_arn: str,
    object_arns: str,
    kms_key_arn: str,
    region: str,
    *,
    wrap: tuple[str, frozenset[str]] = ("WrapStoreKeys", KMS_KEY_WRAP_ACTIONS),
) -> list[dict[str, Any]]:
    wrap_sid, wrap_actions = wrap
    return [
        _statement(
            "SseKmsThroughS3",
            KMS_SSE_ACTIONS,
            [kms_key_arn],
            {
                "StringEquals": {"kms:ViaService": [f"s3.{region}.amazonaws.com"]},
                "StringLike": {"kms:EncryptionContext:aws:s3:arn": [bucket_arn, object_arns]},
            },
        ),
        _statement(
            wrap_sid,
            wrap_actions,
            [kms_key_arn],
            {
                "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": list(S3CKPT_ENCRYPTION_CONTEXT_KEYS)},
                "Null": {"kms:EncryptionContextKeys": ["false"]},
            },
        ),
    ]


def _check_prefix(prefix: str) -> str:
    clean = prefix.strip("/")
    if not clean or "*" in clean or "?" in clean:
        raise ValueError(f"a tenant prefix is a non-empty path without wildcards, not {prefix!r}")
    return clean


def worker_policy(bucket: str, prefix: str, kms_key_arn: str, *, region: str, partition: str = "aws") -> dict[str, Any]:
    """The worker's identity policy for the tenant at ``s3://<bucket>/<prefix>``, as
    ``terraform/iam.tf`` renders it (``data.aws_iam_policy_document.worker``)."""
    prefix = _check_prefix(prefix)
    bucket_arn = f"arn:{partition}:s3:::{bucket}"
    objects = f"{bucket_arn}/{prefix}/*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            _statement("ListOwnPrefix", WORKER_S3_BUCKET_ACTIONS, [bucket_arn], {"StringLike": {"s3:prefix": [f"{prefix}/*"]}}),
            _statement("ReadWriteOwnPrefix", WORKER_S3_OBJECT_ACTIONS, [objects]),
            *_kms_statements(bucket_arn, objects, kms_key_arn, region),
        ],
    }


def operator_policy(bucket: str, kms_key_arn: str, *, region: str, partition: str = "aws") -> dict[str, Any]:
    """The operator's identity policy for every tenant of ``bucket``, as ``terraform/iam.tf``
    renders it (``data.aws_iam_policy_document.operator``)."""
    bucket_arn = f"arn:{partition}:s3:::{bucket}"
    objects = f"{bucket_arn}/*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            _statement("ListEverything", OPERATOR_S3_BUCKET_ACTIONS, [bucket_arn]),
            _statement("ReadWriteDeleteEverything", OPERATOR_S3_OBJECT_ACTIONS, [objects]),
            *_kms_statements(bucket_arn, objects, kms_key_arn, region),
        ],
    }


def maintenance_policy(bucket: str, prefix: str, kms_key_arn: str, *, region: str, partition: str = "aws") -> dict[str, Any]:
    """The scheduled maintenance job's identity policy for the tenant at ``s3://<bucket>/<prefix>``,
    as ``terraform/maintenance.tf`` renders it (``data.aws_iam_policy_document.maintenance``)."""
    prefix = _check_prefix(prefix)
    bucket_arn = f"arn:{partition}:s3:::{bucket}"
    objects = f"{bucket_arn}/{prefix}/*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            _statement(
                "ListOwnPrefix", MAINTENANCE_S3_BUCKET_ACTIONS, [bucket_arn], {"StringLike": {"s3:prefix": [f"{prefix}/*"]}}
            ),
            _statement("ReadWriteDeleteOwnPrefix", MAINTENANCE_S3_OBJECT_ACTIONS, [objects]),
            *_kms_statements(
                bucket_arn, objects, kms_key_arn, region, wrap=("UnwrapStoreKeys", MAINTENANCE_KMS_UNWRAP_ACTIONS)
            ),
        ],
    }
