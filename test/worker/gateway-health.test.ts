import {
  createExecutionContext,
  env,
  runDurableObjectAlarm,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import type { GatewayHealth } from "../../durable-objects/gateway-health.js";
import { GatewayStatus } from "../../protocol/gateway.js";
import worker from "../../workers/index.js";
import { adminCall, call, createAccount, expectJson, expectProblem, ORIGIN, type Account } from "./harness.js";
import { z } from "zod";

const health = () => env.GATEWAY_HEALTH.get(env.GATEWAY_HEALTH.idFromName("global"));

/**
 * The shared health object with real SQLite storage and real probes (every configured backend
 * refuses connections), and the gateway routes inside workerd.
 */
describe("gateway health", () => {
  let account: Account;
  beforeAll(async () => {
    account = await createAccount({ plan: "pro" });
  });

  it("starts optimistic, then probes mark every endpoint and the pool down", async () => {
    const stub = health();
    const before = await stub.snapshot();
    expect(before!.endpoints["nowhere-east"]).toEqual({ healthy: true, since: 0 });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const after = await stub.snapshot();
    expect(after!.endpoints["nowhere-east"]!.healthy).toBe(false);
    expect(after!.endpoints["nowhere-west"]!.healthy).toBe(false);
    expect(after!.pools.tab).toEqual({ down: true, outageEndedAt: null });
    // The alarm keeps probing while isolates ask.
    await runInDurableObject(stub, async (_instance: GatewayHealth, state) => {
      expect(await state.storage.getAlarm()).not.toBeNull();
    });
  });

  it("persists its view, so a restarted object remembers the outage", async () => {
    const stub = health();
    await runInDurableObject(stub, async (_instance: GatewayHealth, state) => {
      const row = state.storage.sql.exec<{ state: string }>("SELECT state FROM health").one();
      const saved = JSON.parse(row.state) as { pools: Record<string, { down: boolean }> };
      expect(saved.pools.tab!.down).toBe(true);
    });
  });

  it("records an ejection reported by an isolate", async () => {
    const stub = env.GATEWAY_HEALTH.get(env.GATEWAY_HEALTH.idFromName("ejections"));
    await stub.eject("nowhere-east", Date.now() + 60_000);
    await stub.eject("no-such-endpoint", Date.now() + 60_000);
    const snapshot = await stub.snapshot();
    expect(snapshot!.endpoints["nowhere-east"]!.healthy).toBe(false);
    expect(snapshot!.endpoints["nowhere-west"]!.healthy).toBe(true);
    expect(snapshot!.endpoints).not.toHaveProperty("no-such-endpoint");
  });

  it("lists the configured models", async () => {
    const models = await expectJson(
      await call("/v1/models", { token: account.key.key }),
      200,
      z.object({ data: z.array(z.object({ id: z.string(), owned_by: z.string() })) }),
    );
    expect(models.data.map((m) => m.id)).toEqual(["tab-test", "embed-none"]);
  });

  it("answers 404 for a model no pool serves", async () => {
    const problem = await expectProblem(
      await call("/v1/completions", { token: account.key.key, body: { model: "gpt-nope", prompt: "x" } }),
      404,
      "not_found",
    );
    expect(problem.detail).toContain("gpt-nope");
  });

  it("answers 503 with Retry-After, never a 500, once every backend of the pool is down", async () => {
    await runDurableObjectAlarm(health());
    // The isolate learns of the outage from its next background snapshot.
    let response: Response | undefined;
    for (let i = 0; i < 50; i++) {
      response = await call("/v1/completions", {
        token: account.key.key,
        body: { model: "tab-test", prompt: "x", suffix: "" },
      });
      if (response.status === 503) break;
      expect([502, 504]).toContain(response.status);
      await response.text();
      await new Promise((r) => setTimeout(r, 50));
    }
    const problem = await expectProblem(response!, 503, "unavailable");
    expect(problem.detail).toMatch(/down/);
    expect(Number(response!.headers.get("Retry-After"))).toBeGreaterThan(0);
  });

  it("rejects batched prompts and bad message lists with 400", async () => {
    await expectProblem(
      await call("/v1/completions", { token: account.key.key, body: { model: "tab-test", prompt: ["a", "b"] } }),
      400,
      "invalid_request",
    );
    await expectProblem(
      await call("/v1/chat/completions", { token: account.key.key, body: { model: "tab-test", messages: [] } }),
      400,
      "invalid_request",
    );
  });
});

describe("GET /admin/gateway", () => {
  let account: Account;
  beforeAll(async () => {
    account = await createAccount({ plan: "pro" });
  });

  /** The Worker with its gateway variables changed, as a deployment with another configuration would run. */
  async function withConfig(config: string | undefined, vars: Record<string, string> = {}): Promise<Response> {
    const ctx = createExecutionContext();
    const response = await worker.fetch(
      new Request(`${ORIGIN}/admin/gateway`, { headers: { Authorization: `Bearer ${env.ADMIN_SECRET}` } }),
      { ...env, GATEWAY_CONFIG: config, ...vars } as unknown as Env,
      ctx,
    );
    await waitOnExecutionContext(ctx);
    return response;
  }

  it("needs the admin secret: none is 401, a wrong one or an API key 403", async () => {
    const none = await expectProblem(await call("/admin/gateway"), 401, "unauthenticated");
    expect(none.detail).toMatch(/admin secret/);
    await expectProblem(await call("/admin/gateway", { token: "x".repeat(40) }), 403, "forbidden");
    await expectProblem(await call("/admin/gateway", { token: account.key.key }), 403, "forbidden");
  });

  it("shows every pool and endpoint, and what the probes found", async () => {
    await runDurableObjectAlarm(health());
    const status = await expectJson(await adminCall("/gateway"), 200, GatewayStatus);
    expect(status.source).toBe("GATEWAY_CONFIG");
    expect(status.probeIntervalMs).toBe(1000);
    expect(status.pools.map((p) => [p.name, p.role, p.models, p.endpoints])).toEqual([
      ["tab", "tab", ["tab-test"], ["nowhere-east", "nowhere-west"]],
      ["embed", "embed", ["embed-none"], ["nowhere-embed"]],
    ]);
    // Every backend refuses connections (the discard port): the probes say so, and the pools are down.
    expect(status.pools.every((p) => p.down && p.ramp === null)).toBe(true);
    const east = status.endpoints.find((e) => e.id === "nowhere-east")!;
    expect(east).toMatchObject({
      region: "us-east",
      kind: "vllm",
      url: "http://127.0.0.1:1/v1",
      model: null,
      capacity: 4,
      weight: 1,
      secret: null,
      health: { routable: false, ejectedUntil: null, slowStart: 1 },
      isolate: { inflight: 0, ejectedUntil: null, probation: false, fullUntil: null },
    });
    expect(east.health.probe).toMatchObject({ ok: false, status: null, error: "unreachable" });
    expect(Date.parse(east.health.probe!.at)).toBeLessThanOrEqual(Date.parse(status.at));
  });

  /** The setting to change and the docs section that explains it. */
  const NO_BACKENDS = /set GATEWAY_CONFIG or INFERENCE_UPSTREAM \(docs\/gateway\.md, "Pointing it at real backends"\)/;

  it("answers 404 on an edge with no backends configured", async () => {
    const problem = await expectProblem(await withConfig(undefined), 404, "not_found");
    expect(problem.detail).toMatch(NO_BACKENDS);
  });

  it("answers the gateway's own routes with 503 on such an edge, with the same hint", async () => {
    const ctx = createExecutionContext();
    const response = await worker.fetch(
      new Request(`${ORIGIN}/v1/models`, { headers: { Authorization: `Bearer ${account.key.key}` } }),
      { ...env, GATEWAY_CONFIG: undefined } as unknown as Env,
      ctx,
    );
    await waitOnExecutionContext(ctx);
    const problem = await expectProblem(response, 503, "unavailable");
    expect(problem.detail).toMatch(NO_BACKENDS);
  });

  it("tells the operator why an invalid configuration is refused", async () => {
    const problem = await expectProblem(await withConfig("{ not json"), 500, "internal");
    expect(problem.detail).toMatch(/configuration is invalid\. GATEWAY_CONFIG is not valid JSON/);
    const schema = await expectProblem(
      await withConfig(JSON.stringify({ pools: { tab: { role: "tab" } } })),
      500,
      "internal",
    );
    expect(schema.detail).toMatch(/configuration is invalid/);
  });

  // Last: it replaces the isolate's gateway with another configuration's.
  it("names INFERENCE_UPSTREAM as the source of the one-setting configuration, without its key", async () => {
    const key = "sk-upstream-" + "u".repeat(24);
    const status = await expectJson(
      await withConfig(undefined, { INFERENCE_UPSTREAM: "http://127.0.0.1:1/v1/", INFERENCE_UPSTREAM_API_KEY: key }),
      200,
      GatewayStatus,
    );
    expect(status.source).toBe("INFERENCE_UPSTREAM");
    expect(status.pools.map((p) => [p.name, p.models, p.endpoints])).toEqual([
      ["tab", ["*"], ["upstream"]],
      ["chat", ["*"], ["upstream"]],
      ["embed", ["*"], ["upstream"]],
    ]);
    expect(status.endpoints).toHaveLength(1);
    expect(status.endpoints[0]).toMatchObject({
      id: "upstream",
      kind: "openai",
      url: "http://127.0.0.1:1/v1",
      secret: "INFERENCE_UPSTREAM_API_KEY",
    });
    expect(JSON.stringify(status)).not.toContain(key);
  });
});
