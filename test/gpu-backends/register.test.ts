import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GatewayConfig } from "../../protocol/gateway.js";
import {
  RegistrationError,
  mergeRegion,
  readConfigFile,
  readTerraformOutput,
  removeRegion,
  secretCommands,
  type ConfigFile,
} from "../../gpu-backends/registration.js";

const FIXTURE = "test/gpu-backends/fixtures/us-east.tfoutput.json";
const output = async () => JSON.parse(await readFile(FIXTURE, "utf8"));

/** The same region's output moved to London, as the eu-west root would give it. */
async function euWest() {
  const text = (await readFile(FIXTURE, "utf8"))
    .replaceAll("us-east-1", "eu-west-2")
    .replaceAll("US_EAST", "EU_WEST")
    .replaceAll("us-east", "eu-west")
    .replace(/"latitude": 39\.04/g, '"latitude": 51.51')
    .replace(/"longitude": -77\.49/g, '"longitude": -0.13');
  return readTerraformOutput(JSON.parse(text));
}

/** An operator's configuration before registration: a hosted chat pool and a tuned tab pool. */
const EXISTING: ConfigFile = {
  pools: {
    tab: {
      role: "tab",
      models: ["sextant-tab"],
      fim: "qwen2.5-coder",
      hedgeAfterMs: 150,
      timeouts: { connectMs: 500, firstByteMs: 1000 },
      endpoints: [
        {
          id: "us-east-tab",
          region: "us-east",
          latitude: 39.04,
          longitude: -77.49,
          kind: "vllm",
          url: "https://old.example.com/v1",
          capacity: 8,
        },
      ],
    },
    chat: {
      role: "chat",
      models: ["gpt-4.1"],
      endpoints: [
        {
          id: "openai",
          region: "us-east",
          latitude: 39.04,
          longitude: -77.49,
          kind: "openai",
          url: "https://api.openai.com/v1",
          capacity: 500,
          secret: "OPENAI_API_KEY",
        },
      ],
    },
  },
};

describe("reading a region's terraform output", () => {
  it("takes `terraform output -json` and the gateway output alone", async () => {
    const full = readTerraformOutput(await output());
    expect(Object.keys(full.pools).sort()).toEqual(["apply", "embed", "tab"]);
    expect(full.pools.tab).toMatchObject({ role: "tab", fim: "qwen2.5-coder", models: ["sextant-tab"] });
    expect(full.secrets.POOL_TAB_US_EAST_KEY?.aws_region).toBe("us-east-1");
    const gatewayOnly = readTerraformOutput((await output()).gateway.value);
    expect(gatewayOnly.pools).toEqual(full.pools);
    expect(gatewayOnly.secrets).toEqual({});
  });

  it("refuses what is not a region's output, or does not fit the edge", async () => {
    expect(() => readTerraformOutput({ load_balancer_dns_name: { value: "x" } })).toThrow(RegistrationError);
    const doc = await output();
    doc.gateway.value.pools.tab.endpoints[0].url = "tab.us-east.gpu.example.com";
    expect(() => readTerraformOutput(doc)).toThrow(/pools\.tab\.endpoints\.0\.url/);
    const strays = await output();
    strays.gateway.value.pools.apply.endpoints[0].healthcheck = "/health";
    expect(() => readTerraformOutput(strays)).toThrow(/does not fit the edge/);
    const orphan = await output();
    delete orphan.edge_secrets.value.POOL_EMBED_US_EAST_KEY;
    expect(() => readTerraformOutput(orphan)).toThrow(/POOL_EMBED_US_EAST_KEY, which edge_secrets lacks/);
  });
});

describe("merging into the edge's configuration", () => {
  it("creates the pools in an empty configuration, valid for the edge", async () => {
    const config = mergeRegion(readConfigFile(undefined), readTerraformOutput(await output()));
    expect(GatewayConfig.safeParse(config).success).toBe(true);
    expect(config.pools.apply!.endpoints.map((e) => e.id)).toEqual(["us-east-apply"]);
  });

  it("replaces an endpoint in place, keeps the operator's settings and other endpoints, and is idempotent", async () => {
    const region = readTerraformOutput(await output());
    const once = mergeRegion(EXISTING, region);
    expect(once.pools.tab).toMatchObject({ hedgeAfterMs: 150, timeouts: { connectMs: 500, firstByteMs: 1000 } });
    expect(once.pools.tab!.endpoints).toHaveLength(1);
    expect(once.pools.tab!.endpoints[0]).toMatchObject({
      url: "https://tab.us-east.gpu.example.com/v1",
      capacity: 1024,
    });
    expect(once.pools.chat).toEqual(EXISTING.pools.chat);
    expect(mergeRegion(once, region)).toEqual(once);
    expect(GatewayConfig.safeParse(once).success).toBe(true);
  });

  it("adds a second region's endpoints to the same pools", async () => {
    const both = mergeRegion(mergeRegion(EXISTING, readTerraformOutput(await output())), await euWest());
    expect(both.pools.tab!.endpoints.map((e) => e.id)).toEqual(["us-east-tab", "eu-west-tab"]);
    expect(GatewayConfig.parse(both).pools.embed!.endpoints.map((e) => e.region)).toEqual(["us-east", "eu-west"]);
  });

  it("drops the endpoints a region no longer lists, and only those", async () => {
    const registered = mergeRegion(EXISTING, readTerraformOutput(await output()));
    const doc = await output();
    delete doc.gateway.value.pools.embed;
    delete doc.edge_secrets.value.POOL_EMBED_US_EAST_KEY;
    doc.gateway.value.pools.tab.endpoints.push({
      ...doc.gateway.value.pools.tab.endpoints[0],
      id: "us-east-tab-next",
      url: "https://tab-next.us-east.gpu.example.com/v1",
      weight: 0.1,
    });
    const updated = mergeRegion(registered, readTerraformOutput(doc));
    expect(updated.pools.embed).toBeUndefined();
    expect(updated.pools.tab!.endpoints.map((e) => e.id)).toEqual(["us-east-tab", "us-east-tab-next"]);
    expect(updated.pools.chat).toEqual(EXISTING.pools.chat);
    expect(GatewayConfig.safeParse(updated).success).toBe(true);
  });

  it("refuses a pool whose role or FIM template differs at the edge", async () => {
    const region = readTerraformOutput(await output());
    const chatNamedTab = { pools: { tab: { ...EXISTING.pools.chat!, role: "chat" as const } } };
    expect(() => mergeRegion(chatNamedTab, region)).toThrow(/tab is a chat pool at the edge but tab in Terraform/);
    const starcoder = { pools: { tab: { ...EXISTING.pools.tab!, fim: "starcoder2" as const } } };
    expect(() => mergeRegion(starcoder, region)).toThrow(/renders FIM as starcoder2/);
  });

  it("removes a region's endpoints and the pools left empty, and nothing else", async () => {
    const region = readTerraformOutput(await output());
    const both = mergeRegion(mergeRegion(EXISTING, region), await euWest());
    const withoutUsEast = removeRegion(both, region);
    expect(withoutUsEast.pools.tab!.endpoints.map((e) => e.id)).toEqual(["eu-west-tab"]);
    expect(withoutUsEast.pools.chat).toEqual(EXISTING.pools.chat);
    const alone = removeRegion(mergeRegion({ pools: {} }, region), region);
    expect(alone.pools).toEqual({});
  });

  it("lists, for every secret, the commands that set one token in AWS and at the edge", async () => {
    const lines = secretCommands(readTerraformOutput(await output())).join("\n");
    for (const pool of ["TAB", "APPLY", "EMBED"]) {
      expect(lines).toContain(`npx wrangler secret put POOL_${pool}_US_EAST_KEY`);
      expect(lines).toContain(`echo "POOL_${pool}_US_EAST_KEY=$KEY" >> .dev.vars`);
    }
    expect(lines).toContain(
      'aws secretsmanager put-secret-value --region us-east-1 --secret-id arn:aws:secretsmanager:us-east-1:123456789012:secret:sextant/us-east/tab/edge-key-Kd4Ws8 --secret-string "$KEY"',
    );
  });
});

describe("the register command", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "sextant-register-"));
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  function register(args: string[], stdin?: string): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve, reject) => {
      const child = spawn("node_modules/.bin/tsx", ["gpu-backends/register.ts", ...args], { stdio: "pipe" });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d) => (stdout += d));
      child.stderr.on("data", (d) => (stderr += d));
      child.on("error", reject);
      child.on("close", (code) => resolve({ code: code ?? -1, stdout, stderr }));
      child.stdin.end(stdin ?? "");
    });
  }

  it("writes a configuration the edge accepts and says what to run next; from stdin the result is the same", async () => {
    const config = join(dir, "gateway.json");
    const first = await register(["--config", config, FIXTURE]);
    expect(first.stderr).toBe("");
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/us-east-tab +https:\/\/tab\.us-east\.gpu\.example\.com\/v1 +capacity 1024/);
    expect(first.stdout).toContain("npx wrangler secret put POOL_APPLY_US_EAST_KEY");
    expect(first.stdout).toContain(`GATEWAY_CONFIG=${config} npm start`);
    const written = await readFile(config, "utf8");
    expect(GatewayConfig.safeParse(JSON.parse(written)).success).toBe(true);
    const again = await register(["--config", config], await readFile(FIXTURE, "utf8"));
    expect(again.code).toBe(0);
    expect(await readFile(config, "utf8")).toBe(written);
  });

  it("prints instead of writing with --dry-run, and takes a region out with --remove", async () => {
    const config = join(dir, "gateway.json");
    await writeFile(config, JSON.stringify(EXISTING));
    const dry = await register(["--config", config, "--dry-run", FIXTURE]);
    expect(dry.code).toBe(0);
    expect(JSON.parse(dry.stdout).pools.apply.endpoints[0].id).toBe("us-east-apply");
    expect(JSON.parse(await readFile(config, "utf8"))).toEqual(EXISTING);
    await register(["--config", config, FIXTURE]);
    const removed = await register(["--config", config, "--remove", FIXTURE]);
    expect(removed.code).toBe(0);
    expect(JSON.parse(await readFile(config, "utf8"))).toEqual({ pools: { chat: EXISTING.pools.chat } });
  });

  it("exits 1 and writes nothing for output that does not fit, 2 for bad arguments", async () => {
    const config = join(dir, "gateway.json");
    const bad = await register(["--config", config], JSON.stringify({ gateway: { value: { pools: { tab: {} } } } }));
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^error: the gateway output does not fit the edge/);
    await expect(readFile(config)).rejects.toThrow(/ENOENT/);
    expect((await register(["--config", config, "missing.json"])).stderr).toContain("missing.json does not exist");
    expect((await register(["--region", "us-east"])).code).toBe(2);
  });
});
