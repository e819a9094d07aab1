/**
 * What rate limiting adds to the tab path: the same completion through the real local edge for
 * an org whose tab requests spend their key's and user's limits and for an org whose overrides
 * switch tab limits off, in pairs (alternating which goes first), against a simulated backend.
 * `npx tsx bench/limits-overhead.ts [pairs]`.
 */
import { fileURLToPath } from "node:url";
import { lease, type LeaseRequest } from "../durable-objects/buckets.js";
import { VIRGINIA, startGateway } from "../test/support/gateway.js";
import { IsolateLimiter, type Check } from "../workers/limits/limiter.js";
import { fmt, quantile } from "./stats.js";

export interface LimitsOverhead {
  pairs: number;
  on: { p50: number; p99: number };
  off: { p50: number; p99: number };
  added: { p50: number; p99: number };
  refused: number;
}

const roomy = { requests: { limit: 10_000_000, windowSeconds: 60 } };

export async function runLimitsOverhead(pairs = 1000): Promise<LimitsOverhead> {
  const gw = await startGateway(
    [{ id: "sim", models: ["sim-coder"], capacity: 1000, maxConcurrency: 2000, ttftMs: 0, tokensPerSecond: 100_000 }],
    (urls) => ({
      pools: {
        tab: {
          role: "tab",
          models: ["tab-bench"],
          fim: "qwen2.5-coder",
          endpoints: [
            {
              id: "sim",
              region: "us-east",
              ...VIRGINIA,
              url: urls.sim!,
              model: "sim-coder",
              kind: "vllm",
              capacity: 1000,
            },
          ],
        },
      },
    }),
    // Limits nobody reaches, so that every request is admitted and only their cost is measured.
    { RATE_LIMITS: JSON.stringify({ plans: { pro: { tab: { key: roomy, user: roomy } } } }) },
  );
  try {
    const limited = await gw.account("pro");
    const free = await gw.account("pro");
    await gw.admin.orgs.update(free.orgId, { limits: { tab: {} } });
    const body = JSON.stringify({ model: "tab-bench", prompt: "def f(", suffix: ")", max_tokens: 2 });
    const send = async (apiKey: string) => {
      const started = performance.now();
      const response = await fetch(`${gw.edge.baseURL}/v1/completions`, {
        method: "POST",
        headers: { Authorization: `Bearer ${apiKey}`, "Content-Type": "application/json" },
        body,
      });
      await response.arrayBuffer();
      return { ms: performance.now() - started, status: response.status };
    };
    // Warm both paths (key cache, leases, connections).
    for (let i = 0; i < 50; i++) await Promise.all([send(limited.apiKey), send(free.apiKey)]);
    const on: number[] = [];
    const off: number[] = [];
    const added: number[] = [];
    let refused = 0;
    for (let i = 0; i < pairs; i++) {
      const first = i % 2 === 0;
      const a = first ? await send(limited.apiKey) : undefined;
      const b = await send(free.apiKey);
      const c = a ?? (await send(limited.apiKey));
      if (c.status !== 200) refused++;
      on.push(c.ms);
      off.push(b.ms);
      added.push(c.ms - b.ms);
    }
    return {
      pairs,
      on: { p50: quantile(on, 0.5), p99: quantile(on, 0.99) },
      off: { p50: quantile(off, 0.5), p99: quantile(off, 0.99) },
      added: { p50: quantile(added, 0.5), p99: quantile(added, 0.99) },
      refused,
    };
  } finally {
    await gw.stop();
  }
}

export interface LimiterCost {
  admissions: number;
  p50us: number;
  p99us: number;
  maxUs: number;
  waited: number;
}

/**
 * The limiter's own time per tab admission, without the local edge's noise: the isolate-side
 * limiter (the code every tab request runs) admitting a steady 500 requests/s of one key against a
 * limit it never reaches, with three checks per request as a
 * pro key has. The limiter object is stood in for by the same lease arithmetic behind a 2 ms
 * delay (labelled: this part runs in Node, not workerd). `waited` counts admissions that had to
 * wait for a lease.
 */
export async function runLimiterCost(admissions = 20_000): Promise<LimiterCost> {
  const buckets = new Map<string, Parameters<typeof lease>[0]>();
  const standIn = {
    lease: async (requests: LeaseRequest[]) => {
      await new Promise((r) => setTimeout(r, 2));
      const now = Date.now();
      const grants = requests.map((request) => {
        let bucket = buckets.get(request.bucket.name);
        if (!bucket)
          buckets.set(
            request.bucket.name,
            (bucket = {
              tokens: request.bucket.limit,
              at: now,
              limit: request.bucket.limit,
              windowMs: request.bucket.windowMs,
            }),
          );
        return lease(bucket, request, now);
      });
      return { grants, throttle: null };
    },
  };
  const limiter = new IsolateLimiter(() => standIn, { maxShare: 0.005, ttlMs: 1_000 });
  const check = (identity: string, name: string): Check => ({
    identity,
    policy: name,
    bucket: { name: `tab:${name}`, limit: 1_000_000, windowMs: 60_000 },
    cost: 1,
    describe: name,
  });
  const checks = [check("key:k", "requests"), check("user:u", "requests"), check("org:o", "requests")];
  const times: number[] = [];
  let waited = 0;
  const pending: Promise<unknown>[] = [];
  const started = performance.now();
  for (let i = 0; i < admissions; i++) {
    const due = started + i * 2; // 500 requests a second
    const delay = due - performance.now();
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    const t = performance.now();
    const decision = await limiter.admit(checks, { fast: true, failClosed: false, waitUntil: (p) => pending.push(p) });
    const took = performance.now() - t;
    if (took > 1) waited++;
    if (!decision.ok) throw new Error("refused below the limit");
    times.push(took * 1000);
  }
  await Promise.all(pending);
  return {
    admissions,
    p50us: quantile(times, 0.5),
    p99us: quantile(times, 0.99),
    maxUs: Math.max(...times),
    waited,
  };
}

export function reportLimiterCost(r: LimiterCost): string {
  return [
    `Limiter's own time per tab admission (${r.admissions.toLocaleString("en-US")} admissions at 500/s, 3 checks each; Node, limiter object stood in for by its lease arithmetic behind a 2 ms delay)`,
    `  p50 ${r.p50us.toFixed(1)} µs, p99 ${r.p99us.toFixed(1)} µs, max ${(r.maxUs / 1000).toFixed(2)} ms; admissions that waited for a lease: ${r.waited}`,
  ].join("\n");
}

export function reportLimitsOverhead(r: LimitsOverhead): string {
  return [
    `Limiter overhead on the tab path (${r.pairs} pairs, one at a time, through the local edge to a simulated backend)`,
    `  limits on:  p50 ${fmt(r.on.p50)} ms, p99 ${fmt(r.on.p99)} ms (${r.refused} refused)`,
    `  limits off: p50 ${fmt(r.off.p50)} ms, p99 ${fmt(r.off.p99)} ms`,
    `  added (paired difference): p50 ${fmt(r.added.p50)} ms, p99 ${fmt(r.added.p99)} ms (target: under 0.5 ms and 2 ms)`,
  ].join("\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  console.log(reportLimiterCost(await runLimiterCost()));
  console.log(reportLimitsOverhead(await runLimitsOverhead(Number(process.argv[2] ?? 1000))));
}
