# us-west: AWS has no region in Phoenix, so this root uses us-west-2 (Oregon); plan stops early if
# p5.48xlarge is not offered there. Coordinates of Boardman, Oregon, near the region's data centres.
provider "aws" {
  region = "us-west-2"
}

module "pool" {
  source = "../../modules/inference-pool"

  region         = "us-west"
  latitude       = 45.84
  longitude      = -119.7
  domain         = var.domain
  weights_bucket = var.weights_bucket
}
