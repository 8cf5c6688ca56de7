# A checkpointing worker on ECS Fargate Spot: a task can be reclaimed at any moment, and the next
# task resumes the run from its last checkpoint. The task role is the module's worker role for the
# "training" tenant: it reads and writes s3://<bucket>/training/ and cannot delete anything.

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

variable "image" {
  description = "Container image of the worker (it calls s3ckpt.open_store() with S3CKPT_URL and S3CKPT_KEY from its environment)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the tasks (with a route to S3 and KMS: NAT or VPC endpoints)."
  type        = list(string)
}

variable "security_group_ids" {
  description = "Security groups of the tasks (egress to S3 and KMS over HTTPS)."
  type        = list(string)
}

variable "operator_role_arns" {
  description = "Principals that may assume the s3ckpt operator role."
  type        = list(string)
}

variable "worker_count" {
  description = "Number of worker tasks."
  type        = number
  default     = 2
}

module "s3ckpt" {
  source = "../.."

  bucket_name = var.bucket_name
  tenants = {
    training = { trusted_services = ["ecs-tasks.amazonaws.com"] }
  }
  operator_trusted_role_arns = var.operator_role_arns
}

resource "aws_ecs_cluster" "workers" {
  name = "s3ckpt-workers"

  setting {
    name  = "containerInsights"
    value = "enabled"
  }
}

resource "aws_ecs_cluster_capacity_providers" "workers" {
  cluster_name       = aws_ecs_cluster.workers.name
  capacity_providers = ["FARGATE_SPOT", "FARGATE"]

  default_capacity_provider_strategy {
    capacity_provider = "FARGATE_SPOT"
    weight            = 1
  }
}

resource "aws_cloudwatch_log_group" "worker" {
  #checkov:skip=CKV_AWS_158:The worker's log lines carry no checkpoint data (s3ckpt encrypts client-side and redacts secrets before anything is written) and CloudWatch Logs encrypts at rest by default; a logs CMK, with its own key policy for logs.amazonaws.com, is the adopter's choice.
  name              = "/ecs/s3ckpt-worker"
  retention_in_days = 365
}

# Pulls the image and writes logs; separate from the task role, which is the s3ckpt worker role.
data "aws_iam_policy_document" "execution_trust" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "execution" {
  name               = "s3ckpt-worker-execution"
  assume_role_policy = data.aws_iam_policy_document.execution_trust.json
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_ecs_task_definition" "worker" {
  family                   = "s3ckpt-worker"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = 1024
  memory                   = 2048
  task_role_arn            = module.s3ckpt.worker_role_arns["training"]
  execution_role_arn       = aws_iam_role.execution.arn

  container_definitions = jsonencode([
    {
      name                   = "worker"
      image                  = var.image
      essential              = true
      readonlyRootFilesystem = true
      environment = [
        { name = "S3CKPT_URL", value = module.s3ckpt.store_urls["training"] },
        { name = "S3CKPT_KEY", value = module.s3ckpt.store_key },
        { name = "AWS_REGION", value = var.region },
      ]
      mountPoints = [{ sourceVolume = "scratch", containerPath = "/tmp" }]
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = aws_cloudwatch_log_group.worker.name
          awslogs-region        = var.region
          awslogs-stream-prefix = "worker"
        }
      }
    }
  ])

  # Artifacts are staged in /tmp before a commit; the root filesystem stays read-only.
  volume {
    name = "scratch"
  }
}

resource "aws_ecs_service" "worker" {
  name             = "s3ckpt-worker"
  cluster          = aws_ecs_cluster.workers.id
  task_definition  = aws_ecs_task_definition.worker.arn
  desired_count    = var.worker_count
  platform_version = "LATEST"

  capacity_provider_strategy {
    capacity_provider = "FARGATE_SPOT"
    weight            = 1
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = var.security_group_ids
    assign_public_ip = false
  }

  depends_on = [aws_ecs_cluster_capacity_providers.workers]
}

output "store_url" {
  description = "The training tenant's store."
  value       = module.s3ckpt.store_urls["training"]
}

output "operator_role_arn" {
  description = "Assume this role to run s3ckpt's operator commands."
  value       = module.s3ckpt.operator_role_arn
}
