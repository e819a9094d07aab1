# eu-west: AWS eu-west-2 (London).
provider "aws" {
  region = "eu-west-2"
}

module "pool" {
  source = "../../modules/inference-pool"

  region         = "eu-west"
  latitude       = 51.51
  longitude      = -0.13
  domain         = var.domain
  weights_bucket = var.weights_bucket
}
