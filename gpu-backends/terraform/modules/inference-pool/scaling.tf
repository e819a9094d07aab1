# Scaling follows the servers' own queue, not GPU utilisation: a GPU running a full batch looks
# equally busy whether requests are waiting behind it or not. Every node publishes, every 15 s,
# vLLM's vllm:num_requests_waiting and vllm:num_requests_running summed over its engines, with the
# group's name as dimension (templates/node.sh.tftpl), so Average is the mean per node.

resource "aws_autoscaling_policy" "scale_out" {
  for_each = local.pools

  name                      = "${each.value.asg_name}-queue"
  autoscaling_group_name    = aws_autoscaling_group.pool[each.key].name
  policy_type               = "StepScaling"
  adjustment_type           = "ChangeInCapacity"
  metric_aggregation_type   = "Average"
  estimated_instance_warmup = 120

  # Steps are relative to the alarm's threshold: one node for a queue up to four times the
  # target, two beyond.
  step_adjustment {
    metric_interval_lower_bound = 0
    metric_interval_upper_bound = each.value.queue_per_node * 3
    scaling_adjustment          = 1
  }

  step_adjustment {
    metric_interval_lower_bound = each.value.queue_per_node * 3
    scaling_adjustment          = 2
  }
}

resource "aws_cloudwatch_metric_alarm" "queue" {
  for_each = local.pools

  alarm_name          = "${each.value.asg_name}-queue"
  alarm_description   = "More than ${each.value.queue_per_node} requests waiting per ${each.key} node for 2 minutes: add nodes."
  namespace           = local.metric_namespace
  metric_name         = "RequestsWaiting"
  dimensions          = { AutoScalingGroupName = each.value.asg_name }
  statistic           = "Average"
  period              = 60
  evaluation_periods  = 2
  threshold           = each.value.queue_per_node
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.scale_out[each.key].arn]
  tags                = var.tags
}

# An empty queue alone says nothing about spare capacity, so a node goes only when the queue is
# empty and few sequence slots are busy: load = (running + slots x waiting) / slots stays below
# scale_in_busy_fraction for 15 minutes (any waiting request puts it at 1 or more).
resource "aws_autoscaling_policy" "scale_in" {
  for_each = local.pools

  name                   = "${each.value.asg_name}-idle"
  autoscaling_group_name = aws_autoscaling_group.pool[each.key].name
  policy_type            = "SimpleScaling"
  adjustment_type        = "ChangeInCapacity"
  scaling_adjustment     = -1
  cooldown               = 600
}

resource "aws_cloudwatch_metric_alarm" "idle" {
  for_each = local.pools

  alarm_name          = "${each.value.asg_name}-idle"
  alarm_description   = "No ${each.key} request waiting and under ${var.scale_in_busy_fraction * 100}% of slots busy for 15 minutes: remove a node."
  threshold           = var.scale_in_busy_fraction
  comparison_operator = "LessThanThreshold"
  evaluation_periods  = 15
  datapoints_to_alarm = 15
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_autoscaling_policy.scale_in[each.key].arn]
  tags                = var.tags

  metric_query {
    id          = "load"
    expression  = "(running + ${each.value.max_num_seqs * each.value.engines} * waiting) / ${each.value.max_num_seqs * each.value.engines}"
    label       = "Busy share of sequence slots, 1 or more while requests wait"
    return_data = true
  }

  metric_query {
    id = "running"

    metric {
      namespace   = local.metric_namespace
      metric_name = "RequestsRunning"
      dimensions  = { AutoScalingGroupName = each.value.asg_name }
      stat        = "Average"
      period      = 60
    }
  }

  metric_query {
    id = "waiting"

    metric {
      namespace   = local.metric_namespace
      metric_name = "RequestsWaiting"
      dimensions  = { AutoScalingGroupName = each.value.asg_name }
      stat        = "Maximum"
      period      = 60
    }
  }
}
