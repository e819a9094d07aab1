import { describe, expect, it } from "vitest";
import { LIMIT_CLASSES, TOKEN_RESERVE, tokenReserve } from "../../protocol/limits.js";
import type { Principal } from "../../workers/auth/principal.js";
import { cachedLimitsFor, ipPrefix, limitsFor, loadLimits } from "../../workers/limits/policy.js";

function principal(plan: "free" | "pro" | "business", extra: Partial<Principal> = {}): Principal {
  const createdAt = new Date().toISOString();
  return {
    org: { id: "org_1", name: "o", plan, limits: null, eventContent: "none", createdAt },
    user: { id: "usr_1", orgId: "org_1", email: "u@example.com", name: null, role: "owner", createdAt },
    key: {
      id: "key_1",
      orgId: "org_1",
      userId: "usr_1",
      name: "k",
      prefix: "sxt_abc",
      createdAt,
      expiresAt: null,
      revokedAt: null,
      lastUsedAt: null,
    },
    ...extra,
  };
}

describe("IP prefixes", () => {
  it.each([
    ["203.0.113.77", "203.0.113.0/24"],
    ["2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"],
    ["2001:db8::1", "2001:db8:0:0::/64"],
    ["::1", "0:0:0:0::/64"],
    ["2001:0DB8:0001:0002::", "2001:db8:1:2::/64"],
  ])("%s is in %s", (ip, prefix) => expect(ipPrefix(ip)).toBe(prefix));

  it.each(["", "not-an-ip", "300.1.2", "1:2:3"])("%s has no prefix", (ip) => expect(ipPrefix(ip)).toBeUndefined());
});

describe("which limits a request spends", () => {
  it("builds a principal's plan once per class and network, and again when a throttle ends", () => {
    const config = loadLimits({ RATE_LIMITS: "" } as unknown as Env);
    const caller = { principal: principal("free"), prefix: "203.0.113.0/24", prefixThrottled: false };
    const plan = cachedLimitsFor(config, "tab", caller);
    expect(plan).toEqual(limitsFor(config, "tab", caller));
    expect(cachedLimitsFor(config, "tab", { ...caller })).toBe(plan);
    expect(cachedLimitsFor(config, "chat", caller)).not.toBe(plan);
    expect(cachedLimitsFor(config, "tab", { ...caller, prefix: "198.51.100.0/24" })).not.toBe(plan);
    expect(cachedLimitsFor(config, "tab", { ...caller, prefixThrottled: true }).checks.length).toBeGreaterThan(
      plan.checks.length,
    );
    // Another principal object (the key cache refreshed it) gets its own plan.
    expect(cachedLimitsFor(config, "tab", { ...caller, principal: principal("free") })).not.toBe(plan);

    const throttle = { reason: "test", until: Date.now() + 60_000 };
    const throttled = { ...caller, principal: principal("free", { throttle }) };
    const strict = cachedLimitsFor(config, "tab", throttled);
    expect(strict.checks.some((c) => c.identity.endsWith(":throttled"))).toBe(true);
    throttle.until = Date.now() - 1;
    expect(cachedLimitsFor(config, "tab", throttled).checks.some((c) => c.identity.endsWith(":throttled"))).toBe(false);
  });

  it("uses the plan's limits per class and scope, and the network's only for the free tier", async () => {
    const merged = loadLimits({ RATE_LIMITS: "" } as unknown as Env);
    const free = limitsFor(merged, "tab", {
      principal: principal("free"),
      prefix: "203.0.113.0/24",
      prefixThrottled: false,
    });
    expect(free.checks.map((c) => c.policy)).toEqual(["tab-key", "tab-user", "tab-ip"]);
    expect(free.checks[0]!.bucket).toEqual({ name: "tab:requests", limit: 300, windowMs: 60_000 });
    expect(free.concurrency).toEqual([expect.objectContaining({ identity: "key:key_1", limit: 4 })]);
    const pro = limitsFor(merged, "tab", {
      principal: principal("pro"),
      prefix: "203.0.113.0/24",
      prefixThrottled: true,
    });
    expect(pro.checks.map((c) => c.policy)).toEqual(["tab-key", "tab-user"]);
    const business = limitsFor(merged, "chat", { principal: principal("business"), prefixThrottled: false });
    expect(business.checks.map((c) => c.identity)).toEqual(["key:key_1", "key:key_1", "org:org_1"]);
    expect(business.tokens.map((c) => c.policy)).toEqual(["chat-tokens-key", "chat-tokens-org"]);
    for (const cls of LIMIT_CLASSES)
      for (const plan of ["free", "pro", "business"] as const)
        expect(
          limitsFor(merged, cls, { principal: principal(plan), prefixThrottled: false }).checks.length,
        ).toBeGreaterThan(0);
  });

  it("adds the strict limits of a throttled network or account", async () => {
    const merged = loadLimits({ RATE_LIMITS: "" } as unknown as Env);
    const network = limitsFor(merged, "tab", {
      principal: principal("free"),
      prefix: "203.0.113.0/24",
      prefixThrottled: true,
    });
    expect(network.checks.at(-1)).toMatchObject({ identity: "ip:203.0.113.0/24:throttled", bucket: { limit: 10 } });
    const account = limitsFor(merged, "chat", {
      principal: principal("pro", { throttle: { reason: "keys", until: Date.now() + 60_000 } }),
      prefixThrottled: false,
    });
    expect(account.checks.at(-1)).toMatchObject({ identity: "user:usr_1:throttled", bucket: { limit: 2 } });
    const expired = limitsFor(merged, "chat", {
      principal: principal("pro", { throttle: { reason: "keys", until: Date.now() - 1 } }),
      prefixThrottled: false,
    });
    expect(expired.checks.some((c) => c.identity.endsWith(":throttled"))).toBe(false);
  });

  it("lets an org's overrides replace its plan's limits class by class", async () => {
    const merged = loadLimits({ RATE_LIMITS: "" } as unknown as Env);
    const p = principal("free");
    p.org.limits = { tab: {} };
    expect(limitsFor(merged, "tab", { principal: p, prefixThrottled: false }).checks).toEqual([]);
    expect(limitsFor(merged, "chat", { principal: p, prefixThrottled: false }).checks.length).toBeGreaterThan(0);
  });

  it("rejects an invalid RATE_LIMITS naming the bad field", async () => {
    expect(() =>
      loadLimits({ RATE_LIMITS: '{"plans":{"free":{"tab":{"key":{"requests":{"limit":-1}}}}}}' } as unknown as Env),
    ).toThrow(/plans\.free\.tab\.key\.requests/);
  });
});

describe("what a gateway request reserves of a tokens limit", () => {
  it("reserves its prompt at one token per 3 characters and its max_tokens", () => {
    const chat = { model: "m", messages: [{ role: "user", content: "x".repeat(29) }], max_tokens: 16 };
    // "user" and the content: 33 characters, 11 tokens.
    expect(tokenReserve(chat)).toBe(11 + 16);
    expect(tokenReserve({ ...chat, max_tokens: undefined, max_completion_tokens: 40 })).toBe(11 + 40);
    expect(tokenReserve({ model: "m", prompt: "def f(", suffix: ")", max_tokens: 2 })).toBe(3 + 2);
  });

  it("reserves the completion of each of a chat completion's n choices", () => {
    const chat = { model: "m", messages: [{ role: "user", content: "x".repeat(29) }], max_tokens: 16 };
    expect(tokenReserve({ ...chat, n: 3 })).toBe(11 + 3 * 16);
    expect(tokenReserve({ ...chat, max_tokens: undefined, n: 2 })).toBe(
      11 + 2 * TOKEN_RESERVE.DEFAULT_COMPLETION_RESERVE,
    );
    expect(tokenReserve({ ...chat, n: 1 })).toBe(11 + 16);
  });

  it("reserves the stated default when a request sets no limit, and nothing to generate for embeddings", () => {
    expect(tokenReserve({ model: "m", prompt: "abc" })).toBe(1 + TOKEN_RESERVE.DEFAULT_COMPLETION_RESERVE);
    expect(tokenReserve({ model: "m", input: ["abcdef", "abc"] }, false)).toBe(3);
    // Token ids count one token each.
    expect(tokenReserve({ model: "m", input: [1, 2, 3, 4] }, false)).toBe(4);
  });
});
