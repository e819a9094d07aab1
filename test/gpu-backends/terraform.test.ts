import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { GatewayConfig } from "../../protocol/gateway.js";
import { mergeRegion, readTerraformOutput, type ConfigFile } from "../../gpu-backends/registration.js";
import { Evaluator, type Value } from "./hcl-evaluator.js";
import { TfModule, listFiles, parseHcl } from "./hcl.js";
import {
  httpsOnly,
  noAccountIds,
  noPublicHub,
  noSecrets,
  pinnedVersions,
  queueScaling,
  regionRoots,
  typedVariables,
} from "./rules.js";

const TERRAFORM = "gpu-backends/terraform";
const MODULE = join(TERRAFORM, "modules/inference-pool");
const REGIONS_DIR = join(TERRAFORM, "regions");
const REGIONS = readdirSync(REGIONS_DIR).sort();

/** Where each AWS region used is, to check a root's coordinates against its provider's region. */
const AWS_LOCATIONS: Record<string, [number, number]> = {
  "us-east-1": [39.04, -77.49], // Ashburn, Virginia
  "us-west-2": [45.84, -119.7], // Boardman, Oregon
  "eu-west-2": [51.51, -0.13], // London
  "ap-northeast-1": [35.68, 139.69], // Tokyo
};

/** The root variables every region needs, from the example an operator copies. */
let rootInputs: Record<string, Value>;
let module: TfModule;
let roots: TfModule[];

async function region(name: string): Promise<{ root: Evaluator; pool: Evaluator }> {
  const root = new Evaluator(await TfModule.load(join(REGIONS_DIR, name)), { inputs: rootInputs });
  return { root, pool: await root.child("pool") };
}

/** The module with one file's text changed, evaluated with a region's inputs. */
async function altered(file: string, from: string | RegExp, to: string, inputs: Record<string, Value>) {
  const text = readFileSync(join(MODULE, file), "utf8");
  const changed = text.replace(from, to);
  expect(changed, `${from} is in ${file}`).not.toBe(text);
  return new Evaluator(await TfModule.load(MODULE, { [file]: changed }), { inputs });
}

const snippet = (text: string, path = "snippet.tf") => parseHcl(path, text);
const km = ([a, b]: [number, number], [c, d]: [number, number]) => {
  const rad = Math.PI / 180;
  const h =
    Math.sin(((c - a) * rad) / 2) ** 2 + Math.cos(a * rad) * Math.cos(c * rad) * Math.sin(((d - b) * rad) / 2) ** 2;
  return 2 * 6371 * Math.asin(Math.sqrt(h));
};

beforeAll(async () => {
  rootInputs = (await parseHcl("example.tfvars", readFileSync(join(TERRAFORM, "example.tfvars"), "utf8"))).body;
  module = await TfModule.load(MODULE);
  roots = await Promise.all(REGIONS.map((r) => TfModule.load(join(REGIONS_DIR, r))));
});

describe("HCL parsing", () => {
  it("parses every .tf, .tfvars and .hcl file under gpu-backends with HashiCorp's parser", async () => {
    const files = listFiles("gpu-backends", [".tf", ".tfvars", ".hcl"]);
    expect(files.length).toBeGreaterThanOrEqual(8 + 4 * 4);
    for (const file of files) {
      const text = readFileSync(file, "utf8");
      await expect(parseHcl(file, text)).resolves.toEqual({ path: file, text, body: expect.any(Object) });
    }
  });

  it("reports a syntax error with its file and line", async () => {
    await expect(snippet('resource "aws_lb" "edge" {\n  name = \n}\n', "broken.tf")).rejects.toThrow(/broken\.tf:2/);
  });
});

describe("lint rules hold for gpu-backends/terraform", () => {
  const allTf = () => [module, ...roots].flatMap((m) => m.files);
  const allText = () =>
    listFiles(TERRAFORM, [".tf", ".tftpl", ".tfvars", ".hcl", ".sh"]).map((path) => ({
      path,
      text: readFileSync(path, "utf8"),
    }));

  it("pins Terraform and every provider", () => expect(pinnedVersions([module, ...roots])).toEqual([]));
  it("types and describes every variable", () => expect(typedVariables(allTf())).toEqual([]));
  it("hard-codes no account id", () => expect(noAccountIds(allText())).toEqual([]));
  it("holds no secret in code or state", async () => {
    const files = listFiles(TERRAFORM, [".tf", ".tfvars", ".hcl", ".tftpl"]);
    expect(files.some((f) => f.endsWith(".tftpl"))).toBe(true);
    const parsed = await Promise.all(
      files.map((path) => {
        const text = readFileSync(path, "utf8");
        return path.endsWith(".tftpl") ? { path, text } : parseHcl(path, text);
      }),
    );
    expect(await noSecrets(parsed)).toEqual([]);
  });
  it("downloads nothing from a public model hub", () => expect(noPublicHub(allText())).toEqual([]));
  it("serves HTTPS only, with health checks that gate rotation", () => expect(httpsOnly(module)).toEqual([]));
  it("scales on the servers' queue", () => expect(queueScaling(module)).toEqual([]));
  it("has the four regions, each a small root on the shared module", () => {
    expect(REGIONS).toEqual(expect.arrayContaining(["us-east", "us-west", "eu-west", "ap-northeast"]));
    expect(regionRoots(roots, MODULE)).toEqual([]);
    for (const root of roots) {
      const main = root.files.find((f) => f.path.endsWith("main.tf"))!;
      expect(main.text.split("\n").filter((l) => l.trim() && !l.trim().startsWith("#")).length).toBeLessThanOrEqual(15);
    }
  });
});

describe("each lint rule rejects a bad snippet", () => {
  it("pinnedVersions: an unpinned provider, a missing required_version, an unpinned registry module", async () => {
    const unpinned = await TfModule.load("virtual/unpinned", {
      "main.tf": `terraform {
  required_providers {
    aws = { source = "hashicorp/aws", version = ">= 5.0" }
  }
}
resource "random_id" "x" { byte_length = 4 }
module "vpc" { source = "terraform-aws-modules/vpc/aws" }
`,
    });
    expect(pinnedVersions([unpinned])).toEqual([
      expect.stringContaining("required_version must be exact or ~>"),
      expect.stringContaining("provider random is used but not in required_providers"),
      expect.stringContaining("module vpc from terraform-aws-modules/vpc/aws must pin"),
    ]);
    const loose = await TfModule.load("virtual/loose", {
      "main.tf": `terraform {
  required_version = ">= 1.0"
  required_providers {
    aws = { source = "hashicorp/aws", version = ">= 5.0" }
  }
}
provider "aws" {}
`,
    });
    expect(pinnedVersions([loose])).toEqual([
      expect.stringContaining("required_version"),
      expect.stringContaining("provider aws version must be exact or ~>"),
    ]);
  });

  it("typedVariables: a variable without type or description", async () => {
    const file = await snippet('variable "size" {\n  default = 1\n}\nvariable "name" {\n  type = string\n}\n');
    expect(typedVariables([file])).toEqual([
      "snippet.tf: variable name has no description",
      "snippet.tf: variable size has no type",
      "snippet.tf: variable size has no description",
    ]);
  });

  it("noAccountIds: an ARN with an account id", () => {
    const text = 'resource "x" "y" {\n  role = "arn:aws:iam::123456789012:role/node"\n}\n';
    expect(noAccountIds([{ path: "snippet.tf", text }])).toEqual([
      expect.stringContaining("snippet.tf:2: 123456789012"),
    ]);
  });

  it("noSecrets: a key in code, a literal token attribute, a secret value in state", async () => {
    const file = await snippet(`resource "aws_secretsmanager_secret_version" "key" {
  secret_id     = aws_secretsmanager_secret.key.id
  secret_string = "s3cr3t-Tok3n-9f8e7d6c5b4a39281706"
}
locals {
  api_key = "sk-live-4f9a2b7c1d8e3f6a0b5c9d2e7f1a4b8c"
}
`);
    const problems = await noSecrets([file]);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringContaining("possible secret"),
        expect.stringContaining("secret_string holds a literal secret"),
        expect.stringContaining("api_key holds a literal secret"),
        expect.stringContaining("would store a secret's value in Terraform state"),
      ]),
    );
  });

  it("noPublicHub: a hub download, a hub token, a server not forced offline", () => {
    const text =
      "huggingface-cli download Qwen/Qwen2.5-Coder-7B\nexport HF_TOKEN=x\ndocker run vllm/vllm-openai:v0.12.0\n";
    expect(noPublicHub([{ path: "boot.sh", text }])).toEqual([
      expect.stringContaining("huggingface-cli"),
      expect.stringContaining("HF_TOKEN"),
      expect.stringContaining("without HF_HUB_OFFLINE=1"),
    ]);
  });

  it("httpsOnly: a plain HTTP listener, an open port, a target group without /health", async () => {
    const bad = await TfModule.load("virtual/http", {
      "main.tf": `resource "aws_lb_listener" "http" {
  port     = 80
  protocol = "HTTP"
}
resource "aws_vpc_security_group_ingress_rule" "ssh" {
  cidr_ipv4 = "0.0.0.0/0"
  from_port = 22
  to_port   = 22
}
resource "aws_lb_target_group" "pool" {
  health_check {
    path = "/"
  }
}
resource "aws_autoscaling_group" "pool" {
  health_check_type = "EC2"
}
`,
    });
    expect(httpsOnly(bad)).toEqual([
      expect.stringContaining("listener http is not HTTPS"),
      expect.stringContaining("ingress ssh opens a port other than 443"),
      expect.stringContaining("target group pool does not check /health"),
      expect.stringContaining("autoscaling group pool ignores"),
    ]);
  });

  it("queueScaling: scaling on GPU utilisation", async () => {
    const bad = await TfModule.load("virtual/gpu", {
      "main.tf": `resource "aws_autoscaling_policy" "out" {
  policy_type = "StepScaling"
}
resource "aws_cloudwatch_metric_alarm" "busy" {
  metric_name   = "GPUUtilization"
  alarm_actions = [aws_autoscaling_policy.out.arn]
}
`,
    });
    expect(queueScaling(bad)).toEqual([
      expect.stringContaining("alarm busy scales on GPUUtilization"),
      expect.stringContaining("no alarm adds nodes on RequestsWaiting"),
    ]);
  });

  it("regionRoots: a root with its own resources, a copied module, a missing provider", async () => {
    const good = roots[0]!;
    const bad = await TfModule.load("virtual/regions/bad", {
      "main.tf": `module "pool" {
  source = "./inference-pool"
}
resource "aws_instance" "gpu" {
  instance_type = "p5.48xlarge"
}
`,
    });
    const problems = regionRoots([good, bad], MODULE);
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringContaining("comes from ./inference-pool, not the shared"),
        expect.stringContaining("declares resource aws_instance.gpu"),
        expect.stringContaining("needs exactly one aws provider"),
        expect.stringContaining("terraform.tf is in 1 of 2 region roots"),
      ]),
    );
  });
});

describe("outputs match the edge's configuration schema", () => {
  it.each(REGIONS)("%s: the gateway output is a valid GATEWAY_CONFIG with https /v1 endpoints", async (name) => {
    const { root } = await region(name);
    const gateway = await root.output("gateway");
    const parsed = GatewayConfig.safeParse(gateway);
    expect(parsed.success, JSON.stringify(parsed.error?.issues)).toBe(true);
    const endpoints = Object.values(parsed.data!.pools).flatMap((p) => p.endpoints);
    expect(endpoints.map((e) => e.id).sort()).toEqual([`${name}-apply`, `${name}-embed`, `${name}-tab`]);
    for (const e of endpoints) {
      expect(e.url).toMatch(new RegExp(`^https://[a-z]+\\.${name}\\.gpu\\.example\\.com/v1$`));
      expect(e.region).toBe(name);
      expect(e.secret).toMatch(new RegExp(`^POOL_[A-Z]+_${name.toUpperCase().replace("-", "_")}_KEY$`));
    }
    expect(parsed.data!.pools.tab?.fim).toBe("qwen2.5-coder");
  });

  it.each(REGIONS)("%s: the coordinates are those of the root's AWS region", async (name) => {
    const { root, pool } = await region(name);
    const awsRegion = root.module.block("provider", "aws")!.region as string;
    expect(AWS_LOCATIONS[awsRegion], `a location for ${awsRegion}`).toEqual([expect.any(Number), expect.any(Number)]);
    const at: [number, number] = [
      (await pool.variable("latitude")) as number,
      (await pool.variable("longitude")) as number,
    ];
    expect(km(at, AWS_LOCATIONS[awsRegion]!)).toBeLessThan(100);
  });

  it("gives each endpoint the capacity of its group at full size: slots per engine x engines x nodes", async () => {
    const { root } = await region("us-east");
    const gateway = GatewayConfig.parse(await root.output("gateway"));
    // tab: 32 sequences x 8 engines (TP 1) x 4 nodes; apply: 16 x 4 (TP 2) x 4; embed: 64 x 8 x 2.
    expect(Object.fromEntries(Object.entries(gateway.pools).map(([k, p]) => [k, p.endpoints[0]!.capacity]))).toEqual({
      tab: 1024,
      apply: 256,
      embed: 1024,
    });
    const { pool } = await region("us-east");
    const small = new Evaluator(pool.module, {
      inputs: { ...pool.options.inputs, scaling: { tab: { min_nodes: 1, max_nodes: 2 } } },
    });
    const tab = GatewayConfig.parse(await small.output("gateway")).pools.tab!;
    expect(tab.endpoints[0]!.capacity).toBe(512);
  });

  it("merges all regions into one configuration the edge accepts", async () => {
    let config: ConfigFile = { pools: {} };
    for (const name of REGIONS) {
      const { root } = await region(name);
      config = mergeRegion(config, readTerraformOutput({ gateway: { value: await root.output("gateway") } }));
    }
    const parsed = GatewayConfig.parse(config);
    expect(parsed.pools.tab!.endpoints.map((e) => e.region).sort()).toEqual([...REGIONS].sort());
  });

  it("matches the checked-in `terraform output -json` fixture, so the fixture cannot drift", async () => {
    const fixture = JSON.parse(readFileSync("test/gpu-backends/fixtures/us-east.tfoutput.json", "utf8"));
    const { root } = await region("us-east");
    expect(fixture.gateway.value).toEqual(await root.output("gateway"));
    const known = new Evaluator(root.module, { inputs: rootInputs, allowUnknown: true });
    expect(Object.keys(fixture.edge_secrets.value).sort()).toEqual(
      Object.keys((await known.output("edge_secrets")) as object).sort(),
    );
  });

  it("fails when the module's output leaves the schema: an unknown field, a missing FIM template", async () => {
    const { pool } = await region("us-east");
    const inputs = pool.options.inputs!;
    const extra = await altered("locals.tf", "      health    =", "      healthz   =", inputs);
    expect(GatewayConfig.safeParse(await extra.output("gateway")).success).toBe(false);
    const noFim = await altered("locals.tf", "{ fim = local.pools[keys[0]].fim }", "{}", inputs);
    expect(GatewayConfig.safeParse(await noFim.output("gateway")).success).toBe(false);
    const http = await altered("locals.tf", 'url       = "https://', 'url       = "ftp://', inputs);
    expect(GatewayConfig.safeParse(await http.output("gateway")).success).toBe(false);
  });

  it("refuses an output that needs a value known only after apply", async () => {
    const { pool } = await region("us-east");
    const dns = await altered("locals.tf", '"https://${pool.hostname}/v1"', '"https://${aws_lb.edge.dns_name}/v1"', {
      ...pool.options.inputs,
    });
    await expect(dns.output("gateway")).rejects.toThrow(/aws_lb\.edge\.dns_name is known only after apply/);
  });
});

describe("the inference-pool module", () => {
  it.each(REGIONS)("%s: every variable validation holds for the region's inputs", async (name) => {
    const { pool } = await region(name);
    expect(await pool.failedValidations()).toEqual([]);
  });

  it("rejects a tab pool without a FIM family, a pool that could scale to zero, a shared edge pool that disagrees", async () => {
    const { pool } = await region("us-east");
    const pools = (await pool.variable("pools")) as Record<string, Record<string, Value>>;
    const check = (changed: Record<string, unknown>) =>
      new Evaluator(pool.module, { inputs: { ...pool.options.inputs, pools: changed as Value } }).failedValidations();
    expect(await check({ ...pools, tab: { ...pools.tab, fim: null } })).toEqual([
      expect.stringContaining("FIM template family"),
    ]);
    expect(await check({ ...pools, embed: { ...pools.embed, min_nodes: 0 } })).toEqual([
      expect.stringContaining("cannot grow from zero"),
    ]);
    expect(await check({ ...pools, "tab-next": { ...pools.tab, fim: "starcoder2" } })).toEqual([
      expect.stringContaining("share its role, public_models and fim"),
    ]);
  });

  it("lets a new model share an edge pool by weight, and an old group leave the edge before it goes", async () => {
    const { pool } = await region("eu-west");
    const pools = (await pool.variable("pools")) as Record<string, Record<string, Value>>;
    const next = {
      ...pools.tab,
      served_model: "qwen2.5-coder-7b-v2",
      weights_prefix: "Qwen2.5-Coder-7B-v2",
      weight: 0.1,
    };
    const both = new Evaluator(pool.module, {
      inputs: { ...pool.options.inputs, pools: { ...pools, "tab-next": next } as Value },
    });
    const tab = GatewayConfig.parse(await both.output("gateway")).pools.tab!;
    expect(tab.endpoints.map((e) => [e.id, e.model, e.weight])).toEqual([
      ["eu-west-tab", "qwen2.5-coder-7b", 1],
      ["eu-west-tab-next", "qwen2.5-coder-7b-v2", 0.1],
    ]);
    const drained = new Evaluator(pool.module, {
      inputs: {
        ...pool.options.inputs,
        pools: { ...pools, tab: { ...pools.tab, registered: false }, "tab-next": next } as Value,
      },
    });
    const after = GatewayConfig.parse(await drained.output("gateway")).pools.tab!;
    expect(after.endpoints.map((e) => e.id)).toEqual(["eu-west-tab-next"]);
  });

  async function userData(role: string, inputs: Record<string, Value> = {}): Promise<string> {
    const { pool } = await region("us-east");
    const nodes = new Evaluator(pool.module, { inputs: { ...pool.options.inputs, ...inputs }, allowUnknown: true });
    const encoded = await nodes.resourceAttribute("aws_launch_template", "pool", "user_data", role);
    return Buffer.from(String(encoded), "base64").toString("utf8");
  }

  it("boots each role's server with its role flags, a pinned image and weights from the bucket only", async () => {
    const tab = await userData("tab");
    expect(tab).toContain(
      "VLLM_ARGS=('--enable-prefix-caching' '--scheduling-policy' 'priority' '--max-model-len' '8192')",
    );
    expect(tab).toContain("DATA_PARALLEL=8");
    const apply = await userData("apply");
    expect(apply).toContain(
      `'--speculative-config' '{"method":"ngram","num_speculative_tokens":8,"prompt_lookup_max":5,"prompt_lookup_min":2}'`,
    );
    expect(apply).toMatch(/TENSOR_PARALLEL=2\nDATA_PARALLEL=4\n/);
    expect(await userData("embed")).toContain("VLLM_ARGS=('--runner' 'pooling' '--convert' 'embed'");
    for (const script of [tab, apply]) {
      expect(script).toContain("IMAGE=vllm/vllm-openai:v0.12.0\n");
      expect(script).toMatch(/WEIGHTS_URI=s3:\/\/example-model-weights\/Qwen2\.5-Coder-[^/]+\/\n/);
      expect(script).toContain("-e HF_HUB_OFFLINE=1");
      expect(script).toContain("--env-file /run/sextant/vllm.env");
      expect(script).toContain('"${VLLM_ARGS[@]}"');
      expect(noPublicHub([{ path: "user-data", text: script }])).toEqual([]);
    }
  });

  it("pulls by digest when one is given", async () => {
    const digest = `sha256:${"ab".repeat(32)}`;
    expect(await userData("tab", { vllm_image_digest: digest })).toContain(`IMAGE=vllm/vllm-openai@${digest}\n`);
  });
});
