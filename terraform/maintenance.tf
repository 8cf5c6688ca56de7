# Optional scheduled maintenance (maintenance_enabled): per tenant, an EventBridge rule invokes a Lambda
# function running s3ckpt.aws_maintenance.handler, which prunes the tenant's store with its retention
# policy, then runs gc. Workers cannot delete, so this job has its own role per tenant: the worker's
# actions on that tenant's prefix plus s3:DeleteObject, and kms:Decrypt only (it never creates a store
# or wraps a key). The actions must equal s3ckpt/aws_permissions.py's MAINTENANCE_* sets
# (tests/test_terraform.py checks it; tests/test_maintenance.py runs the handler under this policy).

locals {
  maintained_tenants = var.maintenance_enabled ? local.tenants : {}

  # Role, function, log group and rule names: 32 + 7 + 24 characters at most, within IAM's 64.
  maintenance_names = { for name in keys(local.maintained_tenants) : name => "${var.name_prefix}-maint-${name}" }

  maintenance_role_arns = [for role in aws_iam_role.maintenance : role.arn]

  # Principals the bucket policy lets replace write-once objects: run deletion and prune write tombstones.
  record_replacer_arns = concat([aws_iam_role.operator.arn], local.maintenance_role_arns)

  # What the handler reads (s3ckpt/aws_maintenance.py). Unset keep_* variables mean no such rule.
  maintenance_environment = {
    for name, t in local.maintained_tenants : name => merge(
      {
        S3CKPT_URL              = "s3://${aws_s3_bucket.this.id}/${t.prefix}"
        S3CKPT_KEY              = "kms:${aws_kms_key.this.arn}"
        S3CKPT_GC_GRACE_SECONDS = tostring(floor(var.maintenance_gc_grace_hours * 3600))
        S3CKPT_DRY_RUN          = tostring(var.maintenance_dry_run)
      },
      t.retention.keep_last == null ? {} : { S3CKPT_KEEP_LAST = tostring(t.retention.keep_last) },
      t.retention.keep_within_days == null ? {} : { S3CKPT_KEEP_WITHIN_DAYS = tostring(t.retention.keep_within_days) },
    )
  }
}

data "aws_iam_policy_document" "maintenance_trust" {
  statement {
    sid     = "AssumeMaintenanceRole"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "maintenance" {
  for_each = local.maintained_tenants

  name                 = local.maintenance_names[each.key]
  description          = "s3ckpt scheduled prune and gc of tenant ${each.key}: read, write and delete s3://${var.bucket_name}/${each.value.prefix}/"
  assume_role_policy   = data.aws_iam_policy_document.maintenance_trust.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

data "aws_iam_policy_document" "maintenance" {
  for_each = local.maintained_tenants

  # prune and gc list runs/, every log and packs/: always with a Prefix under the tenant's.
  statement {
    sid       = "ListOwnPrefix"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.this.arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${each.value.prefix}/*"]
    }
  }

  # Read records and packs, write tombstones and repacked packs, delete dead packs and records.
  statement {
    sid       = "ReadWriteDeleteOwnPrefix"
    actions   = ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    resources = ["${aws_s3_bucket.this.arn}/${each.value.prefix}/*"]
  }

  statement {
    sid       = "SseKmsThroughS3"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [aws_kms_key.this.arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = [local.s3_service]
    }

    condition {
      test     = "StringLike"
      variable = "kms:EncryptionContext:aws:s3:arn"
      values   = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/${each.value.prefix}/*"]
    }
  }

  # open_store(create=False) unwraps the store's master key; nothing here wraps one.
  statement {
    sid       = "UnwrapStoreKeys"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.this.arn]

    condition {
      test     = "ForAllValues:StringEquals"
      variable = "kms:EncryptionContextKeys"
      values   = ["s3ckpt:key", "s3ckpt:store"]
    }

    condition {
      test     = "Null"
      variable = "kms:EncryptionContextKeys"
      values   = ["false"]
    }
  }
}

resource "aws_iam_role_policy" "maintenance" {
  for_each = local.maintained_tenants

  name   = "s3ckpt-maintenance"
  role   = aws_iam_role.maintenance[each.key].id
  policy = data.aws_iam_policy_document.maintenance[each.key].json
}

# The function's own log group, so that its role needs no logs:CreateLogGroup on "*" (what the
# AWSLambdaBasicExecutionRole managed policy would grant).
resource "aws_cloudwatch_log_group" "maintenance" {
  #checkov:skip=CKV_AWS_158:The log holds counts only (checkpoints and packs deleted, bytes freed), never run ids, state or keys; CloudWatch Logs encrypts it at rest with its own key, and a KMS key here would need a key policy for the logs service.
  for_each = local.maintained_tenants

  name              = "/aws/lambda/${local.maintenance_names[each.key]}"
  retention_in_days = var.maintenance_log_retention_days
  tags              = var.tags
}

data "aws_iam_policy_document" "maintenance_logs" {
  for_each = local.maintained_tenants

  statement {
    sid       = "WriteOwnLogGroup"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.maintenance[each.key].arn}:*"]
  }
}

resource "aws_iam_role_policy" "maintenance_logs" {
  for_each = local.maintained_tenants

  name   = "lambda-logs"
  role   = aws_iam_role.maintenance[each.key].id
  policy = data.aws_iam_policy_document.maintenance_logs[each.key].json
}

resource "aws_lambda_function" "maintenance" {
  #checkov:skip=CKV_AWS_117:The function reaches only S3 and KMS, over TLS on their public endpoints (the bucket policy denies plain HTTP); a VPC needs subnets and S3/KMS endpoints that belong to the adopter's network design.
  #checkov:skip=CKV_AWS_116:Invoked by a schedule; a failed run is repeated in full by the next scheduled run (prune and gc are idempotent), and the failure is in the function's log and Errors metric. A dead-letter queue would hold only the empty scheduled event.
  #checkov:skip=CKV_AWS_173:The environment holds no secret: the store URL, the ARN of the KMS key (key material never leaves KMS) and the retention policy. Lambda encrypts environment variables at rest with an AWS managed key by default.
  #checkov:skip=CKV_AWS_272:Code signing needs a signing profile and a signed-artifact pipeline that the adopter owns; the module deploys the package it is given.
  for_each = local.maintained_tenants

  function_name = local.maintenance_names[each.key]
  description   = "s3ckpt: prune s3://${var.bucket_name}/${each.value.prefix} with its retention policy, then gc"
  role          = aws_iam_role.maintenance[each.key].arn
  runtime       = var.maintenance_runtime
  handler       = "s3ckpt.aws_maintenance.handler"
  timeout       = var.maintenance_timeout_seconds
  memory_size   = var.maintenance_memory_mb

  filename          = var.maintenance_package_path
  source_code_hash  = var.maintenance_package_path == null ? null : filebase64sha256(var.maintenance_package_path)
  s3_bucket         = try(var.maintenance_package_s3.bucket, null)
  s3_key            = try(var.maintenance_package_s3.key, null)
  s3_object_version = try(var.maintenance_package_s3.object_version, null)

  # One run at a time per tenant: a run that outlasts the schedule's interval is not joined by another.
  reserved_concurrent_executions = 1

  environment {
    variables = local.maintenance_environment[each.key]
  }

  # Traces only when a caller's request carries them; Active tracing would need X-Ray write access on "*".
  tracing_config {
    mode = "PassThrough"
  }

  tags = var.tags

  # The role can write its logs and reach the store before the first scheduled run.
  depends_on = [aws_iam_role_policy.maintenance, aws_iam_role_policy.maintenance_logs, aws_cloudwatch_log_group.maintenance]

  lifecycle {
    precondition {
      condition     = (var.maintenance_package_path == null) != (var.maintenance_package_s3 == null)
      error_message = "maintenance_enabled needs the function's code: set exactly one of maintenance_package_path and maintenance_package_s3 (terraform/README.md, \"Scheduled maintenance\", says how to build it)."
    }
  }
}

resource "aws_cloudwatch_event_rule" "maintenance" {
  for_each = local.maintained_tenants

  name                = local.maintenance_names[each.key]
  description         = "s3ckpt: scheduled prune and gc of tenant ${each.key}"
  schedule_expression = var.maintenance_schedule_expression
  tags                = var.tags
}

resource "aws_cloudwatch_event_target" "maintenance" {
  for_each = local.maintained_tenants

  rule = aws_cloudwatch_event_rule.maintenance[each.key].name
  arn  = aws_lambda_function.maintenance[each.key].arn
}

# Only this rule may invoke the function.
resource "aws_lambda_permission" "maintenance" {
  for_each = local.maintained_tenants

  statement_id  = "AllowScheduledMaintenance"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.maintenance[each.key].function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.maintenance[each.key].arn
}
