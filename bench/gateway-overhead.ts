/**
 * What the gateway adds to a streamed tab completion: the same request straight to a simulated
 * backend and through the local edge, in pairs (alternating which goes first), so that both halves
 * of a pair see the same machine. Paired differences of time to first token and of total time, at
 * one stream at a time and at many concurrent streams. The simulator never slows down (capacity far
 * above the load), and runs in its own process by default, off the client's event loop. At one
 * stream it sends 1,000 tokens/s, the most events per second a stream can ask of the edge; with many
 * streams it sends each at a loaded GPU's pace, so that the machine is not saturated and the paired
 * differences still measure the Workers rather than the wait for a core (the report says how many
 * cores were busy).
 *
 *   npx tsx bench/gateway-overhead.ts           # 1,000 pairs serially, then 200 streams × 5 pairs
 *
 * Both sides use the same client: Node's `http` with kept-alive connections, reading the body as
 * it streams. The edge is `npm start`'s (the deployable bundle in Miniflare's workerd) on this
 * machine, sharing its cores with the client and the simulator. Two baseline Workers, served the
 * same way, are measured in the same run: one that only forwards (`bench/workers/forward.js`) and
 * one that relays each event in JavaScript and does nothing else (`bench/workers/relay.js`); so is
 * the direct request paired with itself, the noise under every paired difference, and the edge
 * paired with the relay, the gateway's own work over the least a Worker that touches every event
 * does. At one stream the sides take turns, a tenth of their pairs at a time, so that no side gets
 * a quiet or a busy spell of the machine to itself. Each request carries an `X-Request-Id` that the
 * simulator records, which splits the added time to first token at the backend: getting the
 * request there, and getting its first token back.
 */
import { randomUUID } from "node:crypto";
import { Agent, request as httpRequest } from "node:http";
import { availableParallelism } from "node:os";
import { pathToFileURL } from "node:url";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { z } from "zod";
import { serveWorker } from "../scripts/edge.js";
import { freePort, machineCpuTicks, processCpuSeconds, processes } from "../test/support/local-edge.js";
import { renderFim } from "../workers/gateway/prompts.js";
import {
  VIRGINIA,
  clock,
  quantileOf,
  sleep,
  verdict,
  withGateway,
  type BenchGateway,
  type BenchPart,
  type SimulatorMode,
} from "./gateway-fixture.js";
import { fmt, quantileInterval, type Interval } from "./stats.js";

export interface OverheadOptions {
  /** Pairs one after another. */
  serialPairs?: number;
  /** Concurrent streams, each doing `pairsPerStream` pairs one after another. */
  streams?: number;
  pairsPerStream?: number;
  /** The simulator's tokens per second per stream while the concurrent streams run. */
  concurrentTokensPerSecond?: number;
  /** Ignored when `gateway` is given: it has its own simulator. */
  simulator?: SimulatorMode;
  gateway?: BenchGateway;
}

/** The id of `overheadPart()`'s simulated backend, where its records and pace are read and set. */
export const OVERHEAD_BACKEND = "overhead";
const MODEL = "tab-overhead";
const TOKENS = 16;
const TTFT_MS = 20;
export const TOKENS_PER_SECOND = 1000;
/**
 * Per stream while many run at once: a loaded GPU's pace. At 1,000 tokens/s, 200 streams would ask
 * this machine for several cores' worth of event relaying, and the figure would measure the queue
 * for a core rather than the gateway; at this pace the machine keeps spare CPU, which the report shows.
 */
export const CONCURRENT_TOKENS_PER_SECOND = 20;
const PROMPT = "def fibonacci(n):\n    ";
const SUFFIX = "\n\nprint(fibonacci(10))\n";
/** How many turns the sides take at one stream (each a share of the serial pairs). */
const SERIAL_ROUNDS = 10;
/** Added latency the gateway should stay under. */
export const OVERHEAD_TARGETS = { p50: 1.5, p99: 5 } as const;
/** The edge's workerd CPU per streamed answer, against the forwarding Worker's in the same run. */
export const CPU_RATIO_GOAL = 1.5;
/**
 * The headline: the edge's CPU per streamed answer, and its added p99, over the relay floor's in
 * the same run (`bench/workers/relay.js`, the least a Worker that touches every event does).
 */
export const RELAY_GOALS = { cpu: 1.3, p99: 2 } as const;

/** One answer's length at `tokensPerSecond`: concurrent streams spread their starts over it. */
export const answerMs = (tokensPerSecond: number) => TTFT_MS + ((TOKENS - 1) * 1000) / tokensPerSecond;

export function overheadPart(): BenchPart {
  return {
    backends: [
      {
        id: OVERHEAD_BACKEND,
        ttftMs: TTFT_MS,
        tokensPerSecond: TOKENS_PER_SECOND,
        completionTokens: TOKENS,
        capacity: 50_000,
        maxConcurrency: 100_000,
      },
    ],
    pools: (urls) => ({
      "bench-overhead": {
        role: "tab",
        models: [MODEL],
        fim: "qwen2.5-coder",
        // Generous on purpose: at 200 streams this machine's edge is CPU-bound and its own timers
        // run late; with the defaults (1 s to headers) it timed out and ejected the healthy backend,
        // and the one-endpoint pool went down. This benchmark measures overhead, not failover.
        timeouts: { connectMs: 30_000, firstByteMs: 30_000, gapMs: 30_000, deadlineMs: 120_000 },
        endpoints: [
          {
            id: OVERHEAD_BACKEND,
            region: "us-east",
            ...VIRGINIA,
            url: urls[OVERHEAD_BACKEND]!,
            model: "sim-model",
            kind: "vllm",
            capacity: 50_000,
          },
        ],
      },
    }),
  };
}

export interface Timing {
  /** Why it failed: a status and the start of the body, or the network error. */
  failure?: string;
  /** Until the first body bytes holding a data event, the first token (0 when none came). */
  ttft: number;
  total: number;
  /** The request's `X-Request-Id`, which the simulator records; when it was sent and its first token came (`clock`). */
  id: string;
  sentAt: number;
  firstAt: number;
}

export interface Side {
  url: string;
  /** The request; a body is sent whole, with its length. */
  init: { method?: string; headers?: Record<string, string>; body?: string };
  complete(status: number, text: string): boolean;
}

const Problem = z.object({ detail: z.string() });

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const FIRST_EVENT = /(?:^|\n)data: /;

/**
 * The client's connections, kept open between requests as an editor's are. Node's own `http`
 * rather than `fetch`: the client shares this machine's cores with the Workers it measures, and
 * its garbage collection pauses land in whichever request is waiting, on either side of a pair.
 * `fetch` builds web streams for every body, and its collections paused the client for 3 ms or
 * more many times as often.
 */
const agent = new Agent({ keepAlive: true });

/** One request, timed to its first token (not its first bytes) and to the end of its body. */
export function send(side: Side): Promise<Timing> {
  const id = `bench-overhead-${randomUUID()}`;
  const url = new URL(side.url);
  const body = side.init.body;
  const headers: Record<string, string | number> = { ...side.init.headers, "x-request-id": id };
  if (body !== undefined) headers["content-length"] = Buffer.byteLength(body);
  return new Promise((resolve) => {
    const sentAt = clock();
    const started = performance.now();
    let ttft = 0;
    let firstAt = 0;
    let text = "";
    const failed = (failure: string) =>
      resolve({ ttft, total: performance.now() - started, id, sentAt, firstAt, failure });
    const request = httpRequest(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname + url.search,
        method: side.init.method ?? "GET",
        headers,
        agent,
      },
      (response) => {
        response.setEncoding("utf8");
        response.on("data", (chunk: string) => {
          text += chunk;
          // The first token, not the first bytes: the edge may send an SSE comment before it (its
          // heartbeat, while the backend is still silent), which no client counts as a token.
          if (!ttft && FIRST_EVENT.test(text)) {
            ttft = performance.now() - started;
            firstAt = clock();
          }
        });
        response.on("error", (err) => failed(String(err)));
        response.on("end", () => {
          const total = performance.now() - started;
          const status = response.statusCode ?? 0;
          if (side.complete(status, text)) return resolve({ ttft, total, id, sentAt, firstAt });
          // The problem+json detail, without the request id that makes every body different.
          const problem = Problem.safeParse(safeJson(text));
          const why = problem.success ? problem.data.detail : text.replace(/\s+/g, " ").slice(0, 200);
          resolve({ ttft, total, id, sentAt, firstAt, failure: `${status} ${why}` });
        });
      },
    );
    // An idle timeout: a side that sends nothing for a minute has hung.
    request.setTimeout(60_000, () => request.destroy(new Error("nothing received for 60 s")));
    request.on("error", (err) => failed(String(err)));
    request.end(body);
  });
}

export interface Quantiles {
  p50: number;
  p99: number;
  /** 95% confidence intervals of the two, from the same values (`quantileInterval`). */
  p50Interval: Interval;
  p99Interval: Interval;
}

export interface PairedRun {
  streams: number;
  pairs: number;
  /** Pairs left out because either side failed. */
  failed: number;
  /** Why, side by side: "edge 503 {…}" and how often. */
  failures: Record<string, number>;
  direct: { ttft: Quantiles; total: Quantiles };
  edge: { ttft: Quantiles; total: Quantiles };
  /** Edge minus direct, pair by pair. */
  added: { ttft: Quantiles; total: Quantiles };
  /**
   * The added time to first token in two parts, from the simulator's records of the same requests
   * (edge minus direct, pair by pair, so the two processes' clocks cancel out): until the backend
   * has the request, and from the backend's first token until the client has it. Absent for
   * requests the simulator does not record (`GET /health`).
   */
  split?: { toBackend: Quantiles; toClient: Quantiles };
  /**
   * CPU the Worker's workerd process used per request through it (ms), where `/proc` can be read:
   * over the side's own turns, so its idle work (the edge's health probes, say) is included.
   */
  cpuMs?: number;
  /**
   * How many of the machine's cores were busy on average while the pairs ran (Linux): near the
   * machine's count, the figures measure waiting for a core more than the Worker.
   */
  busyCores?: number;
}

export interface OverheadFigures {
  simulator: SimulatorMode;
  tokens: number;
  ttftMs: number;
  tokensPerSecond: number;
  /** The pace per stream while the concurrent streams run. */
  concurrentTokensPerSecond: number;
  /** The machine's cores, for `busyCores`. */
  cores: number;
  /** Streamed completions, simulator vs edge. */
  runs: PairedRun[];
  /**
   * The floor any request pays to reach the local edge, measured the same way: the simulator's
   * `GET /health` against the edge's `GET /healthz`, which runs no gateway code.
   */
  floor: PairedRun[];
  /**
   * The same streamed completions through a Worker that only forwards them (`bench/workers/forward.js`,
   * run the way `npm start` runs the edge): what any Worker in front of the backend costs here.
   */
  forward: PairedRun[];
  /**
   * The same through a Worker that reads, parses, renames and writes on each event in JavaScript and
   * does nothing else (`bench/workers/relay.js`): what looking at every event costs here, apart
   * from the gateway's own work.
   */
  relay: PairedRun[];
  /**
   * The direct request against itself, paired the same way: how far two identical calls differ on
   * this machine with no Worker at all, the noise under every paired difference above.
   */
  same: PairedRun[];
  /**
   * The edge paired with the JavaScript relay instead of the direct call: what the gateway's own
   * work adds over the least a Worker that touches every event does, request by request.
   */
  overRelay: PairedRun[];
}

/** A baseline Worker from `bench/workers/` in its own workerd, served as `npm start` serves the edge. */
export async function startBaseline(
  script: "forward.js" | "relay.js",
  upstream: string,
  /** Where its V8 inspector listens (`bench/gateway-profile.ts`); off when absent. */
  inspectorPort?: number,
): Promise<{
  url: string;
  /** Its workerd process, where `/proc` can be read. */
  pid: number | undefined;
  cpuSeconds(): number | undefined;
  stop(): Promise<void>;
}> {
  const { workerOptions } = unstable_getMiniflareWorkerOptions("wrangler.toml");
  // Miniflare runs the Worker in a workerd of this process's own: the one that is new after the start.
  const ours = () => (processes() ?? []).filter((p) => p.ppid === process.pid && p.comm === "workerd");
  const before = new Set(ours().map((p) => p.pid));
  const worker = await serveWorker(
    {
      modules: true,
      scriptPath: new URL(`./workers/${script}`, import.meta.url).pathname,
      compatibilityDate: workerOptions.compatibilityDate,
      compatibilityFlags: workerOptions.compatibilityFlags,
      bindings: { UPSTREAM: upstream, MODEL },
    },
    { host: "127.0.0.1", port: await freePort(), ...(inspectorPort ? { inspectorPort } : {}) },
  );
  const pid = ours().find((p) => !before.has(p.pid))?.pid;
  return {
    url: worker.url.origin,
    pid,
    cpuSeconds: () => (pid === undefined ? undefined : processCpuSeconds(pid)),
    stop: () => worker.dispose(),
  };
}

/**
 * The cores `busyCores` counts over: all of the machine's, as `/proc/stat` sums them, even when
 * this process is pinned to fewer; elsewhere, the ones this process may use.
 */
const machineCores = () => machineCpuTicks()?.cores || availableParallelism();

/** A figure next to its target, with the digits that tell them apart where rounding would not (1.497 against 1.5). */
export const against = (value: number, target: number) =>
  Number(fmt(value)) === target ? value.toFixed(3) : fmt(value);

const q = (values: number[]): Quantiles => ({
  p50: quantileOf(values, 0.5),
  p99: quantileOf(values, 0.99),
  p50Interval: quantileInterval(values, 0.5),
  p99Interval: quantileInterval(values, 0.99),
});

/**
 * A figure's 95% interval against its target: whether this run's pairs settle the target, or
 * only more pairs could (a p99 from 500 pairs rests on its largest few).
 */
export function settles(interval: Interval, target: number): string {
  const bound = (ms: number) => (Number.isFinite(ms) ? `${fmt(ms)} ms` : "unbounded");
  const range = `95% interval ${bound(interval.lo)} to ${bound(interval.hi)}`;
  if (interval.hi < target) return `${range}: below the target`;
  if (interval.lo >= target) return `${range}: above the target`;
  return `${range}: holds the target, so these pairs cannot settle it`;
}

const ok = (status: number) => status >= 200 && status < 300;
const streamed = (status: number, text: string) =>
  ok(status) && text.includes("data: [DONE]") && text.includes(`sim${TOKENS - 1} `);
const JSON_TYPE = { "content-type": "application/json" };

/**
 * The streamed completion straight to the simulator, as the edge sends it upstream: the FIM
 * prompt, usage asked for.
 */
function directSide(gw: BenchGateway): Side {
  return {
    url: `${gw.backends.url(OVERHEAD_BACKEND)}/completions`,
    init: {
      method: "POST",
      headers: JSON_TYPE,
      body: JSON.stringify({
        ...renderFim({ model: "sim-model", prompt: PROMPT, suffix: SUFFIX }, "qwen2.5-coder"),
        max_tokens: TOKENS,
        stream: true,
        stream_options: { include_usage: true },
      }),
    },
    complete: streamed,
  };
}

/** The same completion as a client asks the edge for it. */
export function edgeSide(gw: BenchGateway): Side {
  return {
    url: `${gw.baseURL}/v1/completions`,
    init: {
      method: "POST",
      headers: { ...JSON_TYPE, authorization: `Bearer ${gw.apiKey}` },
      body: JSON.stringify({ model: MODEL, prompt: PROMPT, suffix: SUFFIX, max_tokens: TOKENS, stream: true }),
    },
    complete: streamed,
  };
}

/** The direct request, through a baseline Worker served at `origin`. */
export const workerSide = (gw: BenchGateway, origin: string): Side => ({
  ...directSide(gw),
  url: `${origin}/v1/completions`,
});

function sides(
  gw: BenchGateway,
  baselines: { forward: string; relay: string },
): Record<"stream" | "floor" | "forward" | "relay" | "same" | "overRelay", { direct: Side; edge: Side }> {
  const direct = directSide(gw);
  return {
    stream: { direct, edge: edgeSide(gw) },
    floor: {
      direct: { url: new URL("/health", gw.backends.url(OVERHEAD_BACKEND)).href, init: {}, complete: ok },
      edge: { url: `${gw.baseURL}/healthz`, init: {}, complete: ok },
    },
    forward: { direct, edge: workerSide(gw, baselines.forward) },
    relay: { direct, edge: workerSide(gw, baselines.relay) },
    same: { direct, edge: direct },
    overRelay: { direct: workerSide(gw, baselines.relay), edge: edgeSide(gw) },
  };
}

/** One side's pairs: each a request straight to the simulator and the same through the side. */
interface Pairs {
  pairs: { direct: Timing; edge: Timing }[];
  /** CPU seconds the side's Worker used while these pairs ran, where it can be read. */
  cpuSeconds?: number;
  /** The machine's busy and total CPU ticks while they ran, where they can be read. */
  machine?: { busy: number; total: number };
}

async function runPairs(
  pair: { direct: Side; edge: Side },
  streams: number,
  pairsPerStream: number,
  cpuSeconds: () => number | undefined = () => undefined,
  spreadMs = 0,
): Promise<Pairs> {
  const pairs: { direct: Timing; edge: Timing }[] = [];
  const machineBefore = machineCpuTicks();
  const cpuBefore = cpuSeconds();
  await Promise.all(
    Array.from({ length: streams }, async (_, worker) => {
      // Streams that start together stay in step, and every token would arrive in bursts of all of
      // them: their starts are spread over `spreadMs` instead.
      if (spreadMs > 0) await sleep((worker * spreadMs) / streams);
      for (let n = 0; n < pairsPerStream; n++) {
        // Alternate which side goes first, so that neither always finds the machine in the same state.
        const directFirst = (n + worker) % 2 === 0;
        const first = await send(directFirst ? pair.direct : pair.edge);
        const second = await send(directFirst ? pair.edge : pair.direct);
        pairs.push(directFirst ? { direct: first, edge: second } : { direct: second, edge: first });
      }
    }),
  );
  const cpuAfter = cpuSeconds();
  const machineAfter = machineCpuTicks();
  return {
    pairs,
    ...(cpuBefore !== undefined && cpuAfter !== undefined ? { cpuSeconds: cpuAfter - cpuBefore } : {}),
    ...(machineBefore && machineAfter
      ? { machine: { busy: machineAfter.busy - machineBefore.busy, total: machineAfter.total - machineBefore.total } }
      : {}),
  };
}

/** Quantiles of the pairs, side by side and paired, and the split at the backend. */
async function summarize(gw: BenchGateway, streams: number, runs: Pairs[]): Promise<PairedRun> {
  const pairs = runs.flatMap((r) => r.pairs);
  const good = pairs.filter((p) => !p.direct.failure && !p.edge.failure);
  const failures: Record<string, number> = {};
  for (const p of pairs)
    for (const side of ["direct", "edge"] as const) {
      const why = p[side].failure;
      if (why) failures[`${side} ${why}`] = (failures[`${side} ${why}`] ?? 0) + 1;
    }
  const cpu = runs.every((r) => r.cpuSeconds !== undefined)
    ? runs.reduce((sum, r) => sum + r.cpuSeconds!, 0)
    : undefined;
  const busy = runs.reduce((sum, r) => sum + (r.machine?.busy ?? 0), 0);
  const total = runs.reduce((sum, r) => sum + (r.machine?.total ?? 0), 0);
  return {
    streams,
    pairs: good.length,
    failed: pairs.length - good.length,
    failures,
    direct: { ttft: q(good.map((p) => p.direct.ttft)), total: q(good.map((p) => p.direct.total)) },
    edge: { ttft: q(good.map((p) => p.edge.ttft)), total: q(good.map((p) => p.edge.total)) },
    added: {
      ttft: q(good.map((p) => p.edge.ttft - p.direct.ttft)),
      total: q(good.map((p) => p.edge.total - p.direct.total)),
    },
    ...(cpu !== undefined && pairs.length ? { cpuMs: (cpu * 1000) / pairs.length } : {}),
    ...(runs.every((r) => r.machine) && total > 0 ? { busyCores: (busy / total) * machineCores() } : {}),
    ...(await split(gw, good)),
  };
}

async function measure(
  gw: BenchGateway,
  pair: { direct: Side; edge: Side },
  streams: number,
  pairsPerStream: number,
  cpuSeconds?: () => number | undefined,
  spreadMs?: number,
): Promise<PairedRun> {
  return summarize(gw, streams, [await runPairs(pair, streams, pairsPerStream, cpuSeconds, spreadMs)]);
}

/**
 * The pairs' added time to first token, split at the backend by the simulator's records of the
 * same requests; nothing when any request went unrecorded (`GET /health` is not recorded).
 */
async function split(gw: BenchGateway, good: { direct: Timing; edge: Timing }[]): Promise<Pick<PairedRun, "split">> {
  const records = new Map((await gw.backends.records(OVERHEAD_BACKEND)).map((r) => [r.requestId, r]));
  const parts = (t: Timing) => {
    const r = records.get(t.id);
    return r?.firstTokenAt === undefined
      ? undefined
      : { toBackend: r.receivedAt - t.sentAt, toClient: t.firstAt - r.firstTokenAt };
  };
  const both = good.flatMap((p) => {
    const direct = parts(p.direct);
    const edge = parts(p.edge);
    return direct && edge ? [{ direct, edge }] : [];
  });
  if (both.length < good.length) return {};
  return {
    split: {
      toBackend: q(both.map((p) => p.edge.toBackend - p.direct.toBackend)),
      toClient: q(both.map((p) => p.edge.toClient - p.direct.toClient)),
    },
  };
}

export async function runOverhead(options: OverheadOptions = {}): Promise<OverheadFigures> {
  // A p99 from 1,000 pairs has a 95% interval between its 983rd and 997th values; from 500, it
  // runs to the largest, and one stray pair decides it.
  const serialPairs = options.serialPairs ?? 1000;
  const streams = options.streams ?? 200;
  const pairsPerStream = options.pairsPerStream ?? 5;
  const concurrentTokensPerSecond = options.concurrentTokensPerSecond ?? CONCURRENT_TOKENS_PER_SECOND;
  return withGateway(overheadPart(), { simulator: "separate process", ...options }, async (gw) => {
    const forwarder = await startBaseline("forward.js", gw.backends.url(OVERHEAD_BACKEND));
    const relayer = await startBaseline("relay.js", gw.backends.url(OVERHEAD_BACKEND)).catch(async (err: unknown) => {
      await forwarder.stop();
      throw err;
    });
    try {
      const { stream, floor, forward, relay, same, overRelay } = sides(gw, {
        forward: forwarder.url,
        relay: relayer.url,
      });
      const runs: PairedRun[] = [];
      const sames: PairedRun[] = [];
      const overRelays: PairedRun[] = [];
      const floors: PairedRun[] = [];
      const forwards: PairedRun[] = [];
      const relays: PairedRun[] = [];
      for (const warm of [stream, forward, relay]) await runPairs(warm, 1, Math.min(30, serialPairs));
      const edgePid = gw.edgeWorkerdPid();
      const cpu = () => (edgePid === undefined ? undefined : processCpuSeconds(edgePid));
      // One stream: the sides take turns in rounds, so that a slow spell of this machine falls on
      // all of them rather than on whichever side was running then; each round starts with a
      // different side.
      const turns = [
        { pair: stream, cpu, into: runs },
        { pair: forward, cpu: forwarder.cpuSeconds, into: forwards },
        { pair: relay, cpu: relayer.cpuSeconds, into: relays },
        { pair: same, into: sames },
        { pair: overRelay, into: overRelays },
        { pair: floor, cpu, into: floors },
      ];
      const rounds = Math.min(serialPairs, SERIAL_ROUNDS);
      const collected = turns.map(() => [] as Pairs[]);
      for (let round = 0; round < rounds; round++) {
        const size = Math.floor(serialPairs / rounds) + (round < serialPairs % rounds ? 1 : 0);
        for (let k = 0; k < turns.length; k++) {
          const at = (round + k) % turns.length;
          collected[at]!.push(await runPairs(turns[at]!.pair, 1, size, turns[at]!.cpu));
        }
      }
      for (const [at, side] of turns.entries()) side.into.push(await summarize(gw, 1, collected[at]!));
      await gw.backends.configure(OVERHEAD_BACKEND, { tokensPerSecond: concurrentTokensPerSecond });
      // One answer's length at this pace: the streams' starts are spread over it.
      const spread = answerMs(concurrentTokensPerSecond);
      try {
        // One pair per stream first: opens every connection before anything is measured.
        await runPairs(stream, streams, 1);
        runs.push(await measure(gw, stream, streams, pairsPerStream, cpu, spread));
        await runPairs(forward, streams, 1);
        forwards.push(await measure(gw, forward, streams, pairsPerStream, forwarder.cpuSeconds, spread));
        await runPairs(relay, streams, 1);
        relays.push(await measure(gw, relay, streams, pairsPerStream, relayer.cpuSeconds, spread));
        sames.push(await measure(gw, same, streams, pairsPerStream, undefined, spread));
        overRelays.push(await measure(gw, overRelay, streams, pairsPerStream, undefined, spread));
        floors.push(await measure(gw, floor, streams, pairsPerStream, cpu, spread));
      } finally {
        await gw.backends.configure(OVERHEAD_BACKEND, { tokensPerSecond: TOKENS_PER_SECOND });
      }
      return {
        simulator: gw.backends.mode,
        tokens: TOKENS,
        ttftMs: TTFT_MS,
        tokensPerSecond: TOKENS_PER_SECOND,
        concurrentTokensPerSecond,
        cores: machineCores(),
        runs,
        floor: floors,
        forward: forwards,
        relay: relays,
        same: sames,
        overRelay: overRelays,
      };
    } finally {
      await forwarder.stop();
      await relayer.stop();
    }
  });
}

/** Of a side's added time to first token and total time, the one that `pick` finds worse. */
const worse = (r: PairedRun, pick: (x: Quantiles) => number): Quantiles =>
  pick(r.added.total) >= pick(r.added.ttft) ? r.added.total : r.added.ttft;

export function reportOverhead(f: OverheadFigures): string {
  const pair = (x: Quantiles) => `${fmt(x.p50).padStart(6)} /${fmt(x.p99).padStart(6)}`;
  const row = (r: PairedRun, ttft: boolean) =>
    `${String(r.streams).padStart(7)} ${String(r.pairs).padStart(6)} ${String(r.failed).padStart(6)} | ` +
    (ttft ? `${pair(r.direct.ttft)}  ${pair(r.edge.ttft)}  ${pair(r.added.ttft)} | ` : "") +
    `${pair(r.direct.total)}  ${pair(r.edge.total)}  ${pair(r.added.total)} | ` +
    (r.cpuMs !== undefined ? fmt(r.cpuMs).padStart(14) : "             -") +
    ` | ${r.busyCores !== undefined ? fmt(r.busyCores).padStart(4) : "   -"}`;
  const busy = `busy cores (of ${f.cores})`;
  /** A baseline's rows under its title, its columns named after it (and after what it is paired with). */
  const table = (title: string, name: string, added: string, runs: PairedRun[], base = "direct") => {
    const columns = `${name.padEnd(13)}${added.padEnd(12)}|`;
    return [
      `${title}, ms, p50 / p99`,
      `streams  pairs failed | ttft: ${base.padEnd(12)}${columns} total: ${base.padEnd(11)}${columns} CPU ms/request | ${busy}`,
      ...runs.map((r) => row(r, true)),
    ];
  };
  const headline: string[] = [];
  for (const r of f.runs) {
    const relay = f.relay.find((x) => x.streams === r.streams);
    const forward = f.forward.find((x) => x.streams === r.streams);
    if (!relay) continue;
    const at = `at ${r.streams} stream${r.streams === 1 ? "" : "s"}`;
    if (r.cpuMs !== undefined && relay.cpuMs) {
      const ratio = r.cpuMs / relay.cpuMs;
      headline.push(
        `headline ${at}: CPU per streamed answer, the edge ${fmt(r.cpuMs)} ms over the relay floor's ${fmt(relay.cpuMs)} ms: ` +
          `${fmt(ratio)}x (goal at most ${RELAY_GOALS.cpu}x: ${verdict(ratio <= RELAY_GOALS.cpu)})` +
          (forward?.cpuMs
            ? `; the forwarding Worker ${fmt(forward.cpuMs)} ms, the edge ${fmt(r.cpuMs / forward.cpuMs)}x it`
            : ""),
      );
    }
    const edgeP99 = worse(r, (q) => q.p99).p99;
    const relayP99 = worse(relay, (q) => q.p99).p99;
    headline.push(
      `headline ${at}: added p99 (worse of ttft and total), the edge ${fmt(edgeP99)} ms over the relay floor's ${fmt(relayP99)} ms: ` +
        `${fmt(edgeP99 / relayP99)}x (goal at most ${RELAY_GOALS.p99}x: ${verdict(edgeP99 / relayP99 <= RELAY_GOALS.p99)})`,
    );
  }
  const lines = [
    ...headline,
    `gateway overhead: streamed tab completions of ${f.tokens} tokens (simulated: first token after ${f.ttftMs} ms, then ${f.tokensPerSecond} tokens/s at one stream and ${f.concurrentTokensPerSecond} tokens/s per stream when several run at once), straight to the simulator and through the local edge, in pairs; simulator ${f.simulator}; the same client (Node http, kept-alive connections) on both sides; ms, p50 / p99`,
    `streams  pairs failed | ttft: direct      edge         added       | total: direct     edge         added       | CPU ms/request | ${busy}`,
    "(CPU: what the Worker's workerd process used during its own turns over its requests, idle work such as the edge's health probes included, so it is high when requests are few; busy cores: the whole machine's, client and simulator included)",
    ...f.runs.map((r) => row(r, true)),
    ...table(
      "a Worker that only forwards (bench/workers/forward.js, no gateway code, run as npm start runs the edge), the same streams",
      "forward",
      "added",
      f.forward,
    ),
    ...table(
      "a Worker that relays each event in JavaScript and does nothing else (bench/workers/relay.js, run the same way)",
      "relay",
      "added",
      f.relay,
    ),
    ...table(
      "the direct request against itself (no Worker: how far two identical calls differ here)",
      "again",
      "difference",
      f.same,
    ),
    ...table(
      "the edge against the relay Worker instead of the direct call (what the gateway's own work adds over the least a Worker that touches every event does)",
      "edge",
      "over relay",
      f.overRelay,
      "relay",
    ),
    "floor of the local edge (GET /healthz, no gateway code, against the simulator's GET /health), ms, p50 / p99",
    `streams  pairs failed | total: direct     edge         added       | CPU ms/request | ${busy}`,
    ...f.floor.map((r) => row(r, false)),
  ];
  /** Every measured side: its name in failure lines, and in the split table (the floor has no split). */
  const measured = [
    ["edge", "the edge", f.runs],
    ["relay", "relay Worker", f.relay],
    ["forward", "forward Worker", f.forward],
    ["same", "direct again", f.same],
    ["overRelay", "edge over relay", f.overRelay],
    ["floor", "floor", f.floor],
  ] as const;
  const splitRows = measured.flatMap(([, label, list]) =>
    list.flatMap((r) =>
      r.split
        ? [
            `${label.padEnd(15)} ${String(r.streams).padStart(7)} | ${pair(r.split.toBackend).padEnd(16)} | ${pair(r.split.toClient)}`,
          ]
        : [],
    ),
  );
  if (splitRows.length)
    lines.push(
      "where the added time to first token goes, from the simulator's records of the same requests (paired differences, ms, p50 / p99)",
      "side            streams | to the backend   | from its first token to the client",
      ...splitRows,
    );
  for (const [what, , list] of measured)
    for (const r of list)
      for (const [why, n] of Object.entries(r.failures))
        lines.push(`${what} failed at ${r.streams} streams, ${n}x: ${why}`);
  for (const r of f.runs) {
    const p50Of = worse(r, (x) => x.p50);
    const p99Of = worse(r, (x) => x.p99);
    const p50 = p50Of.p50;
    const p99 = p99Of.p99;
    const floor = f.floor.find((x) => x.streams === r.streams);
    const forward = f.forward.find((x) => x.streams === r.streams);
    const relay = f.relay.find((x) => x.streams === r.streams);
    const same = f.same.find((x) => x.streams === r.streams);
    const overRelay = f.overRelay.find((x) => x.streams === r.streams);
    const worst = (x: PairedRun) =>
      `p50 ${fmt(worse(x, (q) => q.p50).p50)} ms, p99 ${fmt(worse(x, (q) => q.p99).p99)} ms`;
    lines.push(
      `target at ${r.streams} stream${r.streams === 1 ? "" : "s"}: added p50 ${against(p50, OVERHEAD_TARGETS.p50)} ms < ${OVERHEAD_TARGETS.p50} ms ${verdict(p50 < OVERHEAD_TARGETS.p50)} ` +
        `(${settles(p50Of.p50Interval, OVERHEAD_TARGETS.p50)}); ` +
        `added p99 ${against(p99, OVERHEAD_TARGETS.p99)} ms < ${OVERHEAD_TARGETS.p99} ms ${verdict(p99 < OVERHEAD_TARGETS.p99)} ` +
        `(${settles(p99Of.p99Interval, OVERHEAD_TARGETS.p99)}) (worse of ttft and total)` +
        (floor
          ? `; the floor alone adds p50 ${fmt(floor.added.total.p50)} ms, p99 ${fmt(floor.added.total.p99)} ms`
          : "") +
        (forward ? `; a Worker that only forwards adds ${worst(forward)}` : "") +
        (relay ? `; one that relays each event in JavaScript adds ${worst(relay)}` : "") +
        (same ? `; two identical direct calls differ by ${worst(same)}` : "") +
        (overRelay ? `; the edge adds ${worst(overRelay)} over the relay, pair by pair` : ""),
    );
    // A forwarder's few requests in a short run may stay under one clock tick: no ratio then.
    if (r.cpuMs !== undefined && forward?.cpuMs)
      lines.push(
        `CPU per streamed answer at ${r.streams} stream${r.streams === 1 ? "" : "s"}: the edge ${fmt(r.cpuMs)} ms, ` +
          `the forwarding Worker ${fmt(forward.cpuMs)} ms in the same run: ${fmt(r.cpuMs / forward.cpuMs)}x ` +
          `(goal at most ${CPU_RATIO_GOAL}x: ${verdict(r.cpuMs / forward.cpuMs <= CPU_RATIO_GOAL)})` +
          (relay?.cpuMs !== undefined
            ? `; the Worker that relays each event in JavaScript ${fmt(relay.cpuMs)} ms, ${fmt(relay.cpuMs / forward.cpuMs)}x`
            : ""),
      );
  }
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(reportOverhead(await runOverhead()));
}
