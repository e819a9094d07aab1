# us-east: AWS us-east-1 (N. Virginia); coordinates of Ashburn, Virginia.
provider "aws" {
  region = "us-east-1"
}

module "pool" {
  source = "../../modules/inference-pool"

  region         = "us-east"
  latitude       = 39.04
  longitude      = -77.49
  domain         = var.domain
  weights_bucket = var.weights_bucket
}
