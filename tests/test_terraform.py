"""terraform/ without a terraform binary: every .tf file parses (python-hcl2), the roles' policies
grant exactly the actions in s3ckpt/aws_permissions.py, and the bucket has the settings issue 7
asks for. ``render_policy`` turns a parsed ``aws_iam_policy_document`` into the JSON document that
Terraform would produce, for tests/test_iam.py to load into moto's IAM.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import hcl2
import pytest
from hcl2.utils import SerializationOptions

import s3ckpt
from s3ckpt import aws_permissions as perms
from s3ckpt.backends import MemoryBackend, PutMode, PutResult

TERRAFORM = Path(__file__).resolve().parent.parent / "terraform"
MODULE_FILES = ("versions.tf", "variables.tf", "main.tf", "kms.tf", "iam.tf", "maintenance.tf", "outputs.tf")
EXAMPLES = ("ecs-worker", "lambda-worker")
TF_FILES = sorted(TERRAFORM.rglob("*.tf"))

_OPTIONS = SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
_INTERPOLATION = re.compile(r"\$\{([^{}]+)\}")


# -- parsing and rendering (shared with tests/test_iam.py) -----------------------------------------


def load_tf(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as f:
        parsed: dict[str, Any] = hcl2.load(f, serialization_options=_OPTIONS)
    return parsed


@cache
def module() -> dict[str, list[dict[str, Any]]]:
    """Every top-level block of the module's own files (not the examples), merged by block type."""
    merged: dict[str, list[dict[str, Any]]] = {}
    for name in MODULE_FILES:
        for block_type, blocks in load_tf(TERRAFORM / name).items():
            merged.setdefault(block_type, []).extend(blocks)
    return merged


def _labelled(block_type: str, kind: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for block in module().get(block_type, []):
        for name, body in block.get(kind, {}).items():
            assert name not in found, f"{block_type} {kind}.{name} is defined twice"
            found[name] = body
    return found


def resource(kind: str, name: str = "this") -> dict[str, Any]:
    resources = _labelled("resource", kind)
    assert name in resources, f"terraform/ has no resource {kind}.{name}"
    return resources[name]


def policy_document(name: str) -> dict[str, Any]:
    documents = _labelled("data", "aws_iam_policy_document")
    assert name in documents, f"terraform/ has no data.aws_iam_policy_document.{name}"
    return documents[name]


def locals_() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for block in module().get("locals", []):
        merged.update(block)
    return merged


def substitute(value: str, refs: Mapping[str, str]) -> str:
    """Replace every ``${ref}`` with ``refs[ref]``; a ``local.x`` that is a plain string template
    is resolved from the module's locals. Anything else is an error: the test must say what it means."""

    def one(match: re.Match[str]) -> str:
        ref = match.group(1).strip()
        if ref in refs:
            return refs[ref]
        if ref.startswith("local."):
            template = locals_().get(ref[len("local.") :])
            if isinstance(template, str) and "for " not in template:
                return substitute(template, refs)
        raise KeyError(f"no value for ${{{ref}}}; pass it in refs")

    return _INTERPOLATION.sub(one, value)


def _strings(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def render_policy(document: Mapping[str, Any], refs: Mapping[str, str]) -> dict[str, Any]:
    """The JSON policy that ``data.aws_iam_policy_document`` renders (statement, condition blocks;
    no dynamic statements), with references replaced from ``refs``. Lists are sorted, as a test
    compares sets."""
    assert "dynamic" not in document, "render_policy does not evaluate dynamic statements"
    statements = []
    for block in document["statement"]:
        statement: dict[str, Any] = {
            "Sid": block.get("sid", ""),
            "Effect": block.get("effect", "Allow"),
            "Action": sorted(_strings(block["actions"])),
            "Resource": sorted(substitute(r, refs) for r in _strings(block["resources"])),
        }
        conditions: dict[str, dict[str, list[str]]] = {}
        for condition in block.get("condition", []):
            values = sorted(substitute(v, refs) for v in _strings(condition["values"]))
            conditions.setdefault(condition["test"], {})[condition["variable"]] = values
        if conditions:
            statement["Condition"] = conditions
        statements.append(statement)
    return {"Version": "2012-10-17", "Statement": statements}


def normalize(policy: Mapping[str, Any]) -> dict[str, Any]:
    """A policy with every list sorted, statements by Sid: two equal documents compare equal."""

    def statement(s: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(s)
        out["Action"] = sorted(_strings(s["Action"]))
        out["Resource"] = sorted(_strings(s["Resource"]))
        if "Condition" in s:
            out["Condition"] = {
                test: {var: sorted(_strings(vals)) for var, vals in by_var.items()} for test, by_var in s["Condition"].items()
            }
        return out

    return {
        "Version": policy["Version"],
        "Statement": sorted((statement(s) for s in policy["Statement"]), key=lambda s: s["Sid"]),
    }


def module_refs(*, bucket: str, kms_key_arn: str, region: str = "us-east-1", prefix: str | None = None) -> dict[str, str]:
    """What Terraform would substitute in the module's policies, for one bucket, key and tenant."""
    refs = {
        "aws_s3_bucket.this.arn": f"arn:aws:s3:::{bucket}",
        "aws_kms_key.this.arn": kms_key_arn,
        "data.aws_region.current.region": region,
    }
    if prefix is not None:
        refs["each.value.prefix"] = prefix
    return refs


def worker_policy_from_tf(*, bucket: str, prefix: str, kms_key_arn: str, region: str = "us-east-1") -> dict[str, Any]:
    refs = module_refs(bucket=bucket, kms_key_arn=kms_key_arn, region=region, prefix=prefix)
    return render_policy(policy_document("worker"), refs)


def operator_policy_from_tf(*, bucket: str, kms_key_arn: str, region: str = "us-east-1") -> dict[str, Any]:
    return render_policy(policy_document("operator"), module_refs(bucket=bucket, kms_key_arn=kms_key_arn, region=region))


def maintenance_policy_from_tf(*, bucket: str, prefix: str, kms_key_arn: str, region: str = "us-east-1") -> dict[str, Any]:
    refs = module_refs(bucket=bucket, kms_key_arn=kms_key_arn, region=region, prefix=prefix)
    return render_policy(policy_document("maintenance"), refs)


def actions(policy: Mapping[str, Any], *, prefix: str = "") -> set[str]:
    return {a for s in policy["Statement"] if s["Effect"] == "Allow" for a in s["Action"] if a.startswith(prefix)}


KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"


# -- every file parses -------------------------------------------------------------------------------


def test_the_module_and_both_examples_are_there() -> None:
    for name in (*MODULE_FILES, "README.md"):
        assert (TERRAFORM / name).is_file(), f"terraform/{name} is missing"
    for example in EXAMPLES:
        assert (TERRAFORM / "examples" / example / "main.tf").is_file()
    assert len(TF_FILES) >= len(MODULE_FILES) + len(EXAMPLES)


@pytest.mark.parametrize("path", TF_FILES, ids=[str(p.relative_to(TERRAFORM)) for p in TF_FILES])
def test_every_tf_file_parses(path: Path) -> None:
    parsed = load_tf(path)
    assert parsed, f"{path} parsed to nothing"


@pytest.mark.parametrize("example", EXAMPLES)
def test_examples_use_the_module(example: str) -> None:
    parsed = load_tf(TERRAFORM / "examples" / example / "main.tf")
    modules = [body for block in parsed["module"] for body in block.values()]
    assert [m["source"] for m in modules] == ["../.."]
    tenants = modules[0]["tenants"]
    services = {s for t in tenants.values() for s in t["trusted_services"]}
    assert services == {"ecs-worker": {"ecs-tasks.amazonaws.com"}, "lambda-worker": {"lambda.amazonaws.com"}}[example]


# -- the policies grant exactly the library's actions ------------------------------------------------


def test_worker_policy_grants_exactly_the_library_actions() -> None:
    policy = worker_policy_from_tf(bucket="b", prefix="t", kms_key_arn=KEY_ARN)
    assert actions(policy) == perms.WORKER_ACTIONS
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert set(by_sid["ListOwnPrefix"]["Action"]) == perms.WORKER_S3_BUCKET_ACTIONS
    assert set(by_sid["ReadWriteOwnPrefix"]["Action"]) == perms.WORKER_S3_OBJECT_ACTIONS
    assert set(by_sid["SseKmsThroughS3"]["Action"]) == perms.KMS_SSE_ACTIONS
    assert set(by_sid["WrapStoreKeys"]["Action"]) == perms.KMS_KEY_WRAP_ACTIONS


def test_worker_cannot_delete_and_stays_in_its_prefix() -> None:
    policy = worker_policy_from_tf(bucket="b", prefix="t", kms_key_arn=KEY_ARN)
    assert not {a for a in actions(policy) if a.startswith("s3:Delete")}
    assert not any("*" in a for a in actions(policy)), "no wildcard actions"
    assert all(s["Effect"] == "Allow" for s in policy["Statement"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert by_sid["ReadWriteOwnPrefix"]["Resource"] == ["arn:aws:s3:::b/t/*"]
    assert by_sid["ListOwnPrefix"]["Resource"] == ["arn:aws:s3:::b"]
    assert by_sid["ListOwnPrefix"]["Condition"] == {"StringLike": {"s3:prefix": ["t/*"]}}
    for sid in ("SseKmsThroughS3", "WrapStoreKeys"):
        assert by_sid[sid]["Resource"] == [KEY_ARN], "KMS permissions are scoped to the module's key"


def test_operator_policy_grants_exactly_the_library_actions() -> None:
    policy = operator_policy_from_tf(bucket="b", kms_key_arn=KEY_ARN)
    assert actions(policy) == perms.OPERATOR_ACTIONS
    assert actions(policy, prefix="s3:") == perms.OPERATOR_S3_OBJECT_ACTIONS | perms.OPERATOR_S3_BUCKET_ACTIONS
    assert actions(policy, prefix="kms:") == perms.OPERATOR_KMS_ACTIONS
    assert "s3:DeleteObject" in actions(policy)
    assert "s3:DeleteObjectVersion" not in actions(policy), "history is removed only by lifecycle rules"
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert "Condition" not in by_sid["ListEverything"], "the operator lists the whole bucket"
    assert by_sid["ReadWriteDeleteEverything"]["Resource"] == ["arn:aws:s3:::b/*"]


def test_rendered_policies_equal_the_library_documents() -> None:
    assert normalize(
        worker_policy_from_tf(bucket="bkt", prefix="team-a", kms_key_arn=KEY_ARN, region="eu-west-1")
    ) == normalize(perms.worker_policy("bkt", "team-a", KEY_ARN, region="eu-west-1"))
    assert normalize(operator_policy_from_tf(bucket="bkt", kms_key_arn=KEY_ARN, region="eu-west-1")) == normalize(
        perms.operator_policy("bkt", KEY_ARN, region="eu-west-1")
    )
    assert normalize(
        maintenance_policy_from_tf(bucket="bkt", prefix="team-a", kms_key_arn=KEY_ARN, region="eu-west-1")
    ) == normalize(perms.maintenance_policy("bkt", "team-a", KEY_ARN, region="eu-west-1"))


def test_every_action_says_why_and_the_roles_nest() -> None:
    assert set(perms.ACTION_REASONS) == perms.OPERATOR_ACTIONS | perms.WORKER_ACTIONS | perms.MAINTENANCE_ACTIONS
    assert perms.WORKER_ACTIONS < perms.OPERATOR_ACTIONS
    assert perms.MAINTENANCE_ACTIONS < perms.OPERATOR_ACTIONS
    assert {"s3:DeleteObject", "s3:GetObjectVersion", "s3:ListBucketVersions"} == perms.OPERATOR_ACTIONS - perms.WORKER_ACTIONS
    with pytest.raises(ValueError, match="tenant prefix"):
        perms.worker_policy("b", "/", KEY_ARN, region="us-east-1")
    with pytest.raises(ValueError, match="tenant prefix"):
        perms.worker_policy("b", "t*", KEY_ARN, region="us-east-1")


def test_key_policy_lets_only_the_roles_use_the_key_with_the_same_conditions() -> None:
    document = policy_document("kms")
    by_sid = {s["sid"]: s for s in document["statement"]}
    admin = by_sid["AccountAdministersTheKey"]
    assert admin["principals"][0]["identifiers"] == ["${local.account_root_arn}"]
    assert not {"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey", "kms:*"} & set(admin["actions"]), (
        "the account administers the key but does not use it"
    )
    users = {sid: s for sid, s in by_sid.items() if sid != "AccountAdministersTheKey"}
    assert {a for s in users.values() for a in s["actions"]} == perms.WORKER_KMS_ACTIONS
    # Every role uses the key through S3 and unwraps store keys; only workers and the operator wrap.
    principals = {sid: s["principals"][0]["identifiers"] for sid, s in users.items()}
    assert principals == {
        "S3ckptRolesUseTheKeyThroughS3": "${local.key_user_arns}",
        "S3ckptRolesUnwrapStoreKeys": "${local.key_user_arns}",
        "S3ckptRolesWrapStoreKeys": "${local.key_wrapper_arns}",
    }
    assert users["S3ckptRolesWrapStoreKeys"]["actions"] == ["kms:Encrypt"]
    # Each use statement carries the conditions of the identity statements that grant its actions
    # (by Sid); without them the key policy alone would grant the key unconditionally.
    refs = module_refs(bucket="b", kms_key_arn=KEY_ARN, prefix="t")
    identity_sids = {
        "S3ckptRolesUseTheKeyThroughS3": {"SseKmsThroughS3"},
        "S3ckptRolesUnwrapStoreKeys": {"WrapStoreKeys", "UnwrapStoreKeys"},
        "S3ckptRolesWrapStoreKeys": {"WrapStoreKeys"},
    }
    policies = {
        "operator": operator_policy_from_tf(bucket="b", kms_key_arn=KEY_ARN),
        "worker": worker_policy_from_tf(bucket="b", prefix="t", kms_key_arn=KEY_ARN),
        "maintenance": maintenance_policy_from_tf(bucket="b", prefix="t", kms_key_arn=KEY_ARN),
    }
    for sid, s in users.items():
        conditions: dict[str, dict[str, list[str]]] = {}
        for c in s["condition"]:
            conditions.setdefault(c["test"], {})[c["variable"]] = sorted(substitute(v, refs) for v in c["values"])
        for role, policy in policies.items():
            granting = [st for st in policy["Statement"] if st["Sid"] in identity_sids[sid]]
            if role == "maintenance" and sid == "S3ckptRolesWrapStoreKeys":
                assert not granting
                continue
            assert len(granting) == 1, (role, sid)
            assert set(s["actions"]) <= set(granting[0]["Action"]), (role, sid)
            if role == "operator":  # the whole bucket: the same values
                assert granting[0]["Condition"] == conditions, sid
            else:  # one tenant: the same condition keys, narrower values
                assert {t: set(v) for t, v in granting[0]["Condition"].items()} == {t: set(v) for t, v in conditions.items()}
    key_wrappers = locals_()["key_wrapper_arns"]
    assert "aws_iam_role.worker[name].arn" in key_wrappers
    assert "aws_iam_role.operator.arn" in key_wrappers
    assert "maintenance" not in key_wrappers, "a maintenance role never wraps a key"
    assert "local.maintenance_role_arns" in locals_()["key_user_arns"]


def test_kms_key_rotates_and_is_the_bucket_key() -> None:
    key = resource("aws_kms_key")
    assert key["enable_key_rotation"] is True
    assert key["policy"] == "${data.aws_iam_policy_document.kms.json}"
    assert key["deletion_window_in_days"] == "${var.kms_key_deletion_window_days}"


# -- the bucket ---------------------------------------------------------------------------------------


def test_bucket_versioning_is_enabled() -> None:
    versioning = resource("aws_s3_bucket_versioning")
    assert versioning["versioning_configuration"][0]["status"] == "Enabled"


def test_bucket_encryption_is_sse_kms_with_a_bucket_key() -> None:
    rule = resource("aws_s3_bucket_server_side_encryption_configuration")["rule"][0]
    default = rule["apply_server_side_encryption_by_default"][0]
    assert default["sse_algorithm"] == "aws:kms"
    assert default["kms_master_key_id"] == "${aws_kms_key.this.arn}"
    assert rule["bucket_key_enabled"] is True


def test_bucket_public_access_is_blocked_and_acls_are_off() -> None:
    block = resource("aws_s3_bucket_public_access_block")
    for setting in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"):
        assert block[setting] is True, setting
    ownership = resource("aws_s3_bucket_ownership_controls")
    assert ownership["rule"][0]["object_ownership"] == "BucketOwnerEnforced"


def _bucket_statements() -> dict[str, dict[str, Any]]:
    assert resource("aws_s3_bucket_policy")["policy"] == "${data.aws_iam_policy_document.bucket.json}"
    return {s["sid"]: s for s in policy_document("bucket")["statement"]}


def test_bucket_policy_denies_plain_http() -> None:
    statement = _bucket_statements()["DenyInsecureTransport"]
    assert statement["effect"] == "Deny"
    assert statement["actions"] == ["s3:*"]
    assert sorted(statement["resources"]) == ["${aws_s3_bucket.this.arn}", "${aws_s3_bucket.this.arn}/*"]
    assert statement["principals"] == [{"type": "*", "identifiers": ["*"]}]
    assert statement["condition"] == [{"test": "Bool", "variable": "aws:SecureTransport", "values": ["false"]}]


def write_once_patterns() -> list[str]:
    """The key patterns, below a tenant's prefix, where the bucket policy requires If-None-Match."""
    template = locals_()["write_once_object_arns"]
    return re.findall(r"\$\{aws_s3_bucket\.this\.arn\}/\$\{t\.prefix\}/([^\"\\]+)", template)


def test_bucket_policy_requires_if_none_match_on_commit_records() -> None:
    statement = _bucket_statements()["RequireIfNoneMatchOnWriteOnceObjects"]
    assert statement["effect"] == "Deny"
    assert statement["actions"] == ["s3:PutObject"]
    assert statement["principals"] == [{"type": "*", "identifiers": ["*"]}]
    assert statement["resources"] == "${local.write_once_object_arns}"
    conditions = {c["test"]: c for c in statement["condition"]}
    assert conditions["Null"]["variable"] == "s3:if-none-match"
    assert conditions["Null"]["values"] == ["true"]
    # Only the operator and the maintenance roles may replace a record (run deletion and prune write
    # tombstones over records).
    assert conditions["ArnNotEquals"]["variable"] == "aws:PrincipalArn"
    assert conditions["ArnNotEquals"]["values"] == "${local.record_replacer_arns}"
    replacers = locals_()["record_replacer_arns"]
    assert "aws_iam_role.operator.arn" in replacers
    assert "local.maintenance_role_arns" in replacers
    assert "worker" not in replacers
    assert "runs/*/log/*" in write_once_patterns()


class _RecordingBackend(MemoryBackend):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.space = name
        self.puts: list[tuple[str, PutMode]] = []

    def put(self, key: str, data: bytes | bytearray | memoryview, *, mode: PutMode = "overwrite", **kw: Any) -> PutResult:
        self.puts.append((key, mode))
        return super().put(key, data, mode=mode, **kw)


def _s3ckpt_puts(tmp_path: Path) -> Iterator[tuple[str, PutMode]]:
    backend = _RecordingBackend(f"tf-{tmp_path.name}")
    try:
        artifact = tmp_path / "weights.bin"
        artifact.write_bytes(bytes(range(256)) * 4096)
        store = s3ckpt.open_store(key=s3ckpt.generate_key(), backend=backend)
        store.add_key(s3ckpt.generate_key(), label="second")
        writer = store.run("job/1").claim()
        writer.commit({"step": 1}, artifacts={"weights": artifact})
        writer.commit({"step": 2})
        with store.resume("job/2", workflow="w", workflow_version="1") as session:
            session.step("fetch", lambda: 42)
        store.close()
        yield from backend.puts
    finally:
        MemoryBackend.wipe(backend.space)


def test_the_write_once_objects_are_exactly_what_s3ckpt_creates_with_if_none_match(tmp_path: Path) -> None:
    """The bucket policy must not refuse a put the library makes: every put to a write-once key is
    a create (If-None-Match: *), and the HEAD pointer, replaced by compare-and-swap, is not one."""
    patterns = write_once_patterns()
    assert sorted(patterns) == ["keys/*", "packs/*", "runs/*/log/*"]
    puts = list(_s3ckpt_puts(tmp_path))
    matched = dict.fromkeys(patterns, 0)
    for key, mode in puts:
        hits = [p for p in patterns if fnmatch.fnmatchcase(key, p)]  # S3's * also crosses "/"
        for p in hits:
            matched[p] += 1
        if hits:
            assert mode == "create", f"s3ckpt writes {key} without If-None-Match; the bucket policy would refuse it"
    assert all(matched.values()), f"a pattern matched none of s3ckpt's writes: {matched}"
    heads = [(k, m) for k, m in puts if k.endswith("/HEAD")]
    assert heads
    assert not any(fnmatch.fnmatchcase(k, p) for k, _ in heads for p in patterns)
    assert any(m != "create" for _, m in heads), "HEAD is replaced in place (If-Match), so it must stay outside the deny"


def test_bucket_lifecycle_expires_only_what_cannot_be_live() -> None:
    lifecycle = resource("aws_s3_bucket_lifecycle_configuration")
    rules = {r["id"]: r for r in lifecycle["rule"]}
    abort = rules["abort-incomplete-multipart-uploads"]
    assert abort["status"] == "Enabled"
    assert abort["filter"] == [{}], "applies to the whole bucket"
    assert abort["abort_incomplete_multipart_upload"][0]["days_after_initiation"] == 1
    noncurrent = rules["expire-noncurrent-versions"]
    assert noncurrent["status"] == "Enabled"
    assert noncurrent["filter"] == [{}]
    assert noncurrent["noncurrent_version_expiration"][0]["noncurrent_days"] == "${var.noncurrent_version_expiration_days}"
    # No rule expires a current object by its age: with deduplication a live run's latest checkpoint
    # can name a pack older than any limit. Only the delete markers that nothing is behind go.
    assert set(rules) == {"abort-incomplete-multipart-uploads", "expire-noncurrent-versions"}
    assert "dynamic" not in lifecycle, "no generated (per-tenant) rules"
    for rule in rules.values():
        for expiration in rule.get("expiration", []):
            assert set(expiration) == {"expired_object_delete_marker"}, f"rule {rule['id']} expires current objects"
        assert "transition" not in rule
    tenant_type = next(body for block in module()["variable"] for name, body in block.items() if name == "tenants")["type"]
    assert "run_retention_days" not in tenant_type
    assert "retention" in tenant_type


def test_access_logging_is_optional() -> None:
    logging = resource("aws_s3_bucket_logging")
    assert logging["count"] == "${var.access_log_bucket == null ? 0 : 1}"
    variables = {name: body for block in module()["variable"] for name, body in block.items()}
    assert variables["access_log_bucket"]["default"] is None


def test_worker_roles_are_per_tenant_with_a_configurable_trust() -> None:
    worker = resource("aws_iam_role", "worker")
    assert worker["for_each"] == "${local.tenants}"
    assert worker["assume_role_policy"] == "${data.aws_iam_policy_document.worker_trust[each.key].json}"
    trust = policy_document("worker_trust")["statement"][0]
    principals = {d["principals"]["content"][0]["type"]: d["principals"]["for_each"] for d in trust["dynamic"]}
    assert "each.value.trusted_services" in principals["Service"]
    assert "each.value.trusted_role_arns" in principals["AWS"]
    policy = resource("aws_iam_role_policy", "worker")
    assert policy["policy"] == "${data.aws_iam_policy_document.worker[each.key].json}"
    assert resource("aws_iam_role_policy", "operator")["policy"] == "${data.aws_iam_policy_document.operator.json}"


# -- scheduled maintenance (maintenance.tf) -------------------------------------------------------------


def _variable(name: str) -> dict[str, Any]:
    return next(body for block in module()["variable"] for n, body in block.items() if n == name)


def test_maintenance_policy_grants_exactly_the_library_actions_in_one_tenant() -> None:
    policy = maintenance_policy_from_tf(bucket="b", prefix="t", kms_key_arn=KEY_ARN)
    assert actions(policy) == perms.MAINTENANCE_ACTIONS
    assert "kms:Encrypt" not in actions(policy), "the job opens an existing store and never wraps a key"
    assert not {"s3:DeleteObjectVersion", "s3:GetObjectVersion", "s3:ListBucketVersions"} & actions(policy)
    assert not any("*" in a for a in actions(policy)), "no wildcard actions"
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert set(by_sid["ReadWriteDeleteOwnPrefix"]["Action"]) == perms.MAINTENANCE_S3_OBJECT_ACTIONS
    assert by_sid["ReadWriteDeleteOwnPrefix"]["Resource"] == ["arn:aws:s3:::b/t/*"]
    assert by_sid["ListOwnPrefix"]["Condition"] == {"StringLike": {"s3:prefix": ["t/*"]}}
    for sid in ("SseKmsThroughS3", "UnwrapStoreKeys"):
        assert by_sid[sid]["Resource"] == [KEY_ARN]
    assert set(by_sid["UnwrapStoreKeys"]["Action"]) == perms.MAINTENANCE_KMS_UNWRAP_ACTIONS
    assert (
        resource("aws_iam_role_policy", "maintenance")["policy"] == "${data.aws_iam_policy_document.maintenance[each.key].json}"
    )


def test_maintenance_is_off_by_default_and_every_resource_follows_the_switch() -> None:
    assert _variable("maintenance_enabled")["default"] is False
    assert locals_()["maintained_tenants"] == "${var.maintenance_enabled ? local.tenants : {}}"
    parsed = load_tf(TERRAFORM / "maintenance.tf")
    kinds = [(kind, name) for block in parsed["resource"] for kind, by_name in block.items() for name in by_name]
    assert {kind for kind, _ in kinds} >= {
        "aws_iam_role",
        "aws_lambda_function",
        "aws_cloudwatch_event_rule",
        "aws_cloudwatch_event_target",
        "aws_lambda_permission",
    }
    for kind, name in kinds:
        assert resource(kind, name)["for_each"] == "${local.maintained_tenants}", f"{kind}.{name} ignores maintenance_enabled"


def test_maintenance_function_runs_the_handler_with_the_environment_it_reads() -> None:
    from s3ckpt import aws_maintenance

    function = resource("aws_lambda_function", "maintenance")
    module_name, _, attribute = function["handler"].rpartition(".")
    assert module_name == aws_maintenance.__name__
    assert callable(getattr(aws_maintenance, attribute))
    assert function["role"] == "${aws_iam_role.maintenance[each.key].arn}"
    assert function["reserved_concurrent_executions"] == 1, "one run at a time per tenant"
    assert function["environment"][0]["variables"] == "${local.maintenance_environment[each.key]}"
    environment = locals_()["maintenance_environment"]
    names = set(re.findall(r"\b(S3CKPT_[A-Z_]+)\s*=", environment))
    assert names <= aws_maintenance.ENVIRONMENT, f"the handler does not read {names - aws_maintenance.ENVIRONMENT}"
    required = {"S3CKPT_URL", "S3CKPT_KEY", "S3CKPT_GC_GRACE_SECONDS", "S3CKPT_DRY_RUN"}
    assert names >= required | {"S3CKPT_KEEP_LAST", "S3CKPT_KEEP_WITHIN_DAYS"}
    assert "kms:${aws_kms_key.this.arn}" in environment, "the job opens the store with the module's KMS key"
    assert "floor(var.maintenance_gc_grace_hours * 3600)" in environment
    # The smallest grace the module allows exceeds the writers' default commit deadline, which gc requires.
    assert "var.maintenance_gc_grace_hours >= 1" in _variable("maintenance_gc_grace_hours")["validation"][0]["condition"]
    assert s3ckpt.StoreOptions().commit_deadline < 3600
    # The code comes from exactly one of the two package variables.
    precondition = function["lifecycle"][0]["precondition"][0]["condition"]
    assert "var.maintenance_package_path == null" in precondition
    assert "var.maintenance_package_s3 == null" in precondition


def test_maintenance_runs_on_a_schedule_that_only_its_rule_may_invoke() -> None:
    rule = resource("aws_cloudwatch_event_rule", "maintenance")
    assert rule["schedule_expression"] == "${var.maintenance_schedule_expression}"
    assert _variable("maintenance_schedule_expression")["default"] == "rate(1 day)"
    target = resource("aws_cloudwatch_event_target", "maintenance")
    assert target["rule"] == "${aws_cloudwatch_event_rule.maintenance[each.key].name}"
    assert target["arn"] == "${aws_lambda_function.maintenance[each.key].arn}"
    permission = resource("aws_lambda_permission", "maintenance")
    assert permission["principal"] == "events.amazonaws.com"
    assert permission["action"] == "lambda:InvokeFunction"
    assert permission["source_arn"] == "${aws_cloudwatch_event_rule.maintenance[each.key].arn}"
    trust = policy_document("maintenance_trust")["statement"]
    assert trust == [
        {"sid": "AssumeMaintenanceRole", "actions": ["sts:AssumeRole"],
         "principals": [{"type": "Service", "identifiers": ["lambda.amazonaws.com"]}]}
    ]  # fmt: skip
    # Logs: its own log group only, not AWSLambdaBasicExecutionRole's CreateLogGroup on "*".
    (logs,) = policy_document("maintenance_logs")["statement"]
    assert sorted(logs["actions"]) == ["logs:CreateLogStream", "logs:PutLogEvents"]
    assert logs["resources"] == ["${aws_cloudwatch_log_group.maintenance[each.key].arn}:*"]


def test_readme_documents_inputs_outputs_and_what_moto_does_not_check() -> None:
    readme = (TERRAFORM / "README.md").read_text(encoding="utf-8")
    variables = {name for block in module()["variable"] for name in block}
    outputs = {name for block in module()["output"] for name in block}
    for name in variables | outputs:
        assert f"`{name}`" in readme, f"terraform/README.md does not document {name}"
    assert "moto" in readme
    assert "condition" in readme.lower()
