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
      retention          - optional: what the scheduled maintenance job (maintenance_enabled) keeps of
                           each run when it prunes: { keep_last = N, keep_within_days = D }. A checkpoint
                           is kept when either keeps it; a run's latest checkpoint, a claim's checkpoint
                           and rollback targets always stay (s3ckpt's prune). Leave both null (the
                           default) to keep every checkpoint; gc still frees what nothing references
                           (deleted runs, aborted commits). No S3 lifecycle rule expires records or packs
                           by age: with deduplication that deletes live data.
  EOT
  type = map(object({
    trusted_services  = optional(list(string), [])
    trusted_role_arns = optional(list(string), [])
    retention = optional(object({
      keep_last        = optional(number)
      keep_within_days = optional(number)
    }), {})
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
    condition = alltrue([
      for t in values(var.tenants) : t.retention.keep_last == null ? true : (t.retention.keep_last >= 1 && floor(t.retention.keep_last) == t.retention.keep_last)
    ])
    error_message = "retention.keep_last is null or a whole number of checkpoints, at least 1."
  }

  validation {
    condition     = alltrue([for t in values(var.tenants) : t.retention.keep_within_days == null ? true : t.retention.keep_within_days > 0])
    error_message = "retention.keep_within_days is null or a number of days greater than 0."
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

# -- scheduled maintenance (maintenance.tf): prune with each tenant's retention, then gc ------------

variable "maintenance_enabled" {
  description = "Create the scheduled maintenance job: per tenant, a Lambda function (s3ckpt.aws_maintenance.handler) that an EventBridge rule invokes to prune with the tenant's retention, then gc. Needs maintenance_package_path or maintenance_package_s3."
  type        = bool
  default     = false
}

variable "maintenance_schedule_expression" {
  description = "When the maintenance job runs: an EventBridge schedule expression, rate(...) or cron(...) in UTC."
  type        = string
  default     = "rate(1 day)"

  validation {
    condition     = can(regex("^(rate|cron)\\(.+\\)$", var.maintenance_schedule_expression))
    error_message = "maintenance_schedule_expression is rate(...) or cron(...), e.g. \"rate(1 day)\" or \"cron(0 3 * * ? *)\"."
  }
}

variable "maintenance_gc_grace_hours" {
  description = "gc deletes an unreferenced pack only when its S3 age (LastModified) exceeds this: longer than the longest commit of any worker (first pack upload to record create), with room for a paused host."
  type        = number
  default     = 24

  validation {
    condition     = var.maintenance_gc_grace_hours >= 1
    error_message = "maintenance_gc_grace_hours must be at least 1."
  }
}

variable "maintenance_dry_run" {
  description = "Run prune and gc as dry runs (they report what they would delete and delete nothing): for a first deployment."
  type        = bool
  default     = false
}

variable "maintenance_package_path" {
  description = "Local path of the maintenance function's zip (s3ckpt and its dependencies, built with pip install --target; see README). Set this or maintenance_package_s3."
  type        = string
  default     = null
}

variable "maintenance_package_s3" {
  description = "The maintenance function's zip as an S3 object: { bucket, key, object_version (optional) }. Set this or maintenance_package_path."
  type = object({
    bucket         = string
    key            = string
    object_version = optional(string)
  })
  default = null
}

variable "maintenance_runtime" {
  description = "Lambda runtime of the maintenance function; the package must be built for it (pip --python-version)."
  type        = string
  default     = "python3.12"

  validation {
    condition     = can(regex("^python3\\.(1[1-9])$", var.maintenance_runtime))
    error_message = "maintenance_runtime is a Lambda Python runtime s3ckpt supports, python3.11 or later."
  }
}

variable "maintenance_timeout_seconds" {
  description = "Timeout of one maintenance run (at most 900, Lambda's limit): prune and gc list and read every record of the tenant."
  type        = number
  default     = 900

  validation {
    condition     = var.maintenance_timeout_seconds >= 30 && var.maintenance_timeout_seconds <= 900
    error_message = "maintenance_timeout_seconds must be between 30 and 900."
  }
}

variable "maintenance_memory_mb" {
  description = "Memory of the maintenance function, in MB (also its CPU share)."
  type        = number
  default     = 1024

  validation {
    condition     = var.maintenance_memory_mb >= 256 && var.maintenance_memory_mb <= 10240
    error_message = "maintenance_memory_mb must be between 256 and 10240."
  }
}

variable "maintenance_log_retention_days" {
  description = "Retention of the maintenance function's CloudWatch log group, in days (a value CloudWatch Logs accepts)."
  type        = number
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.maintenance_log_retention_days)
    error_message = "maintenance_log_retention_days must be a retention CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288 or 3653)."
  }
}
