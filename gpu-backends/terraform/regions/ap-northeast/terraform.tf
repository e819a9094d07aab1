terraform {
  required_version = "~> 1.10"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.0"
    }
  }

  # Bucket and region come from ../../backend.hcl, the key from the init command
  # (gpu-backends/README.md): one state per region.
  backend "s3" {}
}
