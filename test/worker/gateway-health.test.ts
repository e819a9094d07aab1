import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import type { GatewayHealth } from "../../durable-objects/gateway-health.js";
import { call, createAccount, expectJson, expectProblem, type Account } from "./harness.js";
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
