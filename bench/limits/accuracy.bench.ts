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
  console.log(lines.join("\n"));
});
