import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { generateApiKey, hashApiKey } from "../../protocol/api-key.js";
import { Me } from "../../protocol/schemas.js";
import { authenticate } from "../../workers/auth/authenticate.js";
import { KeyCache } from "../../workers/auth/key-cache.js";
import { loadConfig } from "../../workers/config.js";
import { ApiError } from "../../workers/problem.js";
import { adminCall, call, createAccount, expectJson, expectProblem } from "./harness.js";

describe("API key authentication", () => {
  it("resolves a valid key to its org, user and key", async () => {
    const account = await createAccount({ plan: "pro" });
    const me = await expectJson(await call("/v1/me", { token: account.key.key }), 200, Me);
    expect(me.org).toEqual(account.org);
    expect(me.user.id).toBe(account.user.id);
    expect(me.key.id).toBe(account.key.id);
  });

  it("returns 401 with a Bearer challenge when no key is sent", async () => {
    const response = await call("/v1/me");
    expect(response.headers.get("WWW-Authenticate")).toContain("Bearer");
    await expectProblem(response, 401, "unauthenticated");
  });

  it("returns 401 for a malformed key", async () => {
    await expectProblem(await call("/v1/me", { token: "sk-not-ours" }), 401, "unauthenticated");
    const key = generateApiKey();
    const typo = key.slice(0, 10) + (key[10] === "a" ? "b" : "a") + key.slice(11);
    const problem = await expectProblem(await call("/v1/me", { token: typo }), 401, "unauthenticated");
    expect(problem.detail).toContain("malformed");
  });

  it("returns 401 for a well-formed key that was never issued", async () => {
    const problem = await expectProblem(await call("/v1/me", { token: generateApiKey() }), 401, "unauthenticated");
    expect(problem.detail).toContain("not recognised");
  });

  it("refuses a revoked key immediately, even though it was cached", async () => {
    const account = await createAccount();
    await expectJson(await call("/v1/me", { token: account.key.key }), 200, Me);
    expect((await adminCall(`/keys/${account.key.id}`, { method: "DELETE" })).status).toBe(200);
    const problem = await expectProblem(await call("/v1/me", { token: account.key.key }), 401, "unauthenticated");
    expect(problem.detail).toContain("revoked");
  });

  it("looks a key in use up again in the background before its entry expires, so no request waits for D1", async () => {
    const account = await createAccount();
    const authorization = `Bearer ${account.key.key}`;
    let now = Date.now();
    // This isolate's own cache is left alone: this one stands for another isolate's, with a clock of its own.
    const cache = new KeyCache({ ttlMs: 30_000, now: () => now });
    const background: Promise<unknown>[] = [];
    const check = () => authenticate(env, loadConfig(env), authorization, (p) => void background.push(p), cache);
    expect((await check()).key.id).toBe(account.key.id);
    await Promise.all(background.splice(0));

    // Revoked where this cache cannot see it, halfway through the entry's TTL.
    await env.DB.prepare("UPDATE api_keys SET revoked_at = ? WHERE id = ?").bind(Date.now(), account.key.id).run();
    now += 15_000;
    // The request is answered from the cache, without waiting for the lookup it starts...
    const served = await check();
    expect(served.key.id).toBe(account.key.id);
    expect(served.key.revokedAt).toBeNull();
    expect(background).toHaveLength(1);
    await Promise.all(background.splice(0));
    // ...which finds the revocation half a TTL before the entry would have expired.
    const refused = await check().catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).detail).toContain("revoked");
    // The refreshed entry is not due another refresh yet.
    expect(background).toHaveLength(0);
  });

  it("refuses an expired key, even though it was cached while valid", async () => {
    const account = await createAccount({ expiresAt: new Date(Date.now() + 1500).toISOString() });
    await expectJson(await call("/v1/me", { token: account.key.key }), 200, Me);
    await new Promise((resolve) => setTimeout(resolve, 1600));
    const problem = await expectProblem(await call("/v1/me", { token: account.key.key }), 401, "unauthenticated");
    expect(problem.detail).toContain("expired");
  });

  it("stores only the SHA-256 of a key and a short display prefix, never the key", async () => {
    const account = await createAccount();
    const secret = account.key.key;
    const { results } = await env.DB.prepare("SELECT * FROM api_keys WHERE id = ?").bind(account.key.id).all();
    expect(results).toHaveLength(1);
    const row = results[0]!;
    expect(row.hash).toBe(await hashApiKey(secret));
    expect(secret.startsWith(String(row.prefix))).toBe(true);
    expect(String(row.prefix).length).toBeLessThan(16);

    // No column of any table holds the key or its random body.
    const tables = await env.DB.prepare(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%'",
    ).all<{ name: string }>();
    const body = secret.slice(12);
    for (const { name } of tables.results) {
      const dump = JSON.stringify((await env.DB.prepare(`SELECT * FROM "${name}"`).all()).results);
      expect(dump).not.toContain(body);
    }
  });

  it("does not show a key's secret again after creation", async () => {
    const account = await createAccount();
    const listed = await (await adminCall(`/keys?orgId=${account.org.id}`)).text();
    expect(listed).toContain(account.key.id);
    expect(listed).not.toContain(account.key.key);
  });
});
