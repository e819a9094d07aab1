/**
 * How fast a client's cancellation reaches the GPU backend: streamed completions through the local
 * edge, aborted by the client after its first token; the simulated backend stamps when its
 * connection closed. Both stamps are on the `performance.timeOrigin + performance.now()` clock (the
 * simulator runs in this process), so their difference is the client-abort→upstream-abort latency.
 *
 *   npx tsx bench/gateway-cancel.ts   # at 100 and 20 tokens/s: 300 requests one at a time, 300 over 4 streams
 *
 * A closed connection is noticed when something is next written to it: a token, or the SSE comment
 * a stream sends after 20 ms without one. Two token rates show both: at 100 tokens/s the next token
 * comes first, at 20 tokens/s the comment does.
 *
 * That comment is what quick cancellation costs: the benchmark also holds streams open while the
 * backend has not sent their first token (a long prompt's prefill) and reads the CPU the edge spends
 * on them, against the same edge idle.
 */
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";
import {
  VIRGINIA,
  clock,
  closedLoop,
  sleep,
  verdict,
  quantileOf,
  withGateway,
  type BenchGateway,
  type BenchPart,
  type BenchRecord,
} from "./gateway-fixture.js";
import { HEARTBEAT_MS } from "../protocol/gateway.js";
import { fmt } from "./stats.js";

export interface CancelOptions {
  /** Requests per concurrency level. */
  requests?: number;
  /** Concurrent streams of each run. */
  concurrency?: number[];
  /** Token rates of the simulated backend, one set of runs each. */
  tokensPerSecond?: number[];
  /** Tokens read before the client aborts. */
  abortAfterTokens?: number;
  /** Streams held waiting for a first token, one run each, while the edge's CPU is read. */
  waitingStreams?: number[];
  /** How long each of those runs reads the edge's CPU, ms. */
  waitingMs?: number;
  gateway?: BenchGateway;
}

const BACKEND = "cancel";
const MODEL = "tab-cancel";
/** How long an upstream abort may take before the request counts as never aborted. */
const GRACE_MS = 5_000;
const STALL_MS = 10_000;
const TTFT_MS = 20;
export const CANCEL_TARGET_P99_MS = 50;

export function cancelPart(): BenchPart {
  return {
    // Long streams (the token rate is set per run): nothing ends by itself while the benchmark waits.
    backends: [{ id: BACKEND, ttftMs: TTFT_MS, completionTokens: 1_000, capacity: 1_000 }],
    pools: (urls) => ({
      "bench-cancel": {
        role: "tab",
        models: [MODEL],
        fim: "qwen2.5-coder",
        // Streams held before their first token must outlast the reading of the edge's CPU.
        timeouts: { firstByteMs: 60_000 },
        endpoints: [
          {
            id: BACKEND,
            region: "us-east",
            ...VIRGINIA,
            url: urls[BACKEND]!,
            model: "sim-model",
            kind: "vllm",
            capacity: 1_000,
          },
        ],
      },
    }),
  };
}

export interface CancelRun {
  tokensPerSecond: number;
  concurrency: number;
  requests: number;
  /** Streams that failed before the abort (no first token). */
  failed: number;
  /** Why they failed: an HTTP status the edge answered, "no first token" or the error's name, with a count each. */
  failures: Record<string, number>;
  /** Client abort to the backend seeing its connection close, ms. */
  p50: number;
  p99: number;
  max: number;
  /** Requests the backend never saw aborted within the grace period. */
  neverAborted: number;
}

/** The edge's CPU while streams wait for their first token: the heartbeat's cost. */
export interface WaitingRun {
  streams: number;
  /** The edge's processes, in percent of one core, with the streams waiting and idle just before. */
  cpuPercent: number;
  idleCpuPercent: number;
  /** CPU per waiting stream per second of waiting (idle subtracted), ms. */
  msPerStreamSecond: number;
  /** Streams that had no response headers when the reading began. */
  failed: number;
}

export interface CancelFigures {
  simulator: string;
  abortAfterTokens: number;
  graceMs: number;
  runs: CancelRun[];
  /** Empty where the edge's CPU cannot be read. */
  waiting: WaitingRun[];
}

type Attempt = { abortedAt: number } | { failure: string; retryAfterMs?: number };

/**
 * Streams until `tokens` token events arrived, then aborts: when it aborted (clock ms), or why the
 * stream failed (with how long the edge asked to wait, on a 429 or 503).
 */
async function streamAndAbort(gw: BenchGateway, requestId: string, tokens: number): Promise<Attempt> {
  const controller = new AbortController();
  // A request that never shows its first token counts as failed instead of holding the run.
  const timer = setTimeout(() => controller.abort(new Error("no first token")), STALL_MS);
  let abortedAt: number | undefined;
  try {
    const response = await fetch(`${gw.baseURL}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${gw.apiKey}`, "x-request-id": requestId },
      body: JSON.stringify({ model: MODEL, prompt: "def f(", suffix: "):\n", max_tokens: 1_000, stream: true }),
      signal: controller.signal,
    });
    if (!response.ok || !response.body) {
      await response.body?.cancel();
      const retryAfter = Number(response.headers.get("retry-after"));
      return {
        failure: String(response.status),
        ...(Number.isFinite(retryAfter) && retryAfter > 0 ? { retryAfterMs: retryAfter * 1000 } : {}),
      };
    }
    const decoder = new TextDecoder();
    let seen = 0;
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      seen += decoder.decode(chunk, { stream: true }).split('"text":"sim').length - 1;
      if (seen >= tokens) {
        abortedAt = clock();
        controller.abort();
        break;
      }
    }
  } catch (error) {
    // Leaving the loop after the abort rejects with the abort error; any other error is a failure.
    if (abortedAt !== undefined) return { abortedAt };
    return { failure: controller.signal.aborted ? "no first token" : (error as Error).name || "error" };
  } finally {
    clearTimeout(timer);
  }
  return abortedAt === undefined ? { failure: "ended before its tokens" } : { abortedAt };
}

/** The longest a refused request waits before the next try, whatever Retry-After says. */
const MAX_RETRY_WAIT_MS = 2_000;

async function measure(
  gw: BenchGateway,
  tokensPerSecond: number,
  concurrency: number,
  requests: number,
  tokens: number,
): Promise<CancelRun> {
  await gw.backends.configure(BACKEND, { tokensPerSecond });
  const prefix = `bench-cancel-${randomUUID()}`;
  const aborts = new Map<string, number>();
  const failures: Record<string, number> = {};
  let started = 0;
  let inFlight = 0;
  let failed = 0;
  // A request the edge refused (its limits still counting an earlier run's streams, a busy machine)
  // is tried again after the wait it asked for, up to four tries a request in all.
  await closedLoop(
    concurrency,
    () => aborts.size + inFlight < requests && started < requests * 4,
    async () => {
      const id = `${prefix}-${started++}`;
      inFlight++;
      try {
        const attempt = await streamAndAbort(gw, id, tokens);
        if ("abortedAt" in attempt) aborts.set(id, attempt.abortedAt);
        else {
          failed++;
          failures[attempt.failure] = (failures[attempt.failure] ?? 0) + 1;
          if (attempt.retryAfterMs !== undefined) await sleep(Math.min(MAX_RETRY_WAIT_MS, attempt.retryAfterMs));
        }
      } finally {
        inFlight--;
      }
    },
  );
  // The records hold every request this run made; wait for the stragglers' aborts, up to the grace.
  const deadline = performance.now() + GRACE_MS;
  let records: BenchRecord[] = [];
  for (;;) {
    records = (await gw.backends.records(BACKEND)).filter((r) => aborts.has(r.requestId));
    const settled = records.filter((r) => r.abortedAt !== undefined).length;
    if (settled >= aborts.size || performance.now() > deadline) break;
    await sleep(50);
  }
  const latencies = records
    .filter((r) => r.abortedAt !== undefined)
    .map((r) => r.abortedAt! - aborts.get(r.requestId)!);
  return {
    tokensPerSecond,
    concurrency,
    requests: aborts.size,
    failed,
    failures,
    p50: quantileOf(latencies, 0.5),
    p99: quantileOf(latencies, 0.99),
    max: latencies.length ? Math.max(...latencies) : Number.NaN,
    neverAborted: aborts.size - latencies.length,
  };
}

/** The edge's CPU, in percent of one core, over `ms`; undefined where it cannot be read. */
async function edgeCpuPercent(gw: BenchGateway, ms: number): Promise<number | undefined> {
  const before = gw.edgeCpuSeconds();
  const started = performance.now();
  await sleep(ms);
  const after = gw.edgeCpuSeconds();
  if (before === undefined || after === undefined) return undefined;
  return (100 * (after - before) * 1000) / (performance.now() - started);
}

/** Holds `streams` streams whose first token does not come, and reads the edge's CPU meanwhile. */
async function measureWaiting(gw: BenchGateway, streams: number, ms: number): Promise<WaitingRun | undefined> {
  const idle = await edgeCpuPercent(gw, ms);
  if (idle === undefined) return undefined;
  await gw.backends.configure(BACKEND, { ttftMs: 600_000 });
  const controller = new AbortController();
  let failed = 0;
  const open = await Promise.all(
    Array.from({ length: streams }, async () => {
      try {
        const response = await fetch(`${gw.baseURL}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${gw.apiKey}` },
          body: JSON.stringify({ model: MODEL, prompt: "def f(", suffix: "):\n", max_tokens: 1_000, stream: true }),
          signal: controller.signal,
        });
        if (!response.ok) failed++;
        // Reads the heartbeats as a client would, until the abort. (Wrapped: an async function
        // returning the promise itself would wait for the body's end.)
        return { done: response.arrayBuffer().catch(() => undefined) };
      } catch {
        failed++;
        return { done: Promise.resolve(undefined) };
      }
    }),
  );
  try {
    await sleep(300); // Every stream is past its start.
    const busy = (await edgeCpuPercent(gw, ms))!;
    return {
      streams,
      cpuPercent: busy,
      idleCpuPercent: idle,
      msPerStreamSecond: (10 * Math.max(0, busy - idle)) / streams,
      failed,
    };
  } finally {
    controller.abort();
    await Promise.all(open.map((o) => o.done));
    await gw.backends.configure(BACKEND, { ttftMs: TTFT_MS });
  }
}

export async function runCancel(options: CancelOptions = {}): Promise<CancelFigures> {
  const requests = options.requests ?? 300;
  const tokens = options.abortAfterTokens ?? 1;
  return withGateway(cancelPart(), options, async (gw) => {
    const rates = options.tokensPerSecond ?? [100, 20];
    await measure(gw, rates[0]!, 1, Math.min(20, requests), tokens);
    const runs: CancelRun[] = [];
    for (const rate of rates)
      for (const concurrency of options.concurrency ?? [1, 4])
        runs.push(await measure(gw, rate, concurrency, requests, tokens));
    const waiting: WaitingRun[] = [];
    for (const streams of options.waitingStreams ?? [50, 200]) {
      const run = await measureWaiting(gw, streams, options.waitingMs ?? 3_000);
      if (run) waiting.push(run);
    }
    return { simulator: gw.backends.mode, abortAfterTokens: tokens, graceMs: GRACE_MS, runs, waiting };
  });
}

export function reportCancel(f: CancelFigures): string {
  const lines = [
    `gateway cancellation: client aborts a streamed completion after ${f.abortAfterTokens} token${f.abortAfterTokens === 1 ? "" : "s"}; latency until the backend sees its connection close (simulator ${f.simulator}${f.simulator === "in-process" ? ", one clock" : ", two processes' clocks"})`,
    "tokens/s  token gap  streams  requests  failed   p50 ms   p99 ms   max ms  never aborted upstream",
  ];
  for (const r of f.runs)
    lines.push(
      `${String(r.tokensPerSecond).padStart(8)} ${`${fmt(1000 / r.tokensPerSecond)} ms`.padStart(10)} ${String(r.concurrency).padStart(8)} ${String(r.requests).padStart(9)} ${String(r.failed).padStart(7)} ${fmt(r.p50).padStart(8)} ${fmt(r.p99).padStart(8)} ${fmt(r.max).padStart(8)}  ${r.neverAborted} (within ${f.graceMs / 1000} s)`,
    );
  for (const r of f.runs)
    if (r.failed > 0)
      lines.push(
        `failed at ${r.tokensPerSecond} tokens/s, ${r.concurrency} stream${r.concurrency === 1 ? "" : "s"} (each tried again): ${Object.entries(
          r.failures,
        )
          .map(([why, n]) => `${why} x${n}`)
          .join(", ")}`,
      );
  if (f.waiting.length)
    lines.push(
      `what the ${HEARTBEAT_MS} ms heartbeat costs: streams whose first token has not come, the edge's CPU (all its processes, % of one core) against the same edge idle just before`,
      "streams  failed  edge CPU %  idle CPU %  CPU ms per stream per second",
      ...f.waiting.map(
        (w) =>
          `${String(w.streams).padStart(7)} ${String(w.failed).padStart(7)} ${fmt(w.cpuPercent).padStart(11)} ${fmt(w.idleCpuPercent).padStart(11)}  ${fmt(w.msPerStreamSecond).padStart(10)}`,
      ),
    );
  for (const r of f.runs)
    lines.push(
      `target at ${r.tokensPerSecond} tokens/s, ${r.concurrency} stream${r.concurrency === 1 ? "" : "s"}: p99 < ${CANCEL_TARGET_P99_MS} ms ${verdict(r.p99 < CANCEL_TARGET_P99_MS)}, never aborted = 0 ${verdict(r.neverAborted === 0)}`,
    );
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(reportCancel(await runCancel()));
}
