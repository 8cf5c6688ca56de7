terraform {
  # optional() object attributes with defaults (1.3), the `terraform_data` and validation features
  # used here (1.5).
  required_version = ">= 1.5"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 6.x: `data.aws_region.current.region` (the `name` attribute is deprecated there).
      version = ">= 6.0, < 7.0"
    }
  }
}
