import { describe, expect, it } from "vitest";
import { adminCall, call, createAccount, expectProblem } from "./harness.js";

/**
 * Rate limits and abuse control through the real Worker: limiter objects with real storage, D1
 * audit records, the RateLimit header fields. The test pool's RATE_LIMITS give the free plan 5
 * embeddings a minute per key (2 at once) and leave everything else roomy; the embed backends
 * refuse connections, so admitted requests end in 502/503 while refused ones get 429.
 */
const embed = (key: string, ip?: string) =>
  call("/v1/embeddings", {
    token: key,
    body: { model: "embed-none", input: "x" },
    headers: ip ? { "CF-Connecting-IP": ip } : {},
  });

describe("rate limits", () => {
  it("refuses past a key's limit with 429, Retry-After, the RateLimit fields and which limit was hit", async () => {
    const { key } = await createAccount({ plan: "free" });
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await embed(key.key);
      statuses.push(r.status);
      await r.text();
    }
    expect(statuses.every((s) => s !== 429)).toBe(true);
    const refused = await embed(key.key);
    const retryAfter = Number(refused.headers.get("Retry-After"));
    const policy = refused.headers.get("RateLimit-Policy");
    const field = refused.headers.get("RateLimit");
    const raw = (await refused.clone().json()) as { limit?: string };
    const problem = await expectProblem(refused, 429, "rate_limited");
    expect(problem.detail).toMatch(/free plan's 5 embed requests per minute per API key/);
    expect(raw.limit).toBe("embed-key");
    expect(retryAfter).toBeGreaterThan(0);
    expect(policy).toBe('"embed-key";q=5;w=60');
    expect(field).toMatch(/^"embed-key";r=0;t=\d+$/);
  });

  it("keeps one key's burst from limiting another key, even in the same org", async () => {
    const a = await createAccount({ plan: "free" });
    const second = await adminCall("/keys", { body: { userId: a.user.id, name: "second" } });
    const b = (await second.json()) as { key: string };
    for (let i = 0; i < 6; i++) await (await embed(a.key.key)).text();
    expect((await embed(a.key.key)).status).toBe(429);
    const other = await embed(b.key);
    expect(other.status).not.toBe(429);
  });

  it("releases concurrency slots when a request fails", async () => {
    // Concurrency 2: five requests in a row, each failing upstream, never run out of slots.
    const { key } = await createAccount({ plan: "free" });
    for (let i = 0; i < 5; i++) {
      const r = await embed(key.key);
      expect(r.status).not.toBe(429);
      await r.text();
    }
  });

  it("applies an org's overrides instead of its plan's limits, at once", async () => {
    const { org, key } = await createAccount({ plan: "free" });
    const bad = await adminCall(`/orgs/${org.id}`, {
      method: "PATCH",
      body: { limits: { embed: { key: { requests: { limit: 0, windowSeconds: 60 } } } } },
    });
    await expectProblem(bad, 400, "invalid_request");
    const patched = await adminCall(`/orgs/${org.id}`, {
      method: "PATCH",
      body: { limits: { embed: { key: { requests: { limit: 2, windowSeconds: 60 } } } } },
    });
    expect(((await patched.json()) as { limits: unknown }).limits).toEqual({
      embed: { key: { requests: { limit: 2, windowSeconds: 60 } } },
    });
    for (let i = 0; i < 2; i++) expect((await embed(key.key)).status).not.toBe(429);
    const refused = await embed(key.key);
    const problem = await expectProblem(refused, 429, "rate_limited");
    expect(problem.detail).toMatch(/your org's 2 embed requests per minute per API key/);
  });

  it("puts the RateLimit field on successful responses", async () => {
    const { key } = await createAccount({ plan: "pro" });
    const response = await call("/v1/me", { token: key.key });
    expect(response.status).toBe(200);
    expect(response.headers.get("RateLimit-Policy")).toBe('"admin-key";q=100000;w=60');
    expect(response.headers.get("RateLimit")).toMatch(/^"admin-key";r=\d+;t=\d+$/);
  });

  it("turns a flood of made-up keys from one network into 429s", async () => {
    const ip = "192.0.2.77";
    // The network's admin-class bucket holds 60 and refills one a second, so a slow machine may see a
    // few more than 60 answered before the first 429: count them rather than expect the 61st to be it.
    let refused: Response | undefined;
    let answered = 0;
    for (let i = 0; i < 300 && !refused; i++) {
      const r = await call("/v1/me", { token: "sxt_not-a-key", headers: { "CF-Connecting-IP": ip } });
      if (r.status === 429) refused = r;
      else {
        await expectProblem(r, 401, "unauthenticated");
        answered++;
      }
    }
    expect(refused?.status, `${answered} answered, none refused`).toBe(429);
    expect(answered).toBeGreaterThanOrEqual(60);
    await expectProblem(refused!, 429, "rate_limited");
    expect(Number(refused!.headers.get("Retry-After"))).toBeGreaterThan(0);
    // Another network is unaffected.
    const elsewhere = await call("/v1/me", { token: "sxt_not-a-key", headers: { "CF-Connecting-IP": "192.0.3.1" } });
    expect(elsewhere.status).toBe(401);
  });
});

describe("abuse control", () => {
  it("throttles a network where many new free accounts appear, and never a paying account on it", async () => {
    const network = (host: number) => `198.51.100.${host}`;
    // 21 new free accounts from one /24 cross the threshold of 20.
    const free = [];
    for (let i = 0; i < 21; i++) {
      const account = await createAccount({ plan: "free" });
      free.push(account);
      const r = await call("/v1/me", { token: account.key.key, headers: { "CF-Connecting-IP": network(i + 1) } });
      expect(r.status).toBe(200);
    }
    // The signal is recorded off the request's path.
    type Throttle = { id: string; kind: string; subject: string; signal: string };
    let record: Throttle | undefined;
    for (let i = 0; i < 50 && !record; i++) {
      const { data } = (await (await adminCall("/abuse")).json()) as { data: Throttle[] };
      record = data.find((t) => t.subject === "198.51.100.0/24");
      if (!record) await new Promise((r) => setTimeout(r, 50));
    }
    expect(record).toMatchObject({ kind: "prefix", signal: "new_free_accounts" });

    // A throttled network's free traffic is held to the strict limits (10 tab requests a minute)...
    const victim = free[0]!;
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await call("/v1/completions", {
        token: victim.key.key,
        body: { model: "tab-test", prompt: "x" },
        headers: { "CF-Connecting-IP": network(200) },
      });
      statuses.push(r.status);
      if (r.status === 429) {
        const problem = await expectProblem(r, 429, "rate_limited");
        expect(problem.detail).toMatch(/throttled network/);
      } else await r.text();
    }
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(2);

    // ...while a pro account on the same network is not.
    const pro = await createAccount({ plan: "pro" });
    for (let i = 0; i < 12; i++) {
      const r = await call("/v1/completions", {
        token: pro.key.key,
        body: { model: "tab-test", prompt: "x" },
        headers: { "CF-Connecting-IP": network(201) },
      });
      expect(r.status).not.toBe(429);
      await r.text();
    }

    // An admin can lift it.
    const lifted = await adminCall(`/abuse/${record!.id}/lift`, { method: "POST" });
    expect(((await lifted.json()) as { active: boolean }).active).toBe(false);
  }, 30_000);

  it("throttles an account that creates keys too fast, with an audit record", async () => {
    const { key, user } = await createAccount({ plan: "free" });
    let last: Response | undefined;
    for (let i = 0; i < 21; i++) {
      last = await call("/v1/keys", { token: key.key, body: { name: `k${i}` } });
      if (i < 20) expect(last.status).toBe(201);
      if (i < 20) await last.text();
    }
    await expectProblem(last!, 429, "rate_limited");
    const { data } = (await (await adminCall("/abuse")).json()) as {
      data: { kind: string; subject: string; signal: string }[];
    };
    expect(data.find((t) => t.subject === user.id)).toMatchObject({ kind: "account", signal: "key_creations" });
    // The throttled account is held to the strict limits at once in this isolate.
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await call("/v1/me", { token: key.key });
      statuses.push(r.status);
      await r.text();
    }
    expect(statuses.filter((s) => s === 429).length).toBeGreaterThanOrEqual(2);
  }, 30_000);
});
