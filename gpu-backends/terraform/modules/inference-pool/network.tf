data "aws_region" "current" {}

data "aws_partition" "current" {}

data "aws_caller_identity" "current" {}

data "aws_availability_zones" "available" {
  state = "available"

  filter {
    name   = "opt-in-status"
    values = ["opt-in-not-required"]
  }
}

# GPU instance types are offered in some zones of a region only, and the list changes.
data "aws_ec2_instance_type_offerings" "gpu" {
  location_type = "availability-zone"

  filter {
    name   = "instance-type"
    values = [var.instance_type]
  }
}

locals {
  zones       = sort(data.aws_availability_zones.available.names)
  zone_index  = { for i, zone in local.zones : zone => i }
  gpu_zones   = sort(tolist(setintersection(toset(local.zones), toset(data.aws_ec2_instance_type_offerings.gpu.locations))))
  egress_zone = length(local.gpu_zones) > 0 ? local.gpu_zones[0] : local.zones[0]
}

resource "aws_vpc" "pool" {
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = merge(var.tags, { Name = local.name })
}

resource "aws_internet_gateway" "pool" {
  vpc_id = aws_vpc.pool.id
  tags   = merge(var.tags, { Name = local.name })
}

# The load balancer spans every zone (it must include the zones its targets are in).
resource "aws_subnet" "public" {
  for_each = local.zone_index

  vpc_id            = aws_vpc.pool.id
  availability_zone = each.key
  cidr_block        = cidrsubnet(var.vpc_cidr, 8, each.value)
  tags              = merge(var.tags, { Name = "${local.name}-public-${each.key}" })
}

# Nodes have no public address: they are reached through the load balancer only.
resource "aws_subnet" "private" {
  for_each = toset(local.gpu_zones)

  vpc_id            = aws_vpc.pool.id
  availability_zone = each.key
  cidr_block        = cidrsubnet(var.vpc_cidr, 4, local.zone_index[each.key] + 1)
  tags              = merge(var.tags, { Name = "${local.name}-nodes-${each.key}" })
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.pool.id
  tags   = merge(var.tags, { Name = "${local.name}-public" })

  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.pool.id
  }
}

resource "aws_route_table_association" "public" {
  for_each = aws_subnet.public

  subnet_id      = each.value.id
  route_table_id = aws_route_table.public.id
}

# Nodes reach AWS APIs and the image registry through one NAT gateway. It carries no inference
# traffic and little else once a node has booted; weights bypass it through the S3 endpoint.
resource "aws_eip" "egress" {
  domain = "vpc"
  tags   = merge(var.tags, { Name = "${local.name}-egress" })
}

resource "aws_nat_gateway" "egress" {
  allocation_id = aws_eip.egress.id
  subnet_id     = aws_subnet.public[local.egress_zone].id
  tags          = merge(var.tags, { Name = local.name })

  depends_on = [aws_internet_gateway.pool]
}

resource "aws_route_table" "private" {
  vpc_id = aws_vpc.pool.id
  tags   = merge(var.tags, { Name = "${local.name}-nodes" })

  route {
    cidr_block     = "0.0.0.0/0"
    nat_gateway_id = aws_nat_gateway.egress.id
  }
}

resource "aws_route_table_association" "private" {
  for_each = aws_subnet.private

  subnet_id      = each.value.id
  route_table_id = aws_route_table.private.id
}

resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.pool.id
  service_name      = "com.amazonaws.${data.aws_region.current.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.private.id]
  tags              = merge(var.tags, { Name = "${local.name}-s3" })
}
