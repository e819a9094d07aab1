import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";

const LIMITS = { concurrentTasks: 2, dailySandboxSeconds: 100 };
let objects = 0;
/** A fresh quota object (real Durable Object, real SQLite) per test. */
const quota = () => env.AGENT_QUOTA.get(env.AGENT_QUOTA.idFromName(`org-${++objects}-${crypto.randomUUID()}`));
const later = () => Date.now() + 3_600_000;

describe("an org's agent quota", () => {
  it("holds the org to its tasks at once, and frees a slot when a task settles", async () => {
    const q = quota();
    expect(await q.reserve("t1", 10, later(), LIMITS)).toEqual({ ok: true });
    expect(await q.reserve("t2", 10, later(), LIMITS)).toEqual({ ok: true });
    expect(await q.reserve("t3", 10, later(), LIMITS)).toMatchObject({ ok: false, limit: "agent-concurrency" });
    await q.settle("t1", 4);
    expect(await q.reserve("t3", 10, later(), LIMITS)).toEqual({ ok: true });
    expect(await q.usage()).toEqual({ running: 2, sandboxSecondsToday: 24 });
  });

  it("reserves a task's whole sandbox budget, and takes back what it did not use", async () => {
    const q = quota();
    expect(await q.reserve("a", 80, later(), LIMITS)).toEqual({ ok: true });
    const refused = await q.reserve("b", 30, later(), LIMITS);
    expect(refused).toMatchObject({ ok: false, limit: "agent-sandbox-seconds" });
    // Until the next UTC midnight.
    expect((refused as { retryAfterSeconds: number }).retryAfterSeconds).toBeLessThanOrEqual(86_400);
    await q.settle("a", 12.5);
    expect(await q.reserve("b", 30, later(), LIMITS)).toEqual({ ok: true });
    expect((await q.usage()).sandboxSecondsToday).toBe(42.5);
  });

  it("settles once, and never for more than was reserved", async () => {
    const q = quota();
    await q.reserve("a", 10, later(), LIMITS);
    await q.settle("a", 50);
    await q.settle("a", 1);
    expect(await q.usage()).toEqual({ running: 0, sandboxSecondsToday: 10 });
  });

  it("lets a reservation never settled lapse at its expiry, counted in full", async () => {
    const q = quota();
    await q.reserve("lost", 40, Date.now() - 1, LIMITS);
    expect(await q.usage()).toEqual({ running: 0, sandboxSecondsToday: 40 });
    expect(await q.reserve("next", 60, later(), LIMITS)).toEqual({ ok: true });
    expect(await q.reserve("over", 1, later(), LIMITS)).toMatchObject({ ok: false, limit: "agent-sandbox-seconds" });
  });

  it("keeps one reservation per task, however often it is asked", async () => {
    const q = quota();
    await q.reserve("a", 10, later(), LIMITS);
    await q.reserve("a", 10, later(), LIMITS);
    expect(await q.usage()).toEqual({ running: 1, sandboxSecondsToday: 10 });
  });
});
