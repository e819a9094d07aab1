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
    const a = principal("a");
    cache.set("a", a);
    cache.set("b", principal("b"));
    cache.get("a");
    cache.set("c", principal("c"));
    expect(cache.get("b")).toBeUndefined();
    expect(cache.get("a")).toBe(a);
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

  it("offers one refresh of a key in use halfway through its TTL, and the refreshed entry is trusted a new TTL", () => {
    let now = 0;
    const cache = new KeyCache({ ttlMs: 30_000, now: () => now });
    cache.set("h", principal("k1"));
    now = 14_999;
    expect(cache.claimRefresh("h")).toBe(false);
    now = 15_000;
    expect(cache.claimRefresh("h")).toBe(true);
    // Claimed: no second refresh while the first runs, and the entry still serves requests.
    expect(cache.claimRefresh("h")).toBe(false);
    expect(cache.get("h")?.key.id).toBe("k1");
    now = 15_500;
    cache.set("h", principal("k1"));
    now = 30_000;
    expect(cache.claimRefresh("h")).toBe(false);
    now = 45_499;
    expect(cache.get("h")?.key.id).toBe("k1");
    now = 45_500;
    expect(cache.get("h")).toBeUndefined();
  });

  it("never refreshes an entry past its TTL: the revocation bound holds without any refresh", () => {
    let now = 0;
    const cache = new KeyCache({ ttlMs: 30_000, now: () => now });
    cache.set("h", principal("k1"));
    now = 20_000;
    expect(cache.claimRefresh("h")).toBe(true);
    // The refresh never lands (the database is down): the entry expires on time all the same,
    // and an expired entry is not offered for a refresh, even with its claim given back.
    now = 30_000;
    cache.releaseRefresh("h");
    expect(cache.claimRefresh("h")).toBe(false);
    expect(cache.get("h")).toBeUndefined();
  });

  it("lets the next request try again after a refresh that failed", () => {
    let now = 0;
    const cache = new KeyCache({ ttlMs: 30_000, refreshAfterMs: 10_000, now: () => now });
    cache.set("h", principal("k1"));
    now = 10_000;
    expect(cache.claimRefresh("h")).toBe(true);
    cache.releaseRefresh("h");
    expect(cache.claimRefresh("h")).toBe(true);
  });

  it("does not refresh unknown keys, which only expire", () => {
    let now = 0;
    const cache = new KeyCache({ ttlMs: 30_000, negativeTtlMs: 5_000, now: () => now });
    cache.set("bad", null);
    now = 4_999;
    expect(cache.claimRefresh("bad")).toBe(false);
    expect(cache.claimRefresh("absent")).toBe(false);
  });

  it("does not cache a lookup that raced an eviction, so a revocation here cannot be undone by it", () => {
    const cache = new KeyCache({ ttlMs: 30_000 });
    const before = cache.ticket();
    // The key is revoked and evicted while a lookup that read it as valid is still in flight.
    cache.evict({ keyId: "k1" });
    cache.set("h", principal("k1"), before);
    expect(cache.get("h")).toBeUndefined();
    // A lookup that began after the eviction is cached as usual.
    cache.set("h", principal("k1"), cache.ticket());
    expect(cache.get("h")?.key.id).toBe("k1");
  });
});
