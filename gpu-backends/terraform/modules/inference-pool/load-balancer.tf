data "aws_route53_zone" "edge" {
  name         = var.domain
  private_zone = false
}

resource "aws_acm_certificate" "edge" {
  domain_name       = "*.${var.region}.${var.domain}"
  validation_method = "DNS"
  tags              = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_route53_record" "validation" {
  for_each = { for option in aws_acm_certificate.edge.domain_validation_options : option.domain_name => option }

  zone_id         = data.aws_route53_zone.edge.zone_id
  name            = each.value.resource_record_name
  type            = each.value.resource_record_type
  records         = [each.value.resource_record_value]
  ttl             = 300
  allow_overwrite = true
}

resource "aws_acm_certificate_validation" "edge" {
  certificate_arn         = aws_acm_certificate.edge.arn
  validation_record_fqdns = [for record in aws_route53_record.validation : record.fqdn]
}

resource "aws_lb" "edge" {
  name                       = local.name
  load_balancer_type         = "application"
  internal                   = false
  security_groups            = [aws_security_group.lb.id]
  subnets                    = [for subnet in aws_subnet.public : subnet.id]
  idle_timeout               = var.idle_timeout_seconds
  drop_invalid_header_fields = true
  tags                       = var.tags
}

# HTTPS only: there is no plain HTTP listener. Anything but a pool's /v1 API and /health gets a
# 404 here, so vLLM's unauthenticated routes (/metrics, /tokenize, /version, ...) stay private.
resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.edge.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = aws_acm_certificate_validation.edge.certificate_arn
  tags              = var.tags

  default_action {
    type = "fixed-response"

    fixed_response {
      content_type = "application/json"
      message_body = jsonencode({ error = { message = "Not found", type = "not_found" } })
      status_code  = "404"
    }
  }
}

# vLLM checks the bearer token on /v1 (VLLM_API_KEY); /health stays open for health checks and
# the edge's probes, and answers 200 only once the model is loaded.
resource "aws_lb_listener_rule" "pool" {
  for_each = local.pools

  listener_arn = aws_lb_listener.https.arn
  priority     = 100 + index(sort(keys(local.pools)), each.key)
  tags         = var.tags

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.pool[each.key].arn
  }

  condition {
    host_header {
      values = [each.value.hostname]
    }
  }

  condition {
    path_pattern {
      values = ["/v1/*", "/health"]
    }
  }
}

# The hop from the load balancer to a node is TLS too, with a certificate each node makes at boot;
# the load balancer does not verify target certificates, and the security groups are what limit
# who can open that hop.
resource "aws_lb_target_group" "pool" {
  for_each = local.pools

  name                          = each.value.asg_name
  port                          = local.server_port
  protocol                      = "HTTPS"
  vpc_id                        = aws_vpc.pool.id
  load_balancing_algorithm_type = "least_outstanding_requests"
  deregistration_delay          = var.drain_seconds
  tags                          = var.tags

  health_check {
    protocol            = "HTTPS"
    path                = "/health"
    matcher             = "200"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
  }
}

resource "aws_route53_record" "pool" {
  for_each = local.pools

  zone_id = data.aws_route53_zone.edge.zone_id
  name    = each.value.hostname
  type    = "A"

  alias {
    name                   = aws_lb.edge.dns_name
    zone_id                = aws_lb.edge.zone_id
    evaluate_target_health = true
  }
}
