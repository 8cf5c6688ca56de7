# The bucket that holds every tenant's s3ckpt store, s3://<bucket>/<tenant>/.

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

data "aws_region" "current" {}

locals {
  # Tenant key = store prefix (one path segment, validated in variables.tf).
  tenants = { for name, t in var.tenants : name => merge(t, { prefix = name }) }

  account_root_arn = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"

  # kms:ViaService for the SSE-KMS calls S3 makes on a caller's behalf.
  s3_service = "s3.${data.aws_region.current.region}.amazonaws.com"

  # Objects that s3ckpt only ever creates with If-None-Match: * (docs/FORMAT.md): commit records,
  # packs and key files. A plain PUT there can only be a bug or an attack (it would replace a commit
  # of the run's history), so the bucket policy refuses it. The HEAD pointer (If-Match) and config
  # (If-Match on `s3ckpt migrate`) are not in the list.
  write_once_object_arns = flatten([
    for name, t in local.tenants : [
      "${aws_s3_bucket.this.arn}/${t.prefix}/runs/*/log/*",
      "${aws_s3_bucket.this.arn}/${t.prefix}/packs/*",
      "${aws_s3_bucket.this.arn}/${t.prefix}/keys/*",
    ]
  ])

}

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV_AWS_144:Cross-region replication needs a second bucket, key and role in another region, a disaster-recovery choice of the adopting platform; checkpoints are re-creatable work state and versioning already protects against deletion.
  #checkov:skip=CKV2_AWS_62:s3ckpt never consumes S3 event notifications; readers poll the run log. Adopters who want events add an aws_s3_bucket_notification.
  bucket = var.bucket_name
  tags   = var.tags
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    object_ownership = "BucketOwnerEnforced" # ACLs off: the bucket owner owns every object
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket = aws_s3_bucket.this.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.this.arn
    }
    # An S3 Bucket Key: S3 asks KMS for a bucket-level key and derives object keys from it, so a
    # commit costs no KMS request per object. Callers still need kms:GenerateDataKey (PUT) and
    # kms:Decrypt (GET) on the key; the encryption context is then the bucket ARN.
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  # Only what can never be live expires here. No rule expires current records or packs by their age:
  # with deduplication a live run's latest checkpoint can reference a pack older than any age limit.
  # Retention is s3ckpt's own prune and gc (maintenance.tf), which mark from every record first.
  # Noncurrent-version rules need versioning in place first.
  depends_on = [aws_s3_bucket_versioning.this]

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  rule {
    id     = "expire-noncurrent-versions"
    status = "Enabled"

    filter {}

    # Replaced HEAD pointers (one per commit), and what prune and gc deleted: s3ckpt reads only
    # current versions, so these are never live. Kept for the recovery window (verify reports a
    # deleted log record within it), then removed for good; so are the delete markers left behind.
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }

    expiration {
      expired_object_delete_marker = true
    }
  }
}

resource "aws_s3_bucket_logging" "this" {
  count = var.access_log_bucket == null ? 0 : 1

  bucket        = aws_s3_bucket.this.id
  target_bucket = var.access_log_bucket
  target_prefix = coalesce(var.access_log_prefix, "s3-access/${var.bucket_name}/")
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      aws_s3_bucket.this.arn,
      "${aws_s3_bucket.this.arn}/*",
    ]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  # A commit record is the commit point of a run: it must be created with If-None-Match: * so that
  # exactly one writer wins each sequence number, and never replaced. The operator and the maintenance
  # roles are exempt because run deletion and prune (docs/FORMAT.md, "Deleted runs") replace records
  # with tombstones instead of deleting their keys.
  statement {
    sid       = "RequireIfNoneMatchOnWriteOnceObjects"
    effect    = "Deny"
    actions   = ["s3:PutObject"]
    resources = local.write_once_object_arns

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Null"
      variable = "s3:if-none-match"
      values   = ["true"]
    }

    condition {
      test     = "ArnNotEquals"
      variable = "aws:PrincipalArn"
      values   = local.record_replacer_arns
    }
  }
}

resource "aws_s3_bucket_policy" "this" {
  bucket = aws_s3_bucket.this.id
  policy = data.aws_iam_policy_document.bucket.json

  # S3 refuses concurrent configuration changes to one bucket (OperationAborted): one at a time.
  depends_on = [aws_s3_bucket_public_access_block.this]
}
