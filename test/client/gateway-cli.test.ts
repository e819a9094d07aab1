import { describe, expect, it } from "vitest";
import { printGatewayStatus } from "../../client/cli/commands/admin.js";
import { main } from "../../client/cli/main.js";
import { EXIT } from "../../client/cli/output.js";
import { GatewayStatus, type EndpointStatus } from "../../protocol/gateway.js";
import { captureCli, stubEdge } from "../support/cli-capture.js";

const healthy: EndpointStatus = {
  id: "use1-a",
  region: "us-east",
  kind: "vllm",
  url: "https://use1.gpu.example.com/v1",
  model: "Qwen/Qwen2.5-Coder-7B",
  capacity: 32,
  weight: 1,
  secret: "POOL_TAB_KEY",
  health: {
    routable: true,
    probe: { at: "2026-05-01T10:00:03.000Z", ok: true, status: 200, error: null, ms: 4.2 },
    ejectedUntil: null,
    since: null,
    slowStart: 1,
  },
  isolate: { inflight: 3, failures: 0, ejectedUntil: null, probation: false, fullUntil: null },
};

const status: GatewayStatus = {
  at: "2026-05-01T10:00:05.000Z",
  source: "GATEWAY_CONFIG",
  probeIntervalMs: 5000,
  pools: [
    { name: "tab", role: "tab", models: ["tab"], down: false, ramp: null, endpoints: ["use1-a", "euw1-a"] },
    {
      name: "apply",
      role: "apply",
      models: ["apply", "apply-fast"],
      down: false,
      ramp: { startedAt: "2026-05-01T09:59:50.000Z", endsAt: "2026-05-01T10:00:20.000Z", admitted: 0.5 },
      endpoints: ["apply-a"],
    },
    { name: "embed", role: "embed", models: ["embed"], down: true, ramp: null, endpoints: ["embed-a"] },
  ],
  endpoints: [
    healthy,
    {
      ...healthy,
      id: "euw1-a",
      region: "eu-west",
      secret: null,
      health: {
        routable: false,
        probe: { at: "2026-05-01T09:57:05.000Z", ok: false, status: null, error: "timeout", ms: 2000 },
        ejectedUntil: "2026-05-01T10:00:15.000Z",
        since: null,
        slowStart: 1,
      },
      isolate: { ...healthy.isolate, inflight: 0, ejectedUntil: "2026-05-01T10:00:15.000Z", probation: true },
    },
    {
      ...healthy,
      id: "apply-a",
      health: { ...healthy.health, since: "2026-05-01T09:59:50.000Z", slowStart: 0.25 },
      isolate: { ...healthy.isolate, fullUntil: "2026-05-01T10:00:06.000Z" },
    },
    { ...healthy, id: "embed-a", health: { ...healthy.health, routable: false, probe: null } },
  ],
};

const output = captureCli();

describe("sextant admin gateway", () => {
  it("prints each pool's state and each endpoint's load, state, last probe and secret name", () => {
    GatewayStatus.parse(status);
    printGatewayStatus(status);
    const lines = output().split("\n");
    expect(lines[0]).toBe("Gateway at 2026-05-01 10:00 UTC: configured by GATEWAY_CONFIG, probes every 5 s");
    expect(lines[2]).toMatch(/^POOL\s+ROLE\s+MODELS\s+STATE\s+ENDPOINTS$/);
    expect(lines[3]).toMatch(/^tab\s+tab\s+tab\s+up\s+use1-a, euw1-a$/);
    expect(lines[4]).toMatch(
      /^apply\s+apply\s+apply, apply-fast\s+recovering: 50% of free users until 10:00:20\s+apply-a$/,
    );
    expect(lines[5]).toMatch(/^embed\s+embed\s+embed\s+down \(503\)\s+embed-a$/);
    expect(lines[7]).toMatch(/^ENDPOINT\s+REGION\s+KIND\s+MODEL\s+IN FLIGHT\s+STATE\s+LAST PROBE\s+SECRET$/);
    expect(lines[8]).toMatch(
      /^use1-a\s+us-east\s+vllm\s+Qwen\/Qwen2\.5-Coder-7B\s+3\/32\s+routable\s+200 in 4\.2 ms, 2 s ago\s+POOL_TAB_KEY$/,
    );
    expect(lines[9]).toMatch(
      /^euw1-a\s+eu-west\s.*\s0\/32\s+failing probes, ejected until 10:00:15, on probation\s+timeout in 2000 ms, 3 min ago\s+-$/,
    );
    expect(lines[10]).toMatch(/^apply-a\s.*\sfull, slow start 25%\s+200 in/);
    expect(lines[11]).toMatch(/^embed-a\s.*\sout of rotation\s+not yet\s/);
  });

  it("asks GET /admin/gateway and prints the status as JSON with --json", async () => {
    const requests = stubEdge(status);
    expect(
      await main(["--base-url", "http://edge.test", "--admin-secret", "s".repeat(40), "--json", "admin", "gateway"]),
    ).toBe(EXIT.ok);
    expect(requests.map((r) => `${r.method} ${r.url.pathname}`)).toEqual(["GET /admin/gateway"]);
    expect(JSON.parse(output())).toEqual(status);
  });
});
