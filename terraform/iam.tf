# Least-privilege roles. The actions below must equal those in s3ckpt/aws_permissions.py
# (tests/test_terraform.py checks it, tests/test_iam.py runs s3ckpt under these policies):
#   worker   = WORKER_S3_BUCKET_ACTIONS + WORKER_S3_OBJECT_ACTIONS + KMS_SSE_ACTIONS + KMS_KEY_WRAP_ACTIONS
#   operator = OPERATOR_S3_BUCKET_ACTIONS + OPERATOR_S3_OBJECT_ACTIONS + the same KMS actions

# -- worker: one role per tenant, its own prefix only, no delete ---------------------------------

data "aws_iam_policy_document" "worker_trust" {
  for_each = local.tenants

  statement {
    sid     = "AssumeWorkerRole"
    actions = ["sts:AssumeRole"]

    dynamic "principals" {
      for_each = length(each.value.trusted_services) > 0 ? [each.value.trusted_services] : []
      content {
        type        = "Service"
        identifiers = principals.value
      }
    }

    dynamic "principals" {
      for_each = length(each.value.trusted_role_arns) > 0 ? [each.value.trusted_role_arns] : []
      content {
        type        = "AWS"
        identifiers = principals.value
      }
    }
  }
}

resource "aws_iam_role" "worker" {
  for_each = local.tenants

  name                 = "${var.name_prefix}-worker-${each.key}"
  description          = "s3ckpt worker of tenant ${each.key}: read and write s3://${var.bucket_name}/${each.value.prefix}/, no delete"
  assume_role_policy   = data.aws_iam_policy_document.worker_trust[each.key].json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags
}

data "aws_iam_policy_document" "worker" {
  for_each = local.tenants

  # list_objects_v2 of keys/, runs/ and runs/<run>/log/, always with a Prefix under the tenant's.
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

  # get_object / head_object, and put_object with If-None-Match (records, packs, key files, config)
  # or If-Match (HEAD). No s3:DeleteObject: a worker never deletes.
  statement {
    sid       = "ReadWriteOwnPrefix"
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = ["${aws_s3_bucket.this.arn}/${each.value.prefix}/*"]
  }

  # SSE-KMS: S3 calls KMS with the caller's permissions (GenerateDataKey on PUT, Decrypt on GET).
  statement {
    sid       = "SseKmsThroughS3"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [aws_kms_key.this.arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = [local.s3_service]
    }

    # With an S3 Bucket Key the context is the bucket ARN; without one, the object's ARN.
    condition {
      test     = "StringLike"
      variable = "kms:EncryptionContext:aws:s3:arn"
      values   = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/${each.value.prefix}/*"]
    }
  }

  # s3ckpt's kms: key files: Encrypt when a store is created or a key added, Decrypt on open_store,
  # always with the encryption context {"s3ckpt:store", "s3ckpt:key"} (s3ckpt/keyring.py).
  statement {
    sid       = "WrapStoreKeys"
    actions   = ["kms:Decrypt", "kms:Encrypt"]
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

resource "aws_iam_role_policy" "worker" {
  for_each = local.tenants

  name   = "s3ckpt-worker"
  role   = aws_iam_role.worker[each.key].id
  policy = data.aws_iam_policy_document.worker[each.key].json
}

# -- operator: every tenant; verify, gc, prune, key management ------------------------------------

data "aws_iam_policy_document" "operator_trust" {
  statement {
    sid     = "AssumeOperatorRole"
    actions = ["sts:AssumeRole"]

    dynamic "principals" {
      for_each = length(var.operator_trusted_services) > 0 ? [var.operator_trusted_services] : []
      content {
        type        = "Service"
        identifiers = principals.value
      }
    }

    dynamic "principals" {
      for_each = length(var.operator_trusted_role_arns) > 0 ? [var.operator_trusted_role_arns] : []
      content {
        type        = "AWS"
        identifiers = principals.value
      }
    }
  }
}

resource "aws_iam_role" "operator" {
  name                 = "${var.name_prefix}-operator"
  description          = "s3ckpt operator: list, read, write and delete in every tenant of s3://${var.bucket_name}"
  assume_role_policy   = data.aws_iam_policy_document.operator_trust.json
  permissions_boundary = var.permissions_boundary_arn
  tags                 = var.tags

  lifecycle {
    precondition {
      condition     = length(var.operator_trusted_services) + length(var.operator_trusted_role_arns) > 0
      error_message = "Set operator_trusted_role_arns or operator_trusted_services: nobody could assume the operator role."
    }
  }
}

data "aws_iam_policy_document" "operator" {
  # Listing the whole bucket, versions included: gc marks from every record of every run, and
  # verify looks for overwritten records (an object with more than one version).
  statement {
    sid       = "ListEverything"
    actions   = ["s3:ListBucket", "s3:ListBucketVersions"]
    resources = [aws_s3_bucket.this.arn]
  }

  # Delete for remove_key, gc and prune (a delete marker: history stays for the noncurrent-version
  # window). No s3:DeleteObjectVersion: history is removed for good only by the lifecycle rules.
  statement {
    sid       = "ReadWriteDeleteEverything"
    actions   = ["s3:DeleteObject", "s3:GetObject", "s3:GetObjectVersion", "s3:PutObject"]
    resources = ["${aws_s3_bucket.this.arn}/*"]
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
      values   = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/*"]
    }
  }

  statement {
    sid       = "WrapStoreKeys"
    actions   = ["kms:Decrypt", "kms:Encrypt"]
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

resource "aws_iam_role_policy" "operator" {
  name   = "s3ckpt-operator"
  role   = aws_iam_role.operator.id
  policy = data.aws_iam_policy_document.operator.json
}
