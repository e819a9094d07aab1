# Copy to backend.hcl (next to this file) with your own bucket: every region keeps its state
# there, under the key given at `terraform init` (gpu-backends/README.md).
bucket       = "example-terraform-state"
region       = "us-east-1"
encrypt      = true
use_lockfile = true
