import { env } from "cloudflare:test";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { LEASE_RESERVE } from "../../durable-objects/buckets.js";
import { lease, refill } from "../../durable-objects/rate-limiter.js";
import { IsolateLimiter, rateLimitHeaders, type Check, type LimiterStub } from "../../workers/limits/limiter.js";

const SETTINGS = { maxShare: 0.005, ttlMs: 1_000 };
let objects = 0;

/** A fresh limiter object (real Durable Object, real SQLite) per test. */
function limiterObject() {
  const name = `test-${++objects}-${crypto.randomUUID()}`;
  return env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(name));
}

function check(limit: number, windowMs: number, identity = "key:k1"): Check {
  return {
    identity,
    policy: "tab-key",
    bucket: { name: "tab:requests", limit, windowMs },
    cost: 1,
    describe: "test limit",
  };
}

const noWait = () => {};

describe("bucket arithmetic", () => {
  it("refills at limit per window and never above the limit", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 100_000 }),
        fc.integer({ min: 1, max: 3_600_000 }),
        fc.double({ min: -1000, max: 100_000, noNaN: true }),
        fc.integer({ min: 0, max: 10_000_000 }),
        (limit, windowMs, start, elapsed) => {
          const bucket = { tokens: Math.min(start, limit), at: 0, limit, windowMs };
          const before = bucket.tokens;
          refill(bucket, elapsed);
          const expected = Math.min(limit, before + (elapsed * limit) / windowMs);
          return Math.abs(bucket.tokens - expected) < 1e-6 && bucket.tokens <= limit;
        },
      ),
    );
  });

  it("grants no more than is there, takes back returns and charges debt", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000 }),
        fc.array(
          fc.record({
            want: fc.integer({ min: 0, max: 500 }),
            returned: fc.integer({ min: 0, max: 50 }),
            debt: fc.integer({ min: 0, max: 50 }),
            dt: fc.integer({ min: 0, max: 5_000 }),
          }),
          { maxLength: 40 },
        ),
        (limit, steps) => {
          const windowMs = 60_000;
          const bucket = { tokens: limit, at: 0, limit, windowMs };
          let now = 0;
          let outstanding = 0;
          let leased = 0;
          for (const step of steps) {
            now += step.dt;
            const returned = Math.min(step.returned, outstanding);
            outstanding -= returned;
            const grant = lease(bucket, { want: step.want, returned, debt: step.debt }, now);
            if (grant.granted > step.want || grant.granted < 0) return false;
            if (grant.granted > 0 && grant.retryAfterMs !== 0) return false;
            outstanding += grant.granted;
            leased += grant.granted - returned;
            if (bucket.tokens > limit) return false;
            // What was ever leased out, less what came back, stays within the limit plus the refill.
            if (leased > limit + (now * limit) / windowMs + 1e-6) return false;
          }
          return true;
        },
      ),
    );
  });

  it("says how long until a request's need is back when it grants nothing", () => {
    const bucket = { tokens: 0, at: 0, limit: 60, windowMs: 60_000 };
    const grant = lease(bucket, { need: 1, want: 1, returned: 0, debt: 0 }, 0);
    expect(grant).toMatchObject({ granted: 0, remaining: 0, retryAfterMs: 1_000 });
    expect(lease(bucket, { need: 1, want: 1, returned: 0, debt: 0 }, 1_000)).toMatchObject({ granted: 1 });
    // Five units take five seconds to come back, and are granted whole or not at all.
    expect(lease(bucket, { need: 5, want: 0, returned: 0, debt: 0 }, 1_000)).toMatchObject({
      granted: 0,
      retryAfterMs: 5_000,
    });
    expect(lease(bucket, { need: 5, want: 0, returned: 0, debt: 0 }, 5_000)).toMatchObject({ granted: 0 });
    expect(lease(bucket, { need: 5, want: 0, returned: 0, debt: 0 }, 6_000)).toMatchObject({ granted: 5 });
  });

  it("grants a need whole while the bucket holds it, and leases beyond it only above the reserve", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10_000 }),
        fc.double({ min: -100, max: 1, noNaN: true }),
        fc.integer({ min: 0, max: 500 }),
        fc.integer({ min: 0, max: 500 }),
        (limit, share, need, want) => {
          const tokens = share * limit;
          const bucket = { tokens, at: 0, limit, windowMs: 60_000 };
          const grant = lease(bucket, { need, want, returned: 0, debt: 0 }, 0);
          if (tokens < need) return grant.granted === 0 && (need === 0 || grant.retryAfterMs > 0);
          const extra = grant.granted - need;
          return (
            extra >= 0 &&
            extra <= want &&
            (extra === 0 || tokens - grant.granted >= LEASE_RESERVE * limit - 1e-9) &&
            bucket.tokens === tokens - grant.granted
          );
        },
      ),
    );
  });
});

describe("isolates sharing one limiter object", () => {
  async function burst(isolates: IsolateLimiter[], perIsolate: number, c: Check, fast: boolean) {
    const pending: Promise<unknown>[] = [];
    let admitted = 0;
    await Promise.all(
      isolates.map(async (isolate) => {
        for (let i = 0; i < perIsolate; i++) {
          const d = await isolate.admit([c], { fast, failClosed: false, waitUntil: (p) => pending.push(p) });
          if (d.ok) admitted++;
        }
      }),
    );
    await Promise.all(pending);
    return admitted;
  }

  it.each([true, false])(
    "admits within 5%% of the limit with 8 isolates bursting at once (fast path: %s)",
    async (fast) => {
      const stub = limiterObject();
      const isolates = Array.from({ length: 8 }, () => new IsolateLimiter(() => stub, SETTINGS));
      const limit = 2_000;
      const windowMs = 3_600_000; // refill is negligible during the burst
      const started = Date.now();
      const admitted = await burst(isolates, 500, check(limit, windowMs), fast);
      const refilled = ((Date.now() - started) * limit) / windowMs;
      expect(admitted).toBeLessThanOrEqual(Math.ceil((limit + refilled) * 1.05));
      expect(admitted).toBeGreaterThanOrEqual(Math.floor(limit * 0.95));
    },
  );

  it("never refuses a client that stays under its limit, spread over 8 isolates", async () => {
    const stub = limiterObject();
    const isolates = Array.from({ length: 8 }, () => new IsolateLimiter(() => stub, SETTINGS));
    const limit = 100;
    const windowMs = 2_000;
    const c = check(limit, windowMs);
    const pending: Promise<unknown>[] = [];
    let refused = 0;
    let sent = 0;
    // 90% of the limit: 45 requests a second for 4 seconds, round-robin over the isolates.
    const started = Date.now();
    for (let i = 0; i < 180; i++) {
      const due = started + (i * 1000) / 45;
      await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now())));
      const d = await isolates[i % 8]!.admit([c], { fast: true, failClosed: false, waitUntil: (p) => pending.push(p) });
      sent++;
      if (!d.ok) refused++;
    }
    await Promise.all(pending);
    expect(sent).toBe(180);
    expect(refused).toBe(0);
  });

  it("keeps identities apart: one key's burst never limits another", async () => {
    const stubs = new Map<string, ReturnType<typeof limiterObject>>();
    const stub = (identity: string) => {
      if (!stubs.has(identity)) stubs.set(identity, limiterObject());
      return stubs.get(identity)!;
    };
    const isolate = new IsolateLimiter(stub, SETTINGS);
    const opts = { fast: false, failClosed: false, waitUntil: noWait };
    let a = 0;
    for (let i = 0; i < 30; i++) if ((await isolate.admit([check(20, 60_000, "key:a")], opts)).ok) a++;
    let b = 0;
    for (let i = 0; i < 20; i++) if ((await isolate.admit([check(20, 60_000, "key:b")], opts)).ok) b++;
    expect(a).toBe(20);
    expect(b).toBe(20);
    const refused = await isolate.admit([check(20, 60_000, "key:a")], opts);
    expect(refused.ok).toBe(false);
    if (!refused.ok) expect(refused.retryAfterMs).toBeGreaterThan(0);
  });

  it("asks again after a lease TTL once refused, so allowance another isolate gives back is used", async () => {
    const stub = limiterObject();
    const settings = { maxShare: 0.005, ttlMs: 50 };
    const isolate = new IsolateLimiter(() => stub, settings);
    const opts = { fast: false, failClosed: false, waitUntil: noWait };
    const c = check(10, 3_600_000);
    for (let i = 0; i < 10; i++) expect((await isolate.admit([c], opts)).ok).toBe(true);
    const refused = await isolate.admit([c], opts);
    expect(refused.ok).toBe(false);
    // One unit is back only after 6 minutes of refill, and a refusal within the TTL says so without a call.
    if (!refused.ok) expect(refused.retryAfterMs).toBeGreaterThan(300_000);
    expect((await isolate.admit([c], opts)).ok).toBe(false);
    // Another isolate returns a unit it leased earlier.
    await stub.lease([{ bucket: c.bucket, need: 0, want: 0, returned: 1, debt: 0 }]);
    await new Promise((r) => setTimeout(r, 60));
    expect((await isolate.admit([c], opts)).ok).toBe(true);
  });

  it("falls back to a share of the limit when its object is unreachable, or refuses when told to fail closed", async () => {
    const broken = { lease: () => Promise.reject(new Error("overloaded")) };
    const isolate = new IsolateLimiter(() => broken, SETTINGS);
    const c = check(80, 60_000);
    let open = 0;
    for (let i = 0; i < 30; i++)
      if ((await isolate.admit([c], { fast: false, failClosed: false, waitUntil: noWait })).ok) open++;
    expect(open).toBe(10); // an eighth of the limit, in this isolate alone
    const closed = await isolate.admit([{ ...c, identity: "key:k2" }], {
      fast: false,
      failClosed: true,
      waitUntil: noWait,
    });
    expect(closed).toMatchObject({ ok: false, unavailable: true });
  });
});

describe("RateLimit header fields", () => {
  it("lists every policy and reports the one closest to its limit", () => {
    const headers = rateLimitHeaders([
      { policy: "tab-key", limit: 300, windowSeconds: 60, remaining: 250, resetSeconds: 10 },
      { policy: "tab-user", limit: 100, windowSeconds: 60, remaining: 5, resetSeconds: 57 },
    ]);
    expect(headers["RateLimit-Policy"]).toBe('"tab-key";q=300;w=60, "tab-user";q=100;w=60');
    expect(headers.RateLimit).toBe('"tab-user";r=5;t=57');
    expect(rateLimitHeaders([])).toEqual({});
  });
});

describe("several buckets of one identity", () => {
  it("leases a bucket created while a lease of the identity is in flight", async () => {
    const stub = limiterObject();
    const isolate = new IsolateLimiter(() => stub, SETTINGS);
    const pending: Promise<unknown>[] = [];
    const requests = check(1_000, 60_000);
    const tokens: Check = {
      ...requests,
      policy: "chat-tokens-key",
      bucket: { name: "chat:tokens", limit: 4_000_000, windowMs: 3_600_000 },
    };
    const decision = await isolate.admit([requests, tokens], {
      fast: false,
      failClosed: false,
      waitUntil: (p) => pending.push(p),
    });
    expect(decision.ok).toBe(true);
    await Promise.all(pending);
  });
});

describe("charging tokens after the response", () => {
  it("calls the limiter object for debt or a lease running low only, and once for a burst", async () => {
    const stub = limiterObject();
    let calls = 0;
    const counted: LimiterStub = {
      lease(requests) {
        calls++;
        return stub.lease(requests);
      },
    };
    const isolate = new IsolateLimiter(() => counted, SETTINGS);
    const tokens = {
      identity: "key:t",
      policy: "chat-tokens-key",
      bucket: { name: "chat:tokens", limit: 4_000_000, windowMs: 3_600_000 },
      describe: "test limit",
    };
    const pending: Promise<unknown>[] = [];
    const waitUntil = (p: Promise<unknown>) => void pending.push(p);
    const settle = () => Promise.all(pending.splice(0));

    // Nothing is leased yet, so each charge is debt: the burst shares one call, which settles the
    // debt and leases about a second's worth at the rate seen (500 tokens).
    for (let i = 0; i < 5; i++) isolate.charge(tokens, 100, waitUntil);
    expect(calls).toBe(0); // off the charging request's path
    await settle();
    expect(calls).toBe(1);
    // Charges the lease covers cost no call while more than half of it is left.
    isolate.charge(tokens, 100, waitUntil);
    isolate.charge(tokens, 100, waitUntil);
    await settle();
    expect(calls).toBe(1);
    // Below half: one call tops it up.
    isolate.charge(tokens, 100, waitUntil);
    await settle();
    expect(calls).toBe(2);
    // More than any lease holds (at most 0.5% of the limit, 20,000): the rest is debt, reported at once.
    isolate.charge(tokens, 50_000, waitUntil);
    await settle();
    expect(calls).toBe(3);
  });
});
