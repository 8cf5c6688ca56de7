# A customer-managed key for the bucket's SSE-KMS and for s3ckpt's own `kms:` key files.
# Use it in a worker as open_store("s3://<bucket>/<tenant>", key="kms:<kms_key_arn output>").

locals {
  # Roles that wrap store keys (create a store, `s3ckpt key add`): workers and the operator.
  key_wrapper_arns = concat([for name in keys(local.tenants) : aws_iam_role.worker[name].arn], [aws_iam_role.operator.arn])
  # Roles that use the key at all: those, and the maintenance roles (SSE-KMS and unwrapping only).
  key_user_arns = concat(local.key_wrapper_arns, local.maintenance_role_arns)
}

data "aws_iam_policy_document" "kms" {
  # Key policies name the key as "*". The account administers the key (through IAM policies of its
  # administrators) but is not granted its use: only the roles below encrypt and decrypt with it.
  # An administrator who wants to would have to change this policy or create a grant, both of
  # which CloudTrail records.
  #checkov:skip=CKV_AWS_109:A key policy's Resource "*" is the key itself; the administrative actions are granted to the account root so that IAM administrators can manage (never use) the key, AWS's recommended way to avoid an unmanageable key.
  #checkov:skip=CKV_AWS_111:Same statement: write actions on "*" in a key policy mean this key only, and they are administrative (no Encrypt/Decrypt for the account).
  #checkov:skip=CKV_AWS_356:In a key policy "*" is the key the policy is attached to, not every resource; a key policy cannot name its own ARN before the key exists.
  statement {
    sid = "AccountAdministersTheKey"
    actions = [
      "kms:CancelKeyDeletion",
      "kms:Create*",
      "kms:Delete*",
      "kms:Describe*",
      "kms:Disable*",
      "kms:Enable*",
      "kms:Get*",
      "kms:List*",
      "kms:Put*",
      "kms:Revoke*",
      "kms:RotateKeyOnDemand",
      "kms:ScheduleKeyDeletion",
      "kms:TagResource",
      "kms:UntagResource",
      "kms:Update*",
    ]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = [local.account_root_arn]
    }
  }

  # The same conditions as the roles' identity policies (iam.tf): a key policy that named the roles
  # without them would grant the use of the key on its own, and the identity conditions would not
  # narrow anything.
  statement {
    sid       = "S3ckptRolesUseTheKeyThroughS3"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = local.key_user_arns
    }

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

  # s3ckpt's kms: key files, split by action: every role unwraps (open_store); only workers and the
  # operator wrap (store creation, `s3ckpt key add`), so a maintenance role gets no kms:Encrypt here.
  statement {
    sid       = "S3ckptRolesUnwrapStoreKeys"
    actions   = ["kms:Decrypt"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = local.key_user_arns
    }

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

  statement {
    sid       = "S3ckptRolesWrapStoreKeys"
    actions   = ["kms:Encrypt"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = local.key_wrapper_arns
    }

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

resource "aws_kms_key" "this" {
  description             = "s3ckpt: SSE-KMS of s3://${var.bucket_name} and s3ckpt kms: key files"
  key_usage               = "ENCRYPT_DECRYPT"
  enable_key_rotation     = true
  rotation_period_in_days = var.kms_key_rotation_period_days
  deletion_window_in_days = var.kms_key_deletion_window_days
  policy                  = data.aws_iam_policy_document.kms.json
  tags                    = var.tags
}

resource "aws_kms_alias" "this" {
  name          = "alias/${var.name_prefix}-${replace(var.bucket_name, ".", "-")}" # "." is not allowed in an alias
  target_key_id = aws_kms_key.this.key_id
}
