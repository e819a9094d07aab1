/**
 * Failover under load: tab streams from closed-loop clients through the local edge to two regions
 * (Virginia, the nearest to the default location, and London); a tenth of the way into each run
 * the nearest region starts failing one way. Every mode has its own pool and pair of simulated
 * backends, so one mode's ejections cannot help or hurt another. Every stream is classified as a
 * success (every token and a finish reason), an explicit error (the SDK threw: a non-2xx answer or
 * an error event) or a silent truncation (ended early without any error). A stream the edge resumed
 * on London after a break mid-stream is a success, counted apart.
 *
 *   npx tsx bench/gateway-failover.ts       # 16 clients, 500 requests per mode, 11 modes
 */
import { pathToFileURL } from "node:url";
import type { Fault } from "../gpu-backends/simulator/simulator.js";
import {
  FAST_PROBES,
  LONDON,
  VIRGINIA,
  closedLoop,
  pct,
  quantileOf,
  simulatedText,
  streamCompletion,
  verdict,
  whole,
  withGateway,
  type BenchGateway,
  type BenchPart,
} from "./gateway-fixture.js";
import { fmt } from "./stats.js";

/** The nearest region's faults, by mode name (a pool name as well). */
export const FAILOVER_MODES = {
  refuse: { type: "refuse" },
  "status-500": { type: "status", status: 500 },
  "hang-before-headers": { type: "hangBeforeHeaders" },
  "hang-after-0-tokens": { type: "hangMidStream", afterTokens: 0 },
  "hang-after-3-tokens": { type: "hangMidStream", afterTokens: 3 },
  "malformed-at-0-tokens": { type: "malformedSse", afterTokens: 0 },
  "malformed-at-3-tokens": { type: "malformedSse", afterTokens: 3 },
  "error-event-at-0-tokens": { type: "errorEvent", afterTokens: 0 },
  "error-event-at-3-tokens": { type: "errorEvent", afterTokens: 3 },
  "slow-drip-2s": { type: "slowDrip", intervalMs: 2_000 },
  unhealthy: { type: "unhealthy" },
} as const satisfies Record<string, Fault>;
export type FailoverMode = keyof typeof FAILOVER_MODES;

export interface FailoverOptions {
  /** Requests per mode. Default 500. */
  requests?: number;
  /** Closed-loop clients. Default 16. */
  clients?: number;
  /** Share of a mode's requests started before the fault. Default 0.1. */
  injectAt?: number;
  modes?: FailoverMode[];
  gateway?: BenchGateway;
}

const TOKENS = 8;
/** Realistic tab timeouts: headers within 0.5 s, the first token within 1 s, no gap over 1 s. */
const TIMEOUTS = { connectMs: 500, firstByteMs: 1_000, gapMs: 1_000, deadlineMs: 10_000 };
export const FAILOVER_TARGET_SUCCESS = 0.999;

const east = (mode: string) => `failover-${mode}-east`;
const west = (mode: string) => `failover-${mode}-west`;
const model = (mode: string) => `tab-failover-${mode}`;

export function failoverPart(options: Pick<FailoverOptions, "modes"> = {}): BenchPart {
  const modes = options.modes ?? (Object.keys(FAILOVER_MODES) as FailoverMode[]);
  // 20 ms to the first token, 200 tokens/s: an 8-token stream takes about 55 ms.
  const backend = { ttftMs: 20, tokensPerSecond: 200, completionTokens: TOKENS, capacity: 64 };
  return {
    backends: modes.flatMap((mode) => [
      { id: east(mode), ...backend },
      { id: west(mode), ...backend },
    ]),
    // Probes every quarter second: "unhealthy" is seen without waiting on the default 5 s.
    health: FAST_PROBES,
    pools: (urls) =>
      Object.fromEntries(
        modes.map((mode) => [
          `failover-${mode}`,
          {
            role: "tab" as const,
            models: [model(mode)],
            fim: "qwen2.5-coder" as const,
            timeouts: TIMEOUTS,
            endpoints: [
              {
                id: east(mode),
                region: "us-east",
                ...VIRGINIA,
                url: urls[east(mode)]!,
                model: "sim-model",
                kind: "vllm" as const,
                capacity: 64,
              },
              {
                id: west(mode),
                region: "eu-west",
                ...LONDON,
                url: urls[west(mode)]!,
                model: "sim-model",
                kind: "vllm" as const,
                capacity: 64,
              },
            ],
          },
        ]),
      ),
  };
}

export interface FailoverRun {
  mode: FailoverMode;
  requests: number;
  success: number;
  /** Successes the edge resumed on another backend after a break mid-stream. */
  resumed: number;
  explicitErrors: number;
  /** Explicit errors after a single attempt: the edge did not fail over (its retry budget was spent). */
  notRetried: number;
  silentTruncations: number;
  ttftP50: number;
  ttftP95: number;
  /** Share of the backends' completed answers that London gave (resumed streams count twice). */
  fromLondon: number;
  /** A few of the explicit errors' messages, one of each. */
  errors: string[];
}

export interface FailoverFigures {
  clients: number;
  injectAt: number;
  tokens: number;
  timeouts: typeof TIMEOUTS;
  runs: FailoverRun[];
}

async function runMode(gw: BenchGateway, mode: FailoverMode, requests: number, clients: number, injectAt: number) {
  const client = gw.openai({ timeout: 30_000 });
  const expected = simulatedText(TOKENS);
  const inject = Math.max(1, Math.floor(requests * injectAt));
  let started = 0;
  let injected: Promise<void> | undefined;
  const run: FailoverRun = {
    mode,
    requests,
    success: 0,
    resumed: 0,
    explicitErrors: 0,
    notRetried: 0,
    silentTruncations: 0,
    ttftP50: 0,
    ttftP95: 0,
    fromLondon: 0,
    errors: [],
  };
  const ttfts: number[] = [];
  await closedLoop(
    clients,
    () => started < requests,
    async () => {
      if (++started > inject) await (injected ??= gw.backends.configure(east(mode), { fault: FAILOVER_MODES[mode] }));
      const r = await streamCompletion(client, {
        model: model(mode),
        prompt: "def f(",
        suffix: "):\n",
        max_tokens: TOKENS,
      });
      if (r.error) {
        run.explicitErrors++;
        if (/\(1 attempt\)/.test(r.error.message)) run.notRetried++;
        const message = `${r.error.status ?? "stream"}: ${r.error.message.replace(/\s+/g, " ").slice(0, 140)}`;
        if (run.errors.length < 3 && !run.errors.some((e) => e.slice(0, 40) === message.slice(0, 40)))
          run.errors.push(message);
      } else if (whole(r, TOKENS)) {
        run.success++;
        if (r.text !== expected) run.resumed++;
        ttfts.push(r.ttftMs!);
      } else run.silentTruncations++;
    },
  );
  const completed = async (id: string) =>
    (await gw.backends.records(id)).filter((r) => r.outcome === "completed").length;
  const london = await completed(west(mode));
  run.fromLondon = london / Math.max(1, london + (await completed(east(mode))));
  run.ttftP50 = quantileOf(ttfts, 0.5);
  run.ttftP95 = quantileOf(ttfts, 0.95);
  // Heal the region (a refused port listens again), so nothing of this mode outlives it.
  await gw.backends.configure(east(mode), { fault: { type: "none" } });
  return run;
}

export async function runFailover(options: FailoverOptions = {}): Promise<FailoverFigures> {
  const modes = options.modes ?? (Object.keys(FAILOVER_MODES) as FailoverMode[]);
  const requests = options.requests ?? 500;
  const clients = options.clients ?? 16;
  const injectAt = options.injectAt ?? 0.1;
  return withGateway(failoverPart({ modes }), options, async (gw) => {
    const runs: FailoverRun[] = [];
    for (const mode of modes) runs.push(await runMode(gw, mode, requests, clients, injectAt));
    return { clients, injectAt, tokens: TOKENS, timeouts: TIMEOUTS, runs };
  });
}

export function reportFailover(f: FailoverFigures): string {
  const t = f.timeouts;
  const lines = [
    `gateway failover: ${f.clients} closed-loop tab clients streaming ${f.tokens}-token completions; the nearest region (Virginia) fails after ${f.injectAt * 100}% of each mode's requests; London takes over; timeouts connect ${t.connectMs} ms, first token ${t.firstByteMs} ms, gap ${t.gapMs} ms`,
    "mode                    requests   success  (resumed)  explicit errors  (not retried)  silent truncations  ttft p50  ttft p95  answered by London",
  ];
  for (const r of f.runs)
    lines.push(
      `${r.mode.padEnd(22)} ${String(r.requests).padStart(9)} ${pct(r.success, r.requests).padStart(9)} ${String(r.resumed).padStart(10)} ${String(r.explicitErrors).padStart(16)} ${String(r.notRetried).padStart(14)} ${String(r.silentTruncations).padStart(19)} ${`${fmt(r.ttftP50)} ms`.padStart(9)} ${`${fmt(r.ttftP95)} ms`.padStart(9)} ${`${(100 * r.fromLondon).toFixed(0)}%`.padStart(19)}`,
    );
  for (const r of f.runs) for (const e of r.errors) lines.push(`  ${r.mode}: ${e}`);
  const missed = f.runs.filter((r) => r.success / r.requests < FAILOVER_TARGET_SUCCESS).map((r) => r.mode);
  const truncated = f.runs.reduce((n, r) => n + r.silentTruncations, 0);
  lines.push(
    `targets: success >= 99.9% in every mode ${verdict(missed.length === 0)}${missed.length ? ` (below in ${missed.join(", ")})` : ""}; silent truncations = 0 ${verdict(truncated === 0)} (${truncated})`,
  );
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(reportFailover(await runFailover()));
}
