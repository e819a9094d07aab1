output "gateway" {
  description = "This region's pools for the edge's GATEWAY_CONFIG; register with gpu-backends/register.ts."
  value       = module.pool.gateway
}

output "edge_secrets" {
  description = "The Secrets Manager secret behind each Worker secret the endpoints name."
  value       = module.pool.edge_secrets
}

output "autoscaling_groups" {
  description = "Auto Scaling group of each node group."
  value       = module.pool.autoscaling_groups
}
