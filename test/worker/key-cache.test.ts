import { describe, expect, it } from "vitest";
import { KeyCache } from "../../workers/auth/key-cache.js";
import type { Principal } from "../../workers/auth/principal.js";

const principal = (keyId: string, orgId = "org_a"): Principal =>
  ({ key: { id: keyId }, org: { id: orgId }, user: { id: "usr" } }) as Principal;

describe("KeyCache", () => {
  it("trusts an entry for exactly its TTL: the bound on revocation delay in other isolates", () => {
    let now = 0;
    const cache = new KeyCache({ ttlMs: 30_000, now: () => now });
    cache.set("h", principal("k1"));
    now = 29_999;
    expect(cache.get("h")?.key.id).toBe("k1");
    now = 30_000;
    expect(cache.get("h")).toBeUndefined();
  });

  it("remembers unknown keys only briefly", () => {
    let now = 0;
    const cache = new KeyCache({ ttlMs: 30_000, negativeTtlMs: 5_000, now: () => now });
    cache.set("bad", null);
    expect(cache.get("bad")).toBeNull();
    now = 5_000;
    expect(cache.get("bad")).toBeUndefined();
  });

  it("evicts the least recently used entry when full", () => {
    const cache = new KeyCache({ ttlMs: 1000, maxEntries: 2 });
    cache.set("a", principal("a"));
    cache.set("b", principal("b"));
    cache.get("a");
    cache.set("c", principal("c"));
    expect(cache.get("b")).toBeUndefined();
    expect(cache.get("a")).toBeDefined();
    expect(cache.size).toBe(2);
  });

  it("evicts by key id and by org", () => {
    const cache = new KeyCache({ ttlMs: 1000 });
    cache.set("a", principal("k1", "org_1"));
    cache.set("b", principal("k2", "org_1"));
    cache.set("c", principal("k3", "org_2"));
    cache.evict({ keyId: "k3" });
    expect(cache.get("c")).toBeUndefined();
    cache.evict({ orgId: "org_1" });
    expect(cache.size).toBe(0);
  });

  it("caches nothing when the TTL is zero", () => {
    const cache = new KeyCache({ ttlMs: 0 });
    cache.set("a", principal("a"));
    expect(cache.get("a")).toBeUndefined();
  });
});
