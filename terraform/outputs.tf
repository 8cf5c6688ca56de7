output "bucket_name" {
  description = "Name of the checkpoint bucket."
  value       = aws_s3_bucket.this.id
}

output "bucket_arn" {
  description = "ARN of the checkpoint bucket."
  value       = aws_s3_bucket.this.arn
}

output "kms_key_arn" {
  description = "ARN of the customer-managed key (bucket SSE-KMS, and s3ckpt kms: key files)."
  value       = aws_kms_key.this.arn
}

output "kms_key_alias" {
  description = "Alias of the KMS key."
  value       = aws_kms_alias.this.name
}

output "store_key" {
  description = "The key= argument of s3ckpt.open_store (or S3CKPT_KEY) for a store whose master key is wrapped by the module's KMS key."
  value       = "kms:${aws_kms_key.this.arn}"
}

output "store_urls" {
  description = "Store URL of each tenant (S3CKPT_URL), by tenant."
  value       = { for name, t in local.tenants : name => "s3://${aws_s3_bucket.this.id}/${t.prefix}" }
}

output "worker_role_arns" {
  description = "ARN of each tenant's worker role, by tenant."
  value       = { for name, role in aws_iam_role.worker : name => role.arn }
}

output "worker_role_names" {
  description = "Name of each tenant's worker role, by tenant (to attach what the compute needs besides s3ckpt, e.g. logs)."
  value       = { for name, role in aws_iam_role.worker : name => role.name }
}

output "operator_role_arn" {
  description = "ARN of the operator role."
  value       = aws_iam_role.operator.arn
}

output "operator_role_name" {
  description = "Name of the operator role."
  value       = aws_iam_role.operator.name
}

output "maintenance_function_names" {
  description = "Name of each tenant's scheduled maintenance function, by tenant (empty unless maintenance_enabled); invoke one with {\"dry_run\": true} to see what it would delete."
  value       = { for name, fn in aws_lambda_function.maintenance : name => fn.function_name }
}

output "maintenance_role_arns" {
  description = "ARN of each tenant's maintenance role, by tenant (empty unless maintenance_enabled)."
  value       = { for name, role in aws_iam_role.maintenance : name => role.arn }
}
