import { env } from "cloudflare:test";
import { expect, it } from "vitest";
import { IsolateLimiter, type Check } from "../../workers/limits/limiter.js";

/**
 * Limiter accuracy: 8 simulated isolates, each an isolate-side limiter with its own leases,
 * burst against one limiter object at once; admitted requests are compared with the limit.
 * Then a compliant client (90% of its limit, spread over the 8) must never be refused.
 * `LIMITS_BENCH_SCALE` multiplies the request counts (1 = the full run).
 */
const SETTINGS = { maxShare: 0.005, ttlMs: 1_000 };
const ISOLATES = 8;
const scale = Number((env as unknown as { LIMITS_BENCH_SCALE: string }).LIMITS_BENCH_SCALE);

function stub() {
  return env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`bench-${crypto.randomUUID()}`));
}

const check = (limit: number, windowMs: number): Check => ({
  identity: "key:bench",
  policy: "tab-key",
  bucket: { name: "tab:requests", limit, windowMs },
  cost: 1,
  describe: "bench",
});

async function burst(limit: number, fast: boolean) {
  const object = stub();
  const isolates = Array.from({ length: ISOLATES }, () => new IsolateLimiter(() => object, SETTINGS));
  const windowMs = 3_600_000;
  const perIsolate = Math.ceil((limit * 2) / ISOLATES);
  const pending: Promise<unknown>[] = [];
  let admitted = 0;
  const started = Date.now();
  await Promise.all(
    isolates.map(async (isolate) => {
      for (let i = 0; i < perIsolate; i++) {
        const d = await isolate.admit([check(limit, windowMs)], {
          fast,
          failClosed: false,
          waitUntil: (p) => pending.push(p),
        });
        if (d.ok) admitted++;
      }
    }),
  );
  await Promise.all(pending);
  const elapsed = Date.now() - started;
  const allowed = limit + (elapsed * limit) / windowMs;
  return { limit, offered: perIsolate * ISOLATES, admitted, allowed, elapsed };
}

async function compliant(limit: number, windowMs: number, seconds: number) {
  const object = stub();
  const isolates = Array.from({ length: ISOLATES }, () => new IsolateLimiter(() => object, SETTINGS));
  const rate = (0.9 * limit) / (windowMs / 1000);
  const total = Math.round(rate * seconds);
  const pending: Promise<unknown>[] = [];
  let refused = 0;
  const started = Date.now();
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / rate;
    await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now())));
    const d = await isolates[i % ISOLATES]!.admit([check(limit, windowMs)], {
      fast: true,
      failClosed: false,
      waitUntil: (p) => pending.push(p),
    });
    if (!d.ok) refused++;
  }
  await Promise.all(pending);
  return { limit, windowMs, sent: total, refused };
}

/**
 * 8 isolates with 16 requests in flight in each, 2x the limit offered: what is admitted, and how
 * many refusals came while the limit still had quota (admitted plus in flight below the limit).
 */
async function concurrentBurst(limit: number, fast: boolean) {
  const object = stub();
  const isolates = Array.from({ length: ISOLATES }, () => new IsolateLimiter(() => object, SETTINGS));
  const pending: Promise<unknown>[] = [];
  let offered = 0;
  let admitted = 0;
  let inflight = 0;
  let early = 0;
  const total = limit * 2;
  await Promise.all(
    isolates.flatMap((isolate) =>
      Array.from({ length: 16 }, async () => {
        while (offered < total) {
          offered++;
          inflight++;
          const d = await isolate.admit([check(limit, 3_600_000)], {
            fast,
            failClosed: false,
            waitUntil: (p) => pending.push(p),
          });
          inflight--;
          if (d.ok) admitted++;
          else if (admitted + inflight < limit) early++;
        }
      }),
    ),
  );
  await Promise.all(pending);
  return { admitted, early, offered };
}

/**
 * A tokens limit: requests reserve `reserve` tokens, use 25% to 100% of it, and settle after a
 * few milliseconds; `concurrency` in flight in each of the 8 isolates, until each sender is refused.
 */
async function tokens(limit: number, reserve: number, concurrency: number) {
  const object = stub();
  const isolates = Array.from({ length: ISOLATES }, () => new IsolateLimiter(() => object, SETTINGS));
  const pending: Promise<unknown>[] = [];
  const c: Check = {
    identity: "key:bench",
    policy: "chat-tokens-key",
    bucket: { name: "chat:tokens", limit, windowMs: 3_600_000 },
    cost: reserve,
    describe: "bench",
  };
  let used = 0;
  let requests = 0;
  let seed = 7;
  const share = () => 0.25 + 0.75 * ((seed = (seed * 48271) % 2147483647) / 2147483647);
  await Promise.all(
    isolates.flatMap((isolate) =>
      Array.from({ length: concurrency }, async () => {
        for (;;) {
          const d = await isolate.admit([c], { fast: false, failClosed: false, waitUntil: (p) => pending.push(p) });
          if (!d.ok) return;
          requests++;
          await new Promise((r) => setTimeout(r, 2));
          const actual = Math.round(reserve * share());
          used += actual;
          isolate.refund(c, reserve - actual);
        }
      }),
    ),
  );
  await Promise.all(pending);
  return { limit, reserve, concurrency, used, requests };
}

it("limiter accuracy with 8 isolates bursting", async () => {
  const lines = [
    `Limiter accuracy: ${ISOLATES} simulated isolates bursting at 2x the limit against one limiter object`,
  ];
  for (const fast of [true, false]) {
    for (const limit of [100, 1_000, 10_000].map((l) => Math.max(50, Math.round(l * Math.min(1, scale))))) {
      const r = await burst(limit, fast);
      const error = (r.admitted - r.allowed) / r.allowed;
      lines.push(
        `  ${fast ? "fast path (tab)" : "waiting path   "} | limit ${r.limit.toLocaleString("en-US")} | offered ${r.offered.toLocaleString("en-US")} | admitted ${r.admitted.toLocaleString("en-US")} | ${error >= 0 ? "+" : ""}${(error * 100).toFixed(1)}% vs limit | ${r.elapsed} ms`,
      );
      expect(r.admitted).toBeGreaterThan(0);
    }
  }
  const seconds = scale >= 1 ? 10 : 2;
  const c = await compliant(100, 2_000, seconds);
  lines.push(
    `  compliant client at 90% of ${c.limit} per ${c.windowMs / 1000} s over ${seconds} s: ${c.sent} sent, ${c.refused} refused`,
  );
  lines.push(`8 isolates, 16 requests in flight in each, 2x the limit offered:`);
  for (const fast of [true, false]) {
    for (const limit of [100, 1_000].map((l) => Math.max(50, Math.round(l * Math.min(1, scale))))) {
      const r = await concurrentBurst(limit, fast);
      lines.push(
        `  ${fast ? "fast path (tab)" : "waiting path   "} | limit ${limit.toLocaleString("en-US")} | offered ${r.offered} | admitted ${r.admitted} | refused while quota was left: ${r.early}`,
      );
      expect(r.admitted).toBeGreaterThan(0);
    }
  }
  lines.push(`Tokens limit, 8 isolates, requests reserving 500 and using 25-100% of it, until each sender is refused:`);
  for (const concurrency of [1, 8]) {
    const r = await tokens(20_000, 500, concurrency);
    lines.push(
      `  ${concurrency} in flight per isolate | limit ${r.limit.toLocaleString("en-US")} | ${r.requests} requests | used ${r.used.toLocaleString("en-US")} (${r.used > r.limit ? "+" : ""}${(r.used - r.limit).toLocaleString("en-US")}, one reservation is ${r.reserve})`,
    );
  }
  console.log(lines.join("\n"));
});
