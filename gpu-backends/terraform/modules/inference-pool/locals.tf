locals {
  name             = "sextant-${var.region}"
  server_port      = 8000
  metric_namespace = "Sextant/Inference"
  launch_hook      = "weights-ready"
  image            = var.vllm_image_digest == null ? var.vllm_image : "${replace(var.vllm_image, "/:[^:/]+$/", "")}@${var.vllm_image_digest}"

  # The flags a role needs whatever its model. Tab: the edge's priorities reach the scheduler and
  # the shared prefix of a file's completions is computed once. Apply: most of an edit repeats the
  # file in the prompt, so n-gram prompt lookup drafts tokens with no draft model. Embed: the model
  # runs as a pooling model behind /v1/embeddings.
  role_args = {
    tab   = ["--enable-prefix-caching", "--scheduling-policy", "priority"]
    apply = ["--enable-prefix-caching", "--speculative-config", jsonencode({ method = "ngram", num_speculative_tokens = 8, prompt_lookup_max = 5, prompt_lookup_min = 2 })]
    chat  = ["--enable-prefix-caching"]
    embed = ["--runner", "pooling", "--convert", "embed"]
  }

  pools = {
    for key, pool in var.pools : key => merge(pool, try(var.scaling[key], {}), {
      hostname      = "${key}.${var.region}.${var.domain}"
      asg_name      = "${local.name}-${key}"
      engines       = floor(var.gpus_per_node / pool.tensor_parallel)
      worker_secret = upper(replace("pool_${key}_${var.region}_key", "-", "_"))
      server_args   = concat(local.role_args[pool.role], ["--max-model-len", tostring(pool.max_model_len)], pool.extra_args)
    })
  }

  # One edge endpoint per node group, in the field names of protocol/gateway.ts. Capacity is what
  # the group serves at its largest: the edge never sends an endpoint more than its capacity, so a
  # smaller figure would leave scaled-out nodes idle; below that size the excess waits in vLLM's
  # queue, and that queue is what adds nodes.
  endpoints = {
    for key, pool in local.pools : key => {
      id        = "${var.region}-${key}"
      region    = var.region
      latitude  = var.latitude
      longitude = var.longitude
      url       = "https://${pool.hostname}/v1"
      model     = pool.served_model
      kind      = "vllm"
      capacity  = min(pool.max_num_seqs * pool.engines * pool.max_nodes, 100000)
      weight    = pool.weight
      secret    = pool.worker_secret
      health    = "https://${pool.hostname}/health"
    }
  }

  edge_pools = { for key, pool in local.pools : pool.edge_pool => key... if pool.registered }

  # This region's part of the edge's GATEWAY_CONFIG: the pools keyed by edge pool name.
  gateway = {
    pools = {
      for name, keys in local.edge_pools : name => merge(
        {
          role      = local.pools[keys[0]].role
          models    = local.pools[keys[0]].public_models
          endpoints = [for key in keys : local.endpoints[key]]
        },
        local.pools[keys[0]].fim == null ? {} : { fim = local.pools[keys[0]].fim }
      )
    }
  }
}
