variable "bucket_name" {
  description = "Name of the S3 bucket that holds the s3ckpt stores (created by this module, one per module instance)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name)) && !can(regex("\\.\\.", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name: 3-63 characters of a-z, 0-9, '.' and '-'."
  }
}

variable "tenants" {
  description = <<-EOT
    One entry per tenant. The map key is the tenant's store prefix: its store is s3://<bucket>/<key>,
    and its worker role can read, write and list only under "<key>/" and can delete nothing.
      trusted_services   - AWS services that may assume the worker role, e.g. ["ecs-tasks.amazonaws.com"],
                           ["ec2.amazonaws.com"] or ["lambda.amazonaws.com"].
      trusted_role_arns  - IAM principals (ARNs) that may assume the worker role (CI, another account).
      run_retention_days - optional: expire the tenant's runs/ and packs/ objects this many days after
                           each was written (a delete marker; the data stays recoverable for
                           noncurrent_version_expiration_days more). Lifecycle counts each object's own
                           age, so set it only for tenants whose runs finish well within that time: an
                           older run loses its first records and packs, which its later checkpoints may
                           still reference through deduplication. Leave null (the default) to keep runs
                           until s3ckpt prunes them.
  EOT
  type = map(object({
    trusted_services   = optional(list(string), [])
    trusted_role_arns  = optional(list(string), [])
    run_retention_days = optional(number)
  }))

  validation {
    condition     = length(var.tenants) > 0
    error_message = "Define at least one tenant."
  }

  validation {
    # One path segment each: no tenant prefix can then be a prefix of another tenant's objects.
    condition     = alltrue([for name in keys(var.tenants) : can(regex("^[a-z0-9][a-z0-9_.-]{0,23}$", name))])
    error_message = "Tenant keys are single path segments: 1-24 characters (they end up in role names) of a-z, 0-9, '_', '.' and '-', starting with a letter or digit."
  }

  validation {
    condition     = alltrue([for t in values(var.tenants) : length(t.trusted_services) + length(t.trusted_role_arns) > 0])
    error_message = "Every tenant needs at least one trusted service or trusted role ARN for its worker role."
  }

  validation {
    condition     = alltrue([for t in values(var.tenants) : t.run_retention_days == null ? true : t.run_retention_days >= 1])
    error_message = "run_retention_days is null or at least 1."
  }
}

variable "operator_trusted_role_arns" {
  description = "IAM principals (ARNs) that may assume the operator role (people, CI), which can list and delete in every tenant."
  type        = list(string)
  default     = []
}

variable "operator_trusted_services" {
  description = "AWS services that may assume the operator role, e.g. [\"ecs-tasks.amazonaws.com\"] for a scheduled gc / prune task."
  type        = list(string)
  default     = []
}

variable "name_prefix" {
  description = "Prefix of the IAM role names and of the KMS alias: <name_prefix>-worker-<tenant>, <name_prefix>-operator, alias/<name_prefix>-<bucket_name>."
  type        = string
  default     = "s3ckpt"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,32}$", var.name_prefix))
    error_message = "name_prefix is 1-32 characters of A-Z, a-z, 0-9, '_' and '-' (valid in role names and KMS aliases)."
  }
}

variable "noncurrent_version_expiration_days" {
  description = "Days an overwritten or deleted object version is kept before the lifecycle removes it for good (the window to recover from a mistake)."
  type        = number
  default     = 30

  validation {
    condition     = var.noncurrent_version_expiration_days >= 1
    error_message = "noncurrent_version_expiration_days must be at least 1."
  }
}

variable "kms_key_deletion_window_days" {
  description = "Waiting period, in days, before a scheduled deletion of the KMS key takes effect (7-30)."
  type        = number
  default     = 30

  validation {
    condition     = var.kms_key_deletion_window_days >= 7 && var.kms_key_deletion_window_days <= 30
    error_message = "kms_key_deletion_window_days must be between 7 and 30."
  }
}

variable "kms_key_rotation_period_days" {
  description = "Automatic rotation period of the KMS key's material, in days (90-2560)."
  type        = number
  default     = 365

  validation {
    condition     = var.kms_key_rotation_period_days >= 90 && var.kms_key_rotation_period_days <= 2560
    error_message = "kms_key_rotation_period_days must be between 90 and 2560."
  }
}

variable "access_log_bucket" {
  description = "Optional: name of an existing bucket that receives S3 server access logs of this bucket. null turns access logging off."
  type        = string
  default     = null
}

variable "access_log_prefix" {
  description = "Key prefix of the access log objects in access_log_bucket (default: s3-access/<bucket_name>/)."
  type        = string
  default     = null
}

variable "permissions_boundary_arn" {
  description = "Optional: ARN of a permissions boundary policy to set on every role this module creates."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every resource that takes them."
  type        = map(string)
  default     = {}
}
