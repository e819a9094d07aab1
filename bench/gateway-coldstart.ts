/**
 * Recovery from a total outage: a tab pool of two simulated backends of capacity C each, offered
 * twice the pool's capacity by many users (a quarter of them on the pro plan) throughout. Goodput
 * is measured in steady state, then both backends go down (`refuse`) until the edge says the pool
 * is down, then come back. The edge should refill them gradually (slow start) and admit paid users
 * first (the recovery ramp), never sending a backend more than its capacity.
 *
 *   npx tsx bench/gateway-coldstart.ts      # C = 8, 40 users, ramp and slow start 10 s
 *
 * A refused client retries after a short fixed backoff rather than the answer's Retry-After (up to
 * the ramp's end), so that the offered load stays at twice the capacity through the recovery.
 */
import { pathToFileURL } from "node:url";
import type OpenAI from "openai";
import {
  FAST_PROBES,
  VIRGINIA,
  closedLoop,
  pct,
  sleep,
  streamCompletion,
  verdict,
  whole,
  withGateway,
  type BenchGateway,
  type BenchPart,
} from "./gateway-fixture.js";

export interface ColdStartOptions {
  /** Each backend's capacity C. Default 8. */
  capacity?: number;
  /** The pool's recovery ramp and slow start. Default 10 s each. */
  rampMs?: number;
  slowStartMs?: number;
  /** Accounts, a quarter of them pro. Default 40. */
  users?: number;
  /** Steady state measured before the outage. Default 8 s. */
  steadyMs?: number;
  /** Measured after the ramp and slow start are over. Default 4 s. */
  afterMs?: number;
  bucketMs?: number;
  /** A refused client waits this long before trying again. Default 100 ms. */
  backoffMs?: number;
  gateway?: BenchGateway;
}

const BACKENDS = ["coldstart-a", "coldstart-b"] as const;
const MODEL = "tab-coldstart";
const TOKENS = 8;
/** One completion on an idle backend: 50 ms to the first token, then 7 more at 100 tokens/s. */
const REQUEST_MS = 50 + (TOKENS - 1) * 10;
const PAID_SHARE = 0.25;

export function coldStartPart(options: Pick<ColdStartOptions, "capacity" | "rampMs" | "slowStartMs"> = {}): BenchPart {
  const capacity = options.capacity ?? 8;
  return {
    // 50 ms to the first token, 100 tokens/s: an 8-token completion takes about 120 ms.
    backends: BACKENDS.map((id) => ({ id, ttftMs: 50, tokensPerSecond: 100, completionTokens: TOKENS, capacity })),
    // Probes every quarter second: the pool is seen down, and back, without waiting on the default 5 s.
    health: FAST_PROBES,
    pools: (urls) => ({
      "bench-coldstart": {
        role: "tab",
        models: [MODEL],
        fim: "qwen2.5-coder",
        endpoints: BACKENDS.map((id) => ({
          id,
          region: "us-east",
          ...VIRGINIA,
          url: urls[id]!,
          model: "sim-model",
          kind: "vllm" as const,
          capacity,
        })),
        recovery: { rampMs: options.rampMs ?? 10_000, slowStartMs: options.slowStartMs ?? 10_000 },
      },
    }),
  };
}

interface Attempt {
  /** Ms since the run started. */
  start: number;
  end: number;
  paid: boolean;
  ok: boolean;
}

export interface ColdStartFigures {
  capacity: number;
  clients: number;
  users: { paid: number; free: number };
  rampMs: number;
  slowStartMs: number;
  bucketMs: number;
  backoffMs: number;
  /** Completions per second before the outage. */
  steadyGoodput: number;
  /** What the two backends could serve at capacity, completions per second. */
  ceiling: number;
  /** From the backends refusing to the edge answering "down". */
  downAfterMs: number;
  /** Highest in flight on each backend from recovery to the end of slow start, and after it. */
  peaks: Record<string, { ramp: number; after: number }>;
  /** Completions per second in each bucket from the recovery on. */
  goodput: number[];
  /** From recovery to the end of the first bucket at 90% of the steady goodput; null if never. */
  to90Ms: number | null;
  /** Completions that started during the ramp, and what was offered, by plan. */
  ramp: { paidOk: number; paidOffered: number; freeOk: number; freeOffered: number };
  /** After the ramp, the same. */
  after: { paidOk: number; paidOffered: number; freeOk: number; freeOffered: number };
}

export async function runColdStart(options: ColdStartOptions = {}): Promise<ColdStartFigures> {
  const o = {
    capacity: 8,
    rampMs: 10_000,
    slowStartMs: 10_000,
    users: 40,
    steadyMs: 8_000,
    afterMs: 4_000,
    bucketMs: 500,
    backoffMs: 100,
    ...options,
  };
  return withGateway(coldStartPart(o), options, async (gw) => {
    const paidCount = Math.max(1, Math.round(o.users * PAID_SHARE));
    const accounts: { paid: boolean; client: OpenAI }[] = [];
    for (let i = 0; i < o.users; i++) {
      const paid = i < paidCount;
      const account = await gw.account(paid ? "pro" : "free");
      accounts.push({ paid, client: gw.openai({ apiKey: account.apiKey, timeout: 30_000 }) });
    }
    const clients = 2 * 2 * o.capacity;
    const t0 = performance.now();
    const at = () => performance.now() - t0;
    const attempts: Attempt[] = [];
    let next = 0;
    let stop = false;
    let downAt: number | undefined;
    const load = closedLoop(
      clients,
      () => !stop,
      async () => {
        const user = accounts[next++ % accounts.length]!;
        const start = at();
        const r = await streamCompletion(user.client, {
          model: MODEL,
          prompt: "def f(",
          suffix: "):\n",
          max_tokens: TOKENS,
        });
        const ok = whole(r, TOKENS);
        attempts.push({ start, end: at(), paid: user.paid, ok });
        if (r.error?.status === 503 && /down/.test(r.error.message)) downAt ??= at();
        if (!ok) await sleep(o.backoffMs);
      },
    );
    try {
      await sleep(1_000 + o.steadyMs);
      const outage = at();
      for (const id of BACKENDS) await gw.backends.configure(id, { fault: { type: "refuse" } });
      const deadline = performance.now() + 30_000;
      while (downAt === undefined && performance.now() < deadline) await sleep(20);
      if (downAt === undefined) throw new Error("the edge never reported the pool down");
      // A moment down, as after a real outage, then both come back together.
      await sleep(500);
      for (const id of BACKENDS) await gw.backends.configure(id, { fault: { type: "none" } });
      for (const id of BACKENDS) await gw.backends.resetPeak(id);
      const recovery = at();
      const window = Math.max(o.rampMs, o.slowStartMs);
      await sleep(window);
      const rampPeaks = await Promise.all(BACKENDS.map((id) => gw.backends.peak(id)));
      for (const id of BACKENDS) await gw.backends.resetPeak(id);
      await sleep(o.afterMs);
      const afterPeaks = await Promise.all(BACKENDS.map((id) => gw.backends.peak(id)));
      stop = true;
      await load;

      const completions = (from: number, to: number) =>
        attempts.filter((a) => a.ok && a.end >= from && a.end < to).length;
      const steadyGoodput = (completions(1_000, outage) * 1000) / (outage - 1_000);
      const goodput: number[] = [];
      for (let from = recovery; from + o.bucketMs <= recovery + window + o.afterMs; from += o.bucketMs)
        goodput.push((completions(from, from + o.bucketMs) * 1000) / o.bucketMs);
      const first90 = goodput.findIndex((g) => g >= 0.9 * steadyGoodput);
      const split = (from: number, to: number) => {
        const within = attempts.filter((a) => a.start >= from && a.start < to);
        const of = (paid: boolean) => within.filter((a) => a.paid === paid);
        return {
          paidOk: of(true).filter((a) => a.ok).length,
          paidOffered: of(true).length,
          freeOk: of(false).filter((a) => a.ok).length,
          freeOffered: of(false).length,
        };
      };
      return {
        capacity: o.capacity,
        clients,
        users: { paid: paidCount, free: o.users - paidCount },
        rampMs: o.rampMs,
        slowStartMs: o.slowStartMs,
        bucketMs: o.bucketMs,
        backoffMs: o.backoffMs,
        steadyGoodput,
        ceiling: (2 * o.capacity * 1000) / REQUEST_MS,
        downAfterMs: downAt - outage,
        peaks: Object.fromEntries(BACKENDS.map((id, i) => [id, { ramp: rampPeaks[i]!, after: afterPeaks[i]! }])),
        goodput,
        to90Ms: first90 < 0 ? null : (first90 + 1) * o.bucketMs,
        ramp: split(recovery, recovery + o.rampMs),
        after: split(recovery + window, recovery + window + o.afterMs),
      };
    } finally {
      stop = true;
      await load;
    }
  });
}

export function reportColdStart(f: ColdStartFigures): string {
  const admitted = (s: ColdStartFigures["ramp"]) => {
    const ok = s.paidOk + s.freeOk;
    return (
      `${ok} completions: paid ${s.paidOk} (${pct(s.paidOk, ok)} of completions; ${pct(s.paidOk, s.paidOffered)} of ${s.paidOffered} paid attempts), ` +
      `free ${s.freeOk} (${pct(s.freeOk, ok)}; ${pct(s.freeOk, s.freeOffered)} of ${s.freeOffered} free attempts)`
    );
  };
  const peaksOk = Object.values(f.peaks).every((p) => p.ramp <= f.capacity && p.after <= f.capacity);
  return [
    `gateway cold start: tab pool of 2 simulated backends, capacity C = ${f.capacity} each; ${f.clients} closed-loop clients (2x capacity) over ${f.users.paid + f.users.free} users (${f.users.paid} pro, ${f.users.free} free); recovery ramp ${f.rampMs / 1000} s, slow start ${f.slowStartMs / 1000} s; refused clients retry after ${f.backoffMs} ms (fixed)`,
    `steady-state goodput before the outage: ${f.steadyGoodput.toFixed(1)} completions/s (the backends' ceiling: ${f.ceiling.toFixed(0)}/s); pool reported down ${Math.round(f.downAfterMs)} ms after both backends went down`,
    `peak in flight from recovery to the end of slow start (after it): ${Object.entries(f.peaks)
      .map(([id, p]) => `${id} ${p.ramp} (${p.after})`)
      .join(", ")}; <= C ${verdict(peaksOk)}`,
    `goodput after recovery, completions/s per ${f.bucketMs} ms: ${f.goodput.map((g) => g.toFixed(0)).join(" ")}`,
    `recovery to 90% of steady goodput: ${f.to90Ms === null ? "never within the run" : `${(f.to90Ms / 1000).toFixed(1)} s`} (first bucket at or above ${(0.9 * f.steadyGoodput).toFixed(1)}/s)`,
    `during the ramp: ${admitted(f.ramp)}`,
    `after the ramp:  ${admitted(f.after)}`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(reportColdStart(await runColdStart()));
}
