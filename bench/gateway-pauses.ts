/**
 * Where the gateway's slowest requests lose their time: the runtime's garbage-collection pauses.
 * Streamed tab completions go through the local edge and then through the JavaScript relay Worker
 * (`bench/workers/relay.js`), while Linux `perf` samples the Worker's workerd process: first one at
 * a time, as in the overhead benchmark's one-stream run, then from 200 concurrent streams at its
 * many-stream pace. Runs of consecutive samples inside V8's or cppgc's collector on the thread that
 * runs JavaScript are the pauses, and a pause with a sample in V8's full (mark-compact) collection
 * counts as a full one. A request is slow when its whole answer takes 5 ms or more over the median,
 * and late when it reaches the backend 5 ms or more after the median does; either is put down to a
 * pause when they overlap. With many streams every answer overlaps some pause, so only lateness is
 * attributed there.
 *
 *   npx tsx bench/gateway-pauses.ts             # 30 s through each, at 1 and at 200 streams
 *
 * Needs `perf` that may record the process (root, or a low `kernel.perf_event_paranoid`); without
 * it the benchmark says so and measures nothing.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { quantileOf, sleep, withGateway, type BenchGateway } from "./gateway-fixture.js";
import {
  CONCURRENT_TOKENS_PER_SECOND,
  OVERHEAD_BACKEND,
  TOKENS_PER_SECOND,
  answerMs,
  edgeSide,
  overheadPart,
  send,
  startBaseline,
  workerSide,
  type Side,
  type Timing,
} from "./gateway-overhead.js";
import { fmt, quantile } from "./stats.js";

/** Samples per second. */
const FREQUENCY = 2_000;
/** A slow request takes this much longer than the median. */
const SLOW_MS = 5;
/** Between requests, about what the overhead benchmark's direct half of a pair takes. */
const GAP_MS = 37;

/** Frames of a collection: V8's collectors and cppgc's marking, sweeping and finalizing. */
const GC_FRAME =
  /v8::internal::(?:Heap::CollectGarbage|Heap::PerformGarbageCollection|MarkCompactCollector|Scavenger|MinorMarkSweep|Sweeper|IncrementalMarking|ConcurrentMarking|MarkingVisitor)|cppgc::internal::|HeapTracer::|Wrappable::detachWrapper|BackingStore::~BackingStore/;

/** Frames of V8's full collection: marking the whole heap, then evacuating and updating pointers. */
const FULL_GC_FRAME =
  /v8::internal::(?:MarkCompactCollector|MarkingVisitorBase|ConcurrentMarking|Evacuator|PointersUpdatingJob)/;

/** Frames that only a symbolised workerd shows: without any, `perf` could not name its functions. */
const RUNTIME_FRAME = /v8::|kj::|workerd::|cppgc::/;

/**
 * Below this many samples on the main thread, finding no collection can be true (a short run);
 * above it, a Worker under steady traffic always collects, so none found means the frames were
 * not recognised.
 */
const ENOUGH_SAMPLES = 2_000;

export interface Pause {
  /** Seconds, on the clock `perf` recorded with. */
  start: number;
  end: number;
  /** Whether any of its samples is in V8's full collection. */
  full: boolean;
}

/**
 * The collection pauses in `perf script -F tid,time,ip,sym` output: runs of consecutive samples
 * with a collector frame, on the thread with the most samples, no more than two sample intervals
 * apart.
 */
export function gcPauses(
  script: string,
  frequency = FREQUENCY,
): { pauses: Pause[]; samples: number; gcSamples: number; symbolised: number } {
  const samples: { tid: string; time: number; gc: boolean; full: boolean; symbolised: boolean }[] = [];
  let current: (typeof samples)[number] | undefined;
  for (const line of script.split("\n")) {
    const head = /^\S*\s*(\d+)\s+(\d+\.\d+):/.exec(line);
    if (head && !line.startsWith("\t")) {
      current = { tid: head[1]!, time: Number(head[2]), gc: false, full: false, symbolised: false };
      samples.push(current);
    } else if (current) {
      if (GC_FRAME.test(line)) current.gc = true;
      if (FULL_GC_FRAME.test(line)) current.full = true;
      if (RUNTIME_FRAME.test(line)) current.symbolised = true;
    }
  }
  const byThread = new Map<string, number>();
  for (const s of samples) byThread.set(s.tid, (byThread.get(s.tid) ?? 0) + 1);
  const main = [...byThread].sort((a, b) => b[1] - a[1])[0]?.[0];
  const interval = 1 / frequency;
  const pauses: Pause[] = [];
  let open: Pause | undefined;
  let gcSamples = 0;
  for (const s of samples) {
    if (s.tid !== main) continue;
    // A sample outside the collector ends the pause: the thread ran something else in between.
    if (!s.gc) {
      if (open) pauses.push(open);
      open = undefined;
      continue;
    }
    gcSamples++;
    if (open && s.time - open.end <= 2 * interval) {
      open.end = s.time;
      open.full ||= s.full;
    } else {
      if (open) pauses.push(open);
      open = { start: s.time, end: s.time, full: s.full };
    }
  }
  if (open) pauses.push(open);
  // A run of n samples stands for about n intervals of time.
  for (const p of pauses) p.end += interval;
  const onMain = samples.filter((s) => s.tid === main);
  return { pauses, samples: onMain.length, gcSamples, symbolised: onMain.filter((s) => s.symbolised).length };
}

/**
 * Why the collector could not be seen in a recording, or undefined when it could: no runtime
 * symbols at all (a stripped binary), or enough samples and not one in a collector frame (a runtime
 * whose collector functions have other names than `GC_FRAME` knows). Either would otherwise read
 * as a Worker that never pauses.
 */
export function unattributed(found: { samples: number; gcSamples: number; symbolised: number }): string | undefined {
  if (found.samples < ENOUGH_SAMPLES || found.gcSamples > 0) return undefined;
  if (found.symbolised === 0) return `perf named none of workerd's functions in ${found.samples} samples`;
  return `no collector frame among ${found.samples} samples: this workerd's collector functions are not among those bench/gateway-pauses.ts knows`;
}

export interface PauseRun {
  side: string;
  /** Concurrent streams. */
  streams: number;
  seconds: number;
  requests: number;
  /** Median and p99 of the whole answer, ms. */
  p50: number;
  p99: number;
  /** Requests 5 ms or more over the median, and how many of them overlap a pause (one stream only). */
  slow: number;
  slowInPause?: number;
  /** Time until the backend had the request (its record against the client's send), ms. */
  toBackend: { p50: number; p99: number };
  /** Requests that reached the backend 5 ms or more after the median, and how many overlap a pause. */
  late: number;
  lateInPause: number;
  /** Pauses of 2 ms or more, longest first (ms). */
  pauses: number[];
  /** Of the pauses of 5 ms or more, how many were in a full collection. */
  longPauses: number;
  longFull: number;
  /** Milliseconds per second the main thread spent collecting. */
  gcMsPerSecond: number;
  /** Why no collection could be told apart in this recording; its pause figures then mean nothing. */
  unattributed?: string;
}

export type PauseFigures = { runs: PauseRun[] } | { skipped: string };

/** Why `perf` cannot record a process here, or undefined when it can. */
function perfUnavailable(): string | undefined {
  if (process.platform !== "linux") return "perf runs on Linux only";
  const version = spawnSync("perf", ["--version"], { encoding: "utf8" });
  if (version.status !== 0) return "no perf on this machine (the linux-perf package)";
  const probe = spawnSync("perf", ["record", "-F", "99", "-o", "/dev/null", "--", "true"], { encoding: "utf8" });
  if (probe.status !== 0) return `perf may not record here: ${probe.stderr.trim().split("\n")[0]}`;
  return undefined;
}

/** Requests from `streams` concurrent streams, each sending its next as its last ends, for `seconds`. */
async function load(request: Side, streams: number, seconds: number): Promise<Timing[]> {
  const timed: Timing[] = [];
  const until = performance.now() + seconds * 1000;
  // One stream waits between requests, as the direct half of the overhead benchmark's pair does;
  // many streams spread their starts over an answer and then follow on at once.
  const spread = streams > 1 ? answerMs(CONCURRENT_TOKENS_PER_SECOND) : 0;
  await Promise.all(
    Array.from({ length: streams }, async (_, stream) => {
      if (spread > 0) await sleep((stream * spread) / streams);
      while (performance.now() < until) {
        const t = await send(request);
        if (!t.failure) timed.push(t);
        if (streams === 1) await sleep(GAP_MS);
      }
    }),
  );
  return timed;
}

async function record(
  gw: BenchGateway,
  side: string,
  pid: number,
  request: Side,
  seconds: number,
  streams: number,
): Promise<PauseRun> {
  // Warm up: 100 requests one at a time, or one per stream, which also opens every stream's connection.
  if (streams === 1) for (let i = 0; i < 100; i++) await send(request);
  else await Promise.all(Array.from({ length: streams }, () => send(request)));
  const dir = mkdtempSync(join(tmpdir(), "sextant-pauses-"));
  const data = join(dir, "perf.data");
  try {
    const perf = spawn(
      "perf",
      ["record", "-F", String(FREQUENCY), "-g", "-k", "CLOCK_REALTIME", "-o", data, "-p", String(pid)],
      { stdio: "ignore" },
    );
    const exited = new Promise((resolve) => perf.once("exit", resolve));
    await sleep(500);
    const timed = await load(request, streams, seconds);
    perf.kill("SIGINT");
    await exited;
    const script = spawnSync("perf", ["script", "-i", data, "-F", "tid,time,ip,sym"], {
      encoding: "utf8",
      maxBuffer: 2 ** 30,
    }).stdout;
    const found = gcPauses(script);
    const { pauses, gcSamples } = found;
    const why = unattributed(found);
    const overlaps = (from: number, to: number) => pauses.some((p) => p.start * 1000 < to && p.end * 1000 > from);
    const totals = timed.map((t) => t.total);
    const p50 = quantile(totals, 0.5);
    const slow = timed.filter((t) => t.total >= p50 + SLOW_MS);
    const received = new Map((await gw.backends.records(OVERHEAD_BACKEND)).map((r) => [r.requestId, r.receivedAt]));
    const reached = timed.flatMap((t) => {
      const at = received.get(t.id);
      return at === undefined ? [] : [{ from: t.sentAt, to: at, ms: at - t.sentAt }];
    });
    const toBackend = reached.map((r) => r.ms);
    const median = quantileOf(toBackend, 0.5);
    const late = reached.filter((r) => r.ms >= median + SLOW_MS);
    const ms = pauses.map((p) => ({ ms: (p.end - p.start) * 1000, full: p.full }));
    const long = ms.filter((p) => p.ms >= SLOW_MS);
    return {
      side,
      streams,
      seconds,
      requests: timed.length,
      p50,
      p99: quantile(totals, 0.99),
      slow: slow.length,
      ...(streams === 1 ? { slowInPause: slow.filter((t) => overlaps(t.sentAt, t.sentAt + t.total)).length } : {}),
      toBackend: { p50: median, p99: quantileOf(toBackend, 0.99) },
      late: late.length,
      lateInPause: late.filter((r) => overlaps(r.from, r.to)).length,
      pauses: ms
        .map((p) => p.ms)
        .filter((v) => v >= 2)
        .sort((a, b) => b - a),
      longPauses: long.length,
      longFull: long.filter((p) => p.full).length,
      gcMsPerSecond: (gcSamples * 1000) / FREQUENCY / seconds,
      ...(why ? { unattributed: why } : {}),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runPauses(
  options: { seconds?: number; streams?: number; gateway?: BenchGateway } = {},
): Promise<PauseFigures> {
  const unavailable = perfUnavailable();
  if (unavailable) return { skipped: unavailable };
  const seconds = options.seconds ?? 30;
  const streams = options.streams ?? 200;
  return withGateway(overheadPart(), { simulator: "separate process", ...options }, async (gw) => {
    const edgePid = gw.edgeWorkerdPid();
    if (edgePid === undefined) return { skipped: "the edge's workerd process was not found" };
    const relay = await startBaseline("relay.js", gw.backends.url(OVERHEAD_BACKEND));
    try {
      const relayPid = relay.pid;
      if (relayPid === undefined) return { skipped: "the relay Worker's workerd process was not found" };
      const sides = [
        { name: "the edge", pid: edgePid, request: edgeSide(gw) },
        { name: "relay Worker", pid: relayPid, request: workerSide(gw, relay.url) },
      ];
      const runs: PauseRun[] = [];
      for (const side of sides) runs.push(await record(gw, side.name, side.pid, side.request, seconds, 1));
      await gw.backends.configure(OVERHEAD_BACKEND, { tokensPerSecond: CONCURRENT_TOKENS_PER_SECOND });
      try {
        for (const side of sides) runs.push(await record(gw, side.name, side.pid, side.request, seconds, streams));
      } finally {
        await gw.backends.configure(OVERHEAD_BACKEND, { tokensPerSecond: TOKENS_PER_SECOND });
      }
      return { runs };
    } finally {
      await relay.stop();
    }
  });
}

export function reportPauses(f: PauseFigures): string {
  if ("skipped" in f) return `gateway pauses: not measured: ${f.skipped}`;
  const lines = [
    `gateway pauses: streamed tab completions through each Worker, one at a time (${GAP_MS} ms apart) and from many concurrent streams (${CONCURRENT_TOKENS_PER_SECOND} tokens/s each), its workerd sampled by perf at ${FREQUENCY} Hz; slow: the whole answer ${SLOW_MS} ms or more over the median; late: reaching the backend ${SLOW_MS} ms or more after the median; either counted in a GC pause when they overlap (slow only at one stream: with many, every answer overlaps one)`,
    "side            streams seconds requests | total p50 / p99 ms | slow  in a GC pause | to backend p50 / p99 ms | late  in a GC pause | GC ms/s | pauses of 2 ms or more: count, median, longest (ms) | of 5 ms or more: count, full collections",
  ];
  for (const r of f.runs) {
    if (r.unattributed) {
      lines.push(`${r.side.padEnd(15)} ${String(r.streams).padStart(7)} pauses not measured: ${r.unattributed}`);
      continue;
    }
    const median = r.pauses.length ? fmt(quantile(r.pauses, 0.5)) : "-";
    const longest = r.pauses.length ? fmt(r.pauses[0]!) : "-";
    lines.push(
      `${r.side.padEnd(15)} ${String(r.streams).padStart(7)} ${String(r.seconds).padStart(7)} ${String(r.requests).padStart(8)} | ` +
        `${`${fmt(r.p50)} / ${fmt(r.p99)}`.padStart(18)} | ${String(r.slow).padStart(4)}  ${(r.slowInPause === undefined ? "-" : String(r.slowInPause)).padStart(14)} | ` +
        `${`${fmt(r.toBackend.p50)} / ${fmt(r.toBackend.p99)}`.padStart(23)} | ${String(r.late).padStart(4)}  ${String(r.lateInPause).padStart(14)} | ` +
        `${fmt(r.gcMsPerSecond).padStart(7)} | ${r.pauses.length}, ${median}, ${longest} | ${r.longPauses}, ${r.longFull}`,
    );
  }
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  console.log(reportPauses(await runPauses()));
}
