# An agent harness in AWS Lambda: an invocation that times out or crashes is invoked again and
# resumes its run (store.resume(...)) without repeating a completed step or a confirmed effect.
# The function's role is the module's worker role for the "agents" tenant.

terraform {
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0, < 7.0"
    }
  }
}

provider "aws" {
  region = var.region
}

variable "region" {
  description = "AWS region."
  type        = string
  default     = "us-east-1"
}

variable "bucket_name" {
  description = "Name of the checkpoint bucket to create."
  type        = string
}

variable "package_path" {
  description = "Zip of the function: its code and s3ckpt (pip install --target)."
  type        = string
}

variable "handler" {
  description = "Entry point, module.function."
  type        = string
  default     = "agent.handler"
}

variable "operator_role_arns" {
  description = "Principals that may assume the s3ckpt operator role."
  type        = list(string)
}

variable "max_concurrency" {
  description = "Reserved concurrency of the function."
  type        = number
  default     = 10
}

module "s3ckpt" {
  source = "../.."

  bucket_name = var.bucket_name
  tenants = {
    agents = { trusted_services = ["lambda.amazonaws.com"] }
  }
  operator_trusted_role_arns = var.operator_role_arns
}

# What Lambda itself needs besides s3ckpt: logs and traces.
resource "aws_iam_role_policy_attachment" "logs" {
  role       = module.s3ckpt.worker_role_names["agents"]
  policy_arn = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
}

resource "aws_iam_role_policy_attachment" "xray" {
  role       = module.s3ckpt.worker_role_names["agents"]
  policy_arn = "arn:aws:iam::aws:policy/AWSXRayDaemonWriteAccess"
}

resource "aws_lambda_function" "agent" {
  #checkov:skip=CKV_AWS_117:The function reaches only S3 and KMS, over TLS on their public endpoints (the bucket policy denies plain HTTP); running it in a VPC needs subnets and S3/KMS endpoints that belong to the adopter's network design.
  #checkov:skip=CKV_AWS_116:The function is invoked synchronously by the harness that owns the run, which retries; a retried invocation resumes from the last checkpoint. There is no asynchronous event to dead-letter.
  #checkov:skip=CKV_AWS_173:The environment holds no secret: the store URL and the ARN of the KMS key (key material never leaves KMS). Lambda encrypts environment variables at rest with an AWS managed key by default.
  #checkov:skip=CKV_AWS_272:Code signing needs a signing profile and a signed-artifact pipeline that the adopter owns; the example deploys a local zip.
  function_name                  = "s3ckpt-agent"
  role                           = module.s3ckpt.worker_role_arns["agents"]
  runtime                        = "python3.12"
  handler                        = var.handler
  filename                       = var.package_path
  source_code_hash               = filebase64sha256(var.package_path)
  timeout                        = 900
  memory_size                    = 1024
  reserved_concurrent_executions = var.max_concurrency

  environment {
    variables = {
      S3CKPT_URL = module.s3ckpt.store_urls["agents"]
      S3CKPT_KEY = module.s3ckpt.store_key
    }
  }

  tracing_config {
    mode = "Active"
  }
}

output "function_name" {
  description = "The agent function."
  value       = aws_lambda_function.agent.function_name
}

output "store_url" {
  description = "The agents tenant's store."
  value       = module.s3ckpt.store_urls["agents"]
}
