import { env, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { adminCall, call, createAccount, expectProblem } from "./harness.js";

/**
 * Dependencies of the request path failing for real, through the Worker's own routes: D1 when an
 * API key is looked up, and a limiter object whose calls fail. Nothing is stubbed: the table is
 * renamed in the real local D1, and the limiter object's own SQLite refuses its writes.
 */

afterEach(() => {
  vi.restoreAllMocks();
});

/** The limiter object of `identity` ("key:<id>", …): the one the Worker's isolate leases from. */
const limiterOf = (identity: string) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(identity));

/**
 * Runs `work` while the limiter object of `identity` fails every lease: a trigger in its own
 * SQLite aborts each write of a bucket, so each call into it throws, as an object that cannot
 * be reached does, and the isolate decides from its fallback.
 */
async function withLimiterFailing<T>(identity: string, work: () => Promise<T>): Promise<T> {
  const stub = limiterOf(identity);
  await runInDurableObject(stub, (_object, state) => {
    state.storage.sql.exec(
      "CREATE TRIGGER unreachable BEFORE INSERT ON buckets BEGIN SELECT RAISE(ABORT, 'limiter storage unavailable'); END",
    );
  });
  try {
    return await work();
  } finally {
    await runInDurableObject(stub, (_object, state) => {
      state.storage.sql.exec("DROP TRIGGER unreachable");
    });
  }
}

describe("D1 unavailable during an API key's lookup", () => {
  it("answers 503 `unavailable` with Retry-After for a key it must look up, and keeps serving a cached one", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    const cached = await createAccount();
    const fresh = await createAccount();
    // In this isolate's key cache from now on: its requests need no D1 for the cache's TTL.
    expect((await call("/v1/me", { token: cached.key.key })).status).toBe(200);

    // A real D1 failure, not a mocked binding: the keys' table is briefly missing.
    await env.DB.exec("ALTER TABLE api_keys RENAME TO api_keys_away");
    let refused: Response;
    let served: Response;
    try {
      refused = await call("/v1/me", { token: fresh.key.key });
      served = await call("/v1/me", { token: cached.key.key });
    } finally {
      await env.DB.exec("ALTER TABLE api_keys_away RENAME TO api_keys");
    }
    const retryAfter = refused.headers.get("Retry-After");
    const problem = await expectProblem(refused, 503, "unavailable");
    expect(problem.detail).toMatch(/API keys cannot be checked/);
    expect(Number(retryAfter)).toBeGreaterThan(0);
    expect(served.status).toBe(200);
    // The failure is logged for the operator, without the key.
    const logged = errors.mock.calls.map((args) => String(args[0]));
    expect(logged.some((line) => line.includes("API key lookup failed"))).toBe(true);
    expect(logged.join("\n")).not.toContain(fresh.key.key);

    // The same key is looked up and admitted once D1 answers again.
    expect((await call("/v1/me", { token: fresh.key.key })).status).toBe(200);
  }, 30_000);
});

describe("D1 refusing a key's last-used write", () => {
  it("serves the request and logs the failed write, which nothing else awaits", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    const { key } = await createAccount();
    // A real D1 failure of that write alone: the lookup reads the key, the update is aborted.
    await env.DB.exec(
      "CREATE TRIGGER last_used_refused BEFORE UPDATE OF last_used_at ON api_keys BEGIN SELECT RAISE(ABORT, 'last-used refused'); END",
    );
    try {
      expect((await call("/v1/me", { token: key.key })).status).toBe(200);
      // The write runs after the response, under waitUntil: its rejection would otherwise be the
      // runtime's uncaught exception, which nobody reads.
      await vi.waitFor(
        () => {
          const logged = errors.mock.calls.map((args) => String(args[0]));
          expect(logged.some((line) => line.includes("API key last-used update failed"))).toBe(true);
          expect(logged.join("\n")).not.toContain(key.key);
        },
        { timeout: 10_000, interval: 50 },
      );
    } finally {
      await env.DB.exec("DROP TRIGGER last_used_refused");
    }
  }, 30_000);
});

describe("limiter objects that cannot be reached", () => {
  it("refuses the admin class, which fails closed, with 503 `unavailable` and Retry-After", async () => {
    vi.spyOn(console, "error").mockImplementation(() => {});
    const { key } = await createAccount();
    const refused = await withLimiterFailing(`key:${key.id}`, () => call("/v1/me", { token: key.key }));
    const retryAfter = refused.headers.get("Retry-After");
    const problem = await expectProblem(refused, 503, "unavailable");
    expect(problem.detail).toMatch(/Rate limits cannot be checked/);
    expect(Number(retryAfter)).toBeGreaterThan(0);
  }, 30_000);

  it("admits a class that fails open up to an eighth of its limit in this isolate, then 429 with Retry-After", async () => {
    const errors = vi.spyOn(console, "error").mockImplementation(() => {});
    const { org, key } = await createAccount();
    // 16 an hour: the fallback admits 2, and refills too slowly to admit a third while this runs.
    const patched = await adminCall(`/orgs/${org.id}`, {
      method: "PATCH",
      body: { limits: { index: { key: { requests: { limit: 16, windowSeconds: 3600 } } } } },
    });
    expect(patched.status).toBe(200);

    const statuses = await withLimiterFailing(`key:${key.id}`, async () => {
      const answers: Response[] = [];
      for (let i = 0; i < 3; i++) answers.push(await call("/v1/workspaces", { token: key.key }));
      return answers;
    });
    const [first, second, third] = statuses;
    expect(first!.status, await first!.text()).toBe(200);
    expect(second!.status, await second!.text()).toBe(200);
    const retryAfter = third!.headers.get("Retry-After");
    const problem = await expectProblem(third!, 429, "rate_limited");
    expect(problem.limit).toBe("index-key");
    expect(Number(retryAfter)).toBeGreaterThan(0);
    // The isolate did ask the object, and fell back because the call failed.
    const logged = errors.mock.calls.map((args) => String(args[0]));
    expect(logged.some((line) => line.includes("rate limiter unreachable"))).toBe(true);
  }, 30_000);
});
