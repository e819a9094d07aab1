/**
 * What the gateway benchmarks share: SIMULATED GPU backends (in this process, or in their own
 * through the simulator's CLI and control API) behind the real local edge, whose `GATEWAY_CONFIG`
 * joins each benchmark's pools. Each benchmark brings a `BenchPart` (its backends and pools, with
 * its own ids), so one edge can serve several of them: the smoke tests start the edge once.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import OpenAI from "openai";
import { z } from "zod";
import type { BackendOptions, BackendPatch, Simulator } from "../gpu-backends/simulator/simulator.js";
import type { GatewayConfigInput } from "../protocol/gateway.js";
import { startGateway, type GatewayFixture } from "../test/support/gateway.js";
import { quantile } from "./stats.js";

export { LONDON, VIRGINIA } from "../test/support/gateway.js";

/** Where the simulated backends run: a separate process keeps them off the client's event loop. */
export type SimulatorMode = "in-process" | "separate process";

export interface BenchPart {
  backends: BackendOptions[];
  pools(urls: Record<string, string>): GatewayConfigInput["pools"];
  /** Health settings this benchmark needs; parts that share an edge share them. Default: the schema's. */
  health?: GatewayConfigInput["health"];
}

/** What the benchmarks read from the simulator's records. */
export interface BenchRecord {
  seq: number;
  requestId: string;
  receivedAt: number;
  firstTokenAt?: number;
  endedAt?: number;
  abortedAt?: number;
  outcome: string;
}

/** The simulated backends, driven the same way whichever process they run in. */
export interface BenchBackends {
  mode: SimulatorMode;
  url(id: string): string;
  configure(id: string, patch: BackendPatch): Promise<void>;
  records(id: string): Promise<BenchRecord[]>;
  peak(id: string): Promise<number>;
  resetPeak(id: string): Promise<void>;
  stop(): Promise<void>;
}

export interface BenchGateway {
  backends: BenchBackends;
  baseURL: string;
  apiKey: string;
  openai: GatewayFixture["openai"];
  account: GatewayFixture["account"];
  /** CPU seconds the edge's processes have used so far (Linux), for CPU per request. */
  edgeCpuSeconds(): number | undefined;
  /** The edge's workerd process (Linux), for tools that attach to it. */
  edgeWorkerdPid(): number | undefined;
  stop(): Promise<void>;
}

/**
 * Probes that see an outage begin or end within a quarter second. The timeout stays long: the
 * probes run in the same workerd process as the edge, and a short one fails them whenever
 * the edge is busy, which reads as the backends being down.
 */
export const FAST_PROBES = { probeIntervalMs: 250, probeTimeoutMs: 1_000, snapshotMaxAgeMs: 100 } as const;

const SIMULATOR_MAIN = new URL("../gpu-backends/simulator/main.ts", import.meta.url).pathname;

/** The performance clock the simulator stamps its records with. */
export const clock = () => performance.timeOrigin + performance.now();

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function inProcess(sim: Simulator): BenchBackends {
  return {
    mode: "in-process",
    url: (id) => sim.backend(id).url,
    configure: (id, patch) => sim.backend(id).configure(patch),
    records: async (id) => sim.backend(id).records(),
    peak: async (id) => sim.backend(id).peakConcurrency(),
    resetPeak: async (id) => sim.backend(id).resetPeak(),
    stop: () => sim.stop(),
  };
}

const Started = z.object({
  control: z.string(),
  controlToken: z.string(),
  backends: z.record(z.string(), z.string()),
});
const ControlRecord = z.looseObject({
  seq: z.number(),
  requestId: z.string(),
  receivedAt: z.number(),
  firstTokenAt: z.number().optional(),
  endedAt: z.number().optional(),
  abortedAt: z.number().optional(),
  outcome: z.string(),
});
const Records = z.object({ records: z.array(ControlRecord) });
const Views = z.object({ backends: z.array(z.looseObject({ id: z.string(), peak: z.number() })) });

/** The simulator's CLI in a child process, driven through its control API. */
async function separateProcess(backends: BackendOptions[]): Promise<BenchBackends> {
  const file = join(mkdtempSync(join(tmpdir(), "sextant-bench-sim-")), "backends.json");
  writeFileSync(file, JSON.stringify({ backends, control: true }));
  const child = spawn(process.execPath, ["--import", "tsx", SIMULATOR_MAIN, "--config", file], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const line = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.once("line", resolve);
    child.once("exit", (code) => reject(new Error(`the simulator exited (${code}) before listening:\n${stderr}`)));
  });
  const started = Started.parse(JSON.parse(line));
  const control = async (method: string, id: string, rest = "", body?: unknown) => {
    const path = id ? `/${encodeURIComponent(id)}${rest}` : "";
    const response = await fetch(`${started.control}/backends${path}`, {
      method,
      headers: {
        authorization: `Bearer ${started.controlToken}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!response.ok) throw new Error(`simulator control ${method} ${path}: ${response.status}`);
    return (await response.json()) as unknown;
  };
  const url = (id: string) => {
    const found = started.backends[id];
    if (!found) throw new Error(`simulator: no backend "${id}"`);
    return found;
  };
  return {
    mode: "separate process",
    url,
    configure: async (id, patch) => void (await control("PATCH", id, "", patch)),
    records: async (id) => Records.parse(await control("GET", id, "/records")).records,
    peak: async (id) => {
      const all = Views.parse(await control("GET", ""));
      return all.backends.find((b) => b.id === id)?.peak ?? 0;
    },
    resetPeak: async (id) => void (await control("POST", id, "/reset-peak")),
    stop: async () => {
      if (child.exitCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}

/**
 * Starts the simulated backends of every part and one local edge serving all their pools.
 *
 * @example
 * ```ts
 * const gw = await startBenchGateway([overheadPart()], { simulator: "separate process" });
 * try { … } finally { await gw.stop(); }
 * ```
 */
export async function startBenchGateway(
  parts: BenchPart[],
  options: { simulator?: SimulatorMode } = {},
): Promise<BenchGateway> {
  const all = parts.flatMap((p) => p.backends);
  const external = options.simulator === "separate process" ? await separateProcess(all) : undefined;
  let fixture: GatewayFixture;
  try {
    fixture = await startGateway(external ? [] : all, (urls) => {
      const known = external ? Object.fromEntries(all.map((b) => [b.id, external.url(b.id)])) : urls;
      return {
        pools: Object.assign({}, ...parts.map((p) => p.pools(known))),
        health: Object.assign({}, ...parts.map((p) => p.health ?? {})),
      };
    });
  } catch (err) {
    await external?.stop();
    throw err;
  }
  const backends = external ?? inProcess(fixture.sim);
  return {
    backends,
    baseURL: fixture.edge.baseURL,
    edgeCpuSeconds: () => fixture.edge.cpuSeconds(),
    edgeWorkerdPid: () => fixture.edge.workerdPid(),
    apiKey: fixture.apiKey,
    openai: fixture.openai,
    account: fixture.account,
    stop: async () => {
      await fixture.stop();
      await external?.stop();
    },
  };
}

/** Runs `fn` on the given gateway, or on a fresh one serving only `part`, stopped afterwards. */
export async function withGateway<T>(
  part: BenchPart,
  options: { gateway?: BenchGateway; simulator?: SimulatorMode },
  fn: (gw: BenchGateway) => Promise<T>,
): Promise<T> {
  if (options.gateway) return fn(options.gateway);
  const gw = await startBenchGateway([part], options);
  try {
    return await fn(gw);
  } finally {
    await gw.stop();
  }
}

/** `workers` closed loops, each calling `step` again as soon as it returns, while `more()` holds. */
export async function closedLoop(
  workers: number,
  more: () => boolean,
  step: (worker: number) => Promise<void>,
): Promise<void> {
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      while (more()) await step(worker);
    }),
  );
}

export interface StreamOutcome {
  /** When the call was made, on the simulator's clock. */
  startedAt: number;
  /** Milliseconds from the call to the first token, when one came. */
  ttftMs?: number;
  totalMs: number;
  text: string;
  /** Chunks that carried text: the simulator sends one token per chunk. */
  tokens: number;
  finish: string | null;
  /** What the SDK threw: a non-2xx answer or an error event in the stream. */
  error?: InstanceType<typeof OpenAI.APIError>;
}

/** One streamed completion through the `openai` SDK, as an editor's tab client reads it. */
export async function streamCompletion(
  client: OpenAI,
  params: { model: string; prompt: string; suffix?: string; max_tokens: number },
  headers: Record<string, string> = {},
): Promise<StreamOutcome> {
  const startedAt = clock();
  const started = performance.now();
  let ttftMs: number | undefined;
  let text = "";
  let tokens = 0;
  let finish: string | null = null;
  try {
    const stream = await client.completions.create({ ...params, stream: true }, { headers });
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (choice?.text) {
        ttftMs ??= performance.now() - started;
        tokens++;
        text += choice.text;
      }
      finish = choice?.finish_reason ?? finish;
    }
    return { startedAt, ttftMs, totalMs: performance.now() - started, text, tokens, finish };
  } catch (err) {
    if (!(err instanceof OpenAI.APIError)) throw err;
    return { startedAt, ttftMs, totalMs: performance.now() - started, text, tokens, finish, error: err };
  }
}

/**
 * Whether a stream that raised no error is whole: every token asked for and a finish reason. The
 * text is not compared: a stream the edge resumed on another backend after a break carries that
 * backend's tokens, which the simulator numbers from zero again.
 */
export const whole = (r: StreamOutcome, tokens: number) => !r.error && r.tokens === tokens && r.finish !== null;

/** What the simulator streams for `n` tokens, in one piece. */
export const simulatedText = (n: number) => Array.from({ length: n }, (_, i) => `sim${i} `).join("");

/** A quantile that is NaN, not a crash, when nothing was measured. */
export const quantileOf = (values: number[], q: number) => (values.length ? quantile(values, q) : Number.NaN);

export const pct = (part: number, total: number) => (total === 0 ? "n/a" : `${((100 * part) / total).toFixed(2)}%`);

/** "met" or "MISSED", for a target printed next to its figure. */
export const verdict = (met: boolean) => (met ? "met" : "MISSED");
