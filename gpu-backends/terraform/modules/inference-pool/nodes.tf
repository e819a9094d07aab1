data "aws_ssm_parameter" "ami" {
  count = var.ami_id == null ? 1 : 0
  name  = var.ami_ssm_parameter
}

locals {
  ami_id = coalesce(var.ami_id, one(data.aws_ssm_parameter.ami[*].insecure_value))
}

data "aws_ami" "node" {
  owners = ["amazon", "self"]

  filter {
    name   = "image-id"
    values = [local.ami_id]
  }
}

resource "aws_launch_template" "pool" {
  for_each = local.pools

  name                   = each.value.asg_name
  image_id               = local.ami_id
  instance_type          = var.instance_type
  vpc_security_group_ids = [aws_security_group.node.id]
  update_default_version = true
  tags                   = var.tags

  user_data = base64encode(templatefile("${path.module}/templates/node.sh.tftpl", {
    aws_region       = data.aws_region.current.region
    asg_name         = each.value.asg_name
    lifecycle_hook   = local.launch_hook
    pool             = each.key
    weights_uri      = "s3://${var.weights_bucket}/${each.value.weights_prefix}/"
    model_dir        = each.value.weights_prefix
    served_model     = each.value.served_model
    image            = local.image
    secret_arn       = aws_secretsmanager_secret.edge_key[each.key].arn
    port             = local.server_port
    metric_namespace = local.metric_namespace
    tensor_parallel  = each.value.tensor_parallel
    data_parallel    = each.value.engines
    max_num_seqs     = each.value.max_num_seqs
    vllm_args        = join(" ", [for arg in each.value.server_args : "'${replace(arg, "'", "'\\''")}'"])
  }))

  iam_instance_profile {
    arn = aws_iam_instance_profile.node[each.key].arn
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  block_device_mappings {
    device_name = data.aws_ami.node.root_device_name

    ebs {
      volume_size           = var.root_volume_gb
      volume_type           = "gp3"
      iops                  = 16000
      throughput            = 1000
      encrypted             = true
      delete_on_termination = true
    }
  }

  dynamic "capacity_reservation_specification" {
    for_each = var.capacity_reservation_id == null ? [] : [var.capacity_reservation_id]

    content {
      capacity_reservation_target {
        capacity_reservation_id = capacity_reservation_specification.value
      }
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(var.tags, { Name = each.value.asg_name, "sextant:pool" = each.key })
  }
}

resource "aws_autoscaling_group" "pool" {
  for_each = local.pools

  name                      = each.value.asg_name
  min_size                  = each.value.min_nodes
  max_size                  = each.value.max_nodes
  vpc_zone_identifier       = [for zone in local.gpu_zones : aws_subnet.private[zone].id]
  target_group_arns         = [aws_lb_target_group.pool[each.key].arn]
  health_check_type         = "ELB"
  health_check_grace_period = var.boot_grace_seconds
  default_instance_warmup   = 120
  wait_for_capacity_timeout = "0"

  launch_template {
    id      = aws_launch_template.pool[each.key].id
    version = aws_launch_template.pool[each.key].latest_version
  }

  # A node joins only once its weights are on disk and the image is pulled (the boot script
  # completes this hook); until its model is loaded, /health fails and the load balancer keeps it
  # out of rotation.
  initial_lifecycle_hook {
    name                 = local.launch_hook
    lifecycle_transition = "autoscaling:EC2_INSTANCE_LAUNCHING"
    default_result       = "ABANDON"
    heartbeat_timeout    = var.boot_grace_seconds
  }

  # A new launch template version (model, image, AMI) rolls out by launching new nodes first and
  # retiring old ones only once the new are healthy; the target group's deregistration delay lets
  # the old ones finish their streams.
  instance_refresh {
    strategy = "Rolling"

    preferences {
      min_healthy_percentage = 100
      max_healthy_percentage = 200
      instance_warmup        = 120
      skip_matching          = true
    }
  }

  # Stopped nodes with the weights and image already on their volume start in minutes instead of
  # copying everything again. Stopped nodes hold no GPU capacity: only a capacity reservation does.
  dynamic "warm_pool" {
    for_each = each.value.warm_nodes > 0 ? [each.value.warm_nodes] : []

    content {
      pool_state = "Stopped"
      min_size   = warm_pool.value

      instance_reuse_policy {
        reuse_on_scale_in = true
      }
    }
  }

  tag {
    key                 = "Name"
    value               = each.value.asg_name
    propagate_at_launch = true
  }

  dynamic "tag" {
    for_each = var.tags

    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    ignore_changes = [desired_capacity]

    precondition {
      condition     = length(local.gpu_zones) > 0
      error_message = "${var.instance_type} is not offered in any available zone of this AWS region."
    }
  }
}
