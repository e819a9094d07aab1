# Copy to regions/<region>/terraform.tfvars (Terraform reads it there by itself) with your values.
domain         = "gpu.example.com"
weights_bucket = "example-model-weights"
