variable "domain" {
  type        = string
  description = "Public Route 53 hosted zone the pools answer under: https://<pool>.<region>.<domain>/v1."
}

variable "weights_bucket" {
  type        = string
  description = "S3 bucket in this region's AWS region that holds the model weights."
}
