# ap-northeast: AWS ap-northeast-1 (Tokyo).
provider "aws" {
  region = "ap-northeast-1"
}

module "pool" {
  source = "../../modules/inference-pool"

  region         = "ap-northeast"
  latitude       = 35.68
  longitude      = 139.69
  domain         = var.domain
  weights_bucket = var.weights_bucket
}
