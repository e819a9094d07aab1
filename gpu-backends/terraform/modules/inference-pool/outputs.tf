output "gateway" {
  description = "This region's pools in the shape of the edge's GATEWAY_CONFIG (protocol/gateway.ts); gpu-backends/register.ts merges it into the edge's configuration."
  value       = local.gateway
}

output "edge_secrets" {
  description = "For each Worker secret the endpoints name: the Secrets Manager secret the nodes check the same token against."
  value = {
    for key, pool in local.pools : pool.worker_secret => {
      secret_arn = aws_secretsmanager_secret.edge_key[key].arn
      aws_region = data.aws_region.current.region
    }
  }
}

output "autoscaling_groups" {
  description = "Auto Scaling group of each node group, for scaling by hand."
  value       = { for key, group in aws_autoscaling_group.pool : key => group.name }
}

output "load_balancer_dns_name" {
  description = "The load balancer the pools' host names point at."
  value       = aws_lb.edge.dns_name
}
