# The bearer token the edge sends to each node group. Terraform creates the secret without a
# value, so the token is never in state or code: the operator sets it with
# `aws secretsmanager put-secret-value` and the same value as the Worker secret
# named in the endpoint's `secret` field. Nodes read it at every server start.
resource "aws_secretsmanager_secret" "edge_key" {
  for_each = local.pools

  name                    = "sextant/${var.region}/${each.key}/edge-key"
  description             = "Bearer token the Sextant edge sends to ${each.value.hostname} (Worker secret ${each.value.worker_secret})."
  recovery_window_in_days = 7
  tags                    = var.tags
}

resource "aws_security_group" "lb" {
  name        = "${local.name}-lb"
  description = "HTTPS from the edge to the ${var.region} inference load balancer"
  vpc_id      = aws_vpc.pool.id
  tags        = merge(var.tags, { Name = "${local.name}-lb" })
}

resource "aws_vpc_security_group_ingress_rule" "lb_https" {
  for_each = toset(var.allowed_ingress_cidrs)

  security_group_id = aws_security_group.lb.id
  description       = "HTTPS listener"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "lb_to_nodes" {
  security_group_id            = aws_security_group.lb.id
  description                  = "Requests and health checks to the servers"
  referenced_security_group_id = aws_security_group.node.id
  ip_protocol                  = "tcp"
  from_port                    = local.server_port
  to_port                      = local.server_port
}

resource "aws_security_group" "node" {
  name        = "${local.name}-node"
  description = "vLLM servers of ${var.region}: reachable from the load balancer only"
  vpc_id      = aws_vpc.pool.id
  tags        = merge(var.tags, { Name = "${local.name}-node" })
}

resource "aws_vpc_security_group_ingress_rule" "node_from_lb" {
  security_group_id            = aws_security_group.node.id
  description                  = "The load balancer"
  referenced_security_group_id = aws_security_group.lb.id
  ip_protocol                  = "tcp"
  from_port                    = local.server_port
  to_port                      = local.server_port
}

resource "aws_vpc_security_group_egress_rule" "node_https" {
  security_group_id = aws_security_group.node.id
  description       = "AWS APIs, the S3 endpoint and the image registry"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

data "aws_iam_policy_document" "node_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

# One role per node group: a node reads its own group's token and nothing else.
resource "aws_iam_role" "node" {
  for_each = local.pools

  name               = each.value.asg_name
  assume_role_policy = data.aws_iam_policy_document.node_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "node" {
  for_each = local.pools

  statement {
    sid       = "ReadWeights"
    actions   = ["s3:GetObject"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.weights_bucket}/${each.value.weights_prefix}/*"]
  }

  statement {
    sid       = "ListWeights"
    actions   = ["s3:ListBucket"]
    resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.weights_bucket}"]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${each.value.weights_prefix}/*"]
    }
  }

  statement {
    sid       = "ReadEdgeKey"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.edge_key[each.key].arn]
  }

  statement {
    sid       = "PublishQueueDepth"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]

    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [local.metric_namespace]
    }
  }

  statement {
    sid       = "FinishLaunch"
    actions   = ["autoscaling:CompleteLifecycleAction"]
    resources = ["arn:${data.aws_partition.current.partition}:autoscaling:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:autoScalingGroup:*:autoScalingGroupName/${each.value.asg_name}"]
  }
}

resource "aws_iam_role_policy" "node" {
  for_each = local.pools

  name   = "node"
  role   = aws_iam_role.node[each.key].id
  policy = data.aws_iam_policy_document.node[each.key].json
}

# Shell access for operators goes through Session Manager; the nodes open no SSH port.
resource "aws_iam_role_policy_attachment" "ssm" {
  for_each = local.pools

  role       = aws_iam_role.node[each.key].name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "node" {
  for_each = local.pools

  name = each.value.asg_name
  role = aws_iam_role.node[each.key].name
  tags = var.tags
}
