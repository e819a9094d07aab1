variable "region" {
  type        = string
  description = "The edge's name for this region (endpoint ids, host names and the endpoints' `region` field), e.g. \"us-east\"."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,12}$", var.region))
    error_message = "region: a lower-case letter, then 1 to 12 lower-case letters, digits or '-' (AWS names built from it are limited to 32 characters)."
  }
}

variable "latitude" {
  type        = number
  description = "Latitude of the region's data centres; the edge sends each request to the nearest healthy region."
}

variable "longitude" {
  type        = number
  description = "Longitude of the region's data centres."
}

variable "domain" {
  type        = string
  description = "A public Route 53 hosted zone in this account; each pool answers at https://<pool>.<region>.<domain>/v1 with a certificate for *.<region>.<domain>."
}

variable "weights_bucket" {
  type        = string
  description = "S3 bucket in this AWS region that holds the model weights, one prefix per model. Nodes copy them at boot; nothing is downloaded from a public model hub."
}

variable "instance_type" {
  type        = string
  default     = "p5.48xlarge"
  description = "EC2 instance type of every node: p5.48xlarge has 8 NVIDIA H100 80 GB GPUs."
}

variable "gpus_per_node" {
  type        = number
  default     = 8
  description = "GPUs per node of instance_type; a pool runs gpus_per_node / tensor_parallel engines per node."
}

variable "vllm_image" {
  type        = string
  default     = "vllm/vllm-openai:v0.12.0"
  description = "The vLLM OpenAI-compatible server image, pinned by tag. Point it at a copy in your own registry (an ECR pull-through cache) so boots do not depend on Docker Hub."

  validation {
    condition     = can(regex(":v?[0-9][A-Za-z0-9._-]*$", var.vllm_image))
    error_message = "vllm_image must be pinned to a version tag, such as vllm/vllm-openai:v0.12.0 (not latest)."
  }
}

variable "vllm_image_digest" {
  type        = string
  default     = null
  description = "Digest of vllm_image (sha256:...). When set, nodes pull by digest, so a re-pushed tag cannot change what runs."

  validation {
    condition     = var.vllm_image_digest == null || can(regex("^sha256:[0-9a-f]{64}$", var.vllm_image_digest))
    error_message = "vllm_image_digest is sha256: followed by 64 hex digits."
  }
}

variable "ami_id" {
  type        = string
  default     = null
  description = "AMI for the nodes. Unset, the latest AWS Deep Learning Base OSS NVIDIA Driver GPU AMI is read from ami_ssm_parameter at each plan; set it to roll out AMIs deliberately."
}

variable "ami_ssm_parameter" {
  type        = string
  default     = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
  description = "Public SSM parameter naming the AMI when ami_id is unset. The AMI must bring the NVIDIA driver, Docker with the NVIDIA container toolkit, and the AWS CLI."
}

variable "root_volume_gb" {
  type        = number
  default     = 500
  description = "Root EBS volume (gp3) per node: holds the image and the weights, and survives a stop, so warm-pool nodes start without copying them again."
}

variable "vpc_cidr" {
  type        = string
  default     = "10.64.0.0/16"
  description = "Address range of the region's VPC."
}

variable "allowed_ingress_cidrs" {
  type        = list(string)
  default     = ["0.0.0.0/0"]
  description = "Who may open the HTTPS listener. The bearer token is what admits the edge; narrowing this to Cloudflare's published ranges adds a network check."
}

variable "capacity_reservation_id" {
  type        = string
  default     = null
  description = "An On-Demand Capacity Reservation for instance_type to launch into, when GPU capacity has been negotiated for this region."
}

variable "boot_grace_seconds" {
  type        = number
  default     = 1800
  description = "How long a new node may take to copy weights, load the model and pass its health check before it is replaced."
}

variable "drain_seconds" {
  type        = number
  default     = 120
  description = "Deregistration delay: how long the load balancer lets in-flight requests finish on a node leaving service."
}

variable "idle_timeout_seconds" {
  type        = number
  default     = 300
  description = "Load balancer idle timeout; long apply prompts may take a while before their first token."
}

variable "scale_in_busy_fraction" {
  type        = number
  default     = 0.3
  description = "A pool gives back a node after 15 minutes with no request waiting and fewer than this share of its sequence slots busy."
}

variable "scaling" {
  type = map(object({
    min_nodes = number
    max_nodes = number
  }))
  default     = {}
  description = "Per-region sizes, keyed by pool name, that replace the pool's min_nodes and max_nodes."

  validation {
    condition     = alltrue([for size in var.scaling : size.min_nodes >= 1 && size.min_nodes <= size.max_nodes])
    error_message = "scaling: min_nodes is at least 1 and at most max_nodes."
  }
}

variable "tags" {
  type        = map(string)
  default     = {}
  description = "Tags added to every resource that takes them."
}

variable "pools" {
  type = map(object({
    role            = string
    edge_pool       = string
    public_models   = list(string)
    fim             = string
    served_model    = string
    weights_prefix  = string
    tensor_parallel = number
    max_num_seqs    = number
    max_model_len   = number
    min_nodes       = number
    max_nodes       = number
    warm_nodes      = number
    queue_per_node  = number
    weight          = number
    registered      = bool
    extra_args      = list(string)
  }))
  description = <<-EOT
    Node groups, keyed by name (host name and endpoint id). Each is one endpoint of the edge pool
    `edge_pool` (several groups may share one, e.g. a new model next to the old one, split by weight).
    role: tab, apply, chat or embed (sets the server's role flags); public_models: names clients ask the
    edge for; fim: the model's FIM template family (tab only, else null); served_model: the name the
    server answers to; weights_prefix: the model's prefix in weights_bucket; tensor_parallel: GPUs per
    engine; max_num_seqs: sequences one engine runs at once; min/max_nodes: group size; warm_nodes:
    stopped nodes kept with weights on disk; queue_per_node: average waiting requests per node that adds
    a node; weight: share among endpoints of the region; registered: false keeps the group running
    but out of the edge's configuration (to drain it before removal); extra_args: more vLLM flags.
  EOT

  default = {
    tab = {
      role            = "tab"
      edge_pool       = "tab"
      public_models   = ["sextant-tab"]
      fim             = "qwen2.5-coder"
      served_model    = "qwen2.5-coder-7b"
      weights_prefix  = "Qwen2.5-Coder-7B"
      tensor_parallel = 1
      max_num_seqs    = 32
      max_model_len   = 8192
      min_nodes       = 1
      max_nodes       = 4
      warm_nodes      = 1
      queue_per_node  = 8
      weight          = 1
      registered      = true
      extra_args      = []
    }
    apply = {
      role            = "apply"
      edge_pool       = "apply"
      public_models   = ["sextant-apply"]
      fim             = null
      served_model    = "qwen2.5-coder-32b-instruct"
      weights_prefix  = "Qwen2.5-Coder-32B-Instruct"
      tensor_parallel = 2
      max_num_seqs    = 16
      max_model_len   = 32768
      min_nodes       = 1
      max_nodes       = 4
      warm_nodes      = 0
      queue_per_node  = 4
      weight          = 1
      registered      = true
      extra_args      = []
    }
    embed = {
      role            = "embed"
      edge_pool       = "embed"
      public_models   = ["sextant-embed"]
      fim             = null
      served_model    = "qwen3-embedding-8b"
      weights_prefix  = "Qwen3-Embedding-8B"
      tensor_parallel = 1
      max_num_seqs    = 64
      max_model_len   = 8192
      min_nodes       = 1
      max_nodes       = 2
      warm_nodes      = 0
      queue_per_node  = 16
      weight          = 1
      registered      = true
      extra_args      = []
    }
  }

  validation {
    condition     = alltrue([for key, pool in var.pools : can(regex("^[a-z][a-z0-9-]{0,9}$", key))])
    error_message = "Pool names: a lower-case letter, then up to 9 lower-case letters, digits or '-'."
  }

  validation {
    condition     = alltrue([for pool in var.pools : contains(["tab", "apply", "chat", "embed"], pool.role)])
    error_message = "A pool's role is tab, apply, chat or embed."
  }

  validation {
    condition     = alltrue(flatten([for a in var.pools : [for b in var.pools : a.edge_pool != b.edge_pool || (a.role == b.role && a.public_models == b.public_models && a.fim == b.fim)]]))
    error_message = "Node groups that share an edge_pool share its role, public_models and fim."
  }

  validation {
    condition     = alltrue([for pool in var.pools : pool.role != "tab" || pool.fim != null])
    error_message = "A tab pool names its model's FIM template family (fim): vLLM rejects suffix, so the edge renders the prompt."
  }

  validation {
    condition     = alltrue([for pool in var.pools : pool.tensor_parallel >= 1 && var.gpus_per_node % pool.tensor_parallel == 0])
    error_message = "tensor_parallel divides gpus_per_node, so that every GPU of a node serves."
  }

  validation {
    condition     = alltrue([for pool in var.pools : pool.min_nodes >= 1 && pool.min_nodes <= pool.max_nodes])
    error_message = "min_nodes is at least 1 (a pool scales on its own servers' queue, so it cannot grow from zero) and at most max_nodes."
  }

  validation {
    condition     = alltrue([for pool in var.pools : can(regex("^[A-Za-z0-9][A-Za-z0-9._/-]*$", pool.weights_prefix)) && can(regex("^[A-Za-z0-9][A-Za-z0-9._/-]*$", pool.served_model))])
    error_message = "weights_prefix and served_model: letters, digits, '.', '_', '/' and '-'."
  }
}
