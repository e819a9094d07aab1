import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { cpus } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { reportAgentBench, runAgentBench } from "../../bench/agents.js";
import { reportLake, runLakeBench } from "../../bench/lake.js";
import { report, runAuthCacheBench } from "../../bench/auth-cache.js";
import { rng } from "../../bench/code-fixture.js";
import { reportEditSearchable, runEditSearchable } from "../../bench/edit-searchable.js";
import { reportCliStartup, runCliStartup } from "../../bench/cli-startup.js";
import { cancelPart, reportCancel, runCancel } from "../../bench/gateway-cancel.js";
import { coldStartPart, reportColdStart, runColdStart } from "../../bench/gateway-coldstart.js";
import {
  FAILOVER_MODES,
  failoverPart,
  reportFailover,
  runFailover,
  type FailoverMode,
} from "../../bench/gateway-failover.js";
import { startBenchGateway, type BenchGateway } from "../../bench/gateway-fixture.js";
import { against, overheadPart, reportOverhead, runOverhead, send, settles } from "../../bench/gateway-overhead.js";
import { quantileInterval } from "../../bench/stats.js";
import { gcPauses, reportPauses, runPauses, unattributed } from "../../bench/gateway-pauses.js";
import { overloadPart, reportOverload, runOverload } from "../../bench/gateway-overload.js";
import { reportThroughput, runIndexThroughput } from "../../bench/index-throughput.js";
import { reportLimitsOverhead, runLimitsOverhead } from "../../bench/limits-overhead.js";
import { reportScan, runScanBench } from "../../bench/scan.js";
import { reportSyncCost, runSyncCost } from "../../bench/sync-cost.js";
import { reportTeammateClone, runTeammateClone } from "../../bench/teammate-clone.js";
import { reportWatch, runWatchLatency } from "../../bench/watch-latency.js";
import { edgeLogFile, ROOT } from "../support/local-edge.js";

/** A short run of each benchmark, so that CI notices when one breaks; the figures come from full runs. */
describe("benchmarks (smoke)", () => {
  it("search-scale fills a Workspace object and reports latency, memory and segments", () => {
    const run = spawnSync("npx", ["vitest", "run", "--config", "vitest.scale.config.ts"], {
      cwd: new URL("../../", import.meta.url).pathname,
      env: { ...process.env, SCALE_POINTS: "3000", SCALE_QUERIES: "20" },
      encoding: "utf8",
      timeout: 170_000,
    });
    // Its workerd writes here and nowhere else: keep it for `npm test`'s scan of the runtime's messages.
    writeFileSync(edgeLogFile("search-scale"), run.stdout + run.stderr);
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      /3,000 chunks \| p50 [\d.]+ ms \| p95 [\d.]+ ms \| p99 [\d.]+ ms .*index memory [\d.]+ MiB/,
    );
  }, 180_000);

  it("auth-cache measures every case and reports the ratio", async () => {
    const results = await runAuthCacheBench(20);
    expect(Object.keys(results)).toHaveLength(3);
    for (const figures of Object.values(results)) {
      expect(figures.p50).toBeGreaterThan(0);
      expect(figures.p99).toBeGreaterThanOrEqual(figures.p50);
    }
    expect(report(results)).toContain("cache off / cache on");
  }, 180_000);

  it("scan measures cold and warm scans against git", async () => {
    const figures = await runScanBench(2000, { cold: 1, warm: 2 });
    expect(figures.files).toBe(2001);
    expect(figures.warmMs).toBeGreaterThan(0);
    expect(reportScan(figures)).toContain("git status");
  }, 180_000);

  it("sync-cost measures round trips and bytes for each change count and the flat baseline", async () => {
    const result = await runSyncCost(2000, [0, 1, 10]);
    expect(result.runs.map((r) => r.changed)).toEqual([0, 1, 10, 10]);
    expect(result.runs[0]).toMatchObject({ roundTrips: 1, strategy: "unchanged" });
    expect(reportSyncCost(result, 2000)).toContain("flat manifest");
  }, 180_000);

  it("watch-latency measures saves reaching the edge", async () => {
    const figures = await runWatchLatency(500, 3);
    expect(figures.p95).toBeGreaterThanOrEqual(figures.p50);
    expect(reportWatch(figures)).toContain("p95");
  }, 180_000);

  it("index-throughput reports chunks per second and splits the time between edge and device", async () => {
    const figures = await runIndexThroughput(120);
    expect(figures.files).toBe(121);
    expect(figures.chunks).toBeGreaterThan(figures.files);
    expect(figures.deviceChunks).toBe(figures.chunks);
    expect(figures.requestMs).toBeGreaterThan(figures.objectMs);
    expect(figures.wallMs).toBeGreaterThan(figures.requestMs);
    expect(figures.deviceRunsMs).toHaveLength(3);
    expect(reportThroughput(figures)).toMatch(/[\d,]+ chunks\/s, [\d,]+ files\/s/);
  }, 180_000);

  it("pauses finds collection pauses on the busiest thread of perf's samples, and says when it cannot", () => {
    // Samples 0.5 ms apart (2,000 Hz): three runs of collector frames on thread 7 (the last two
    // split by a sample outside the collector), one on thread 9.
    const sample = (tid: number, t: number, frames: string[]) =>
      `workerd ${tid} ${t.toFixed(6)}: cpu-clock:\n${frames.map((f) => `\t     abc ${f}`).join("\n")}\n`;
    const js = ["Builtins_InterpreterEntryTrampoline", "kj::EventLoop::turn"];
    const gc = ["v8::internal::MarkCompactCollector::CollectGarbage", "v8::internal::Heap::CollectGarbage"];
    const sweep = ["cppgc::internal::SweepFinalizer::Finalize", "kj::EventLoop::turn"];
    const script = [
      sample(7, 10.0, js),
      sample(7, 10.0005, gc),
      sample(7, 10.001, gc),
      sample(7, 10.0015, sweep),
      sample(7, 10.002, js),
      sample(9, 10.002, gc),
      sample(7, 10.0025, js),
      sample(7, 10.01, gc),
      sample(7, 10.0105, js),
      sample(7, 10.011, sweep),
    ].join("\n");
    const found = gcPauses(script, 2_000);
    expect(found.samples).toBe(9);
    expect(found.gcSamples).toBe(5);
    expect(found.symbolised).toBe(9);
    // A pause is a full collection when any of its samples is in mark-compact; sweeping alone is not.
    expect(found.pauses.map((p) => [p.start, +(p.end - p.start).toFixed(4), p.full])).toEqual([
      [10.0005, 0.0015, true],
      [10.01, 0.0005, true],
      [10.011, 0.0005, false],
    ]);
    // A short recording may hold no collection at all.
    expect(unattributed(found)).toBeUndefined();
    expect(unattributed(gcPauses(sample(7, 10, js), 2_000))).toBeUndefined();

    // A long one with none means the collector went unrecognised, or perf named nothing: said, not
    // reported as a Worker that never pauses.
    const long = (frames: string[]) =>
      gcPauses(Array.from({ length: 3_000 }, (_, i) => sample(7, 10 + i / 2_000, frames)).join("\n"), 2_000);
    expect(unattributed(long(js))).toMatch(/^no collector frame among 3000 samples/);
    expect(unattributed(long(["[unknown]", "[unknown]"]))).toMatch(/^perf named none of workerd's functions/);
    const renamed = long(js);
    expect(
      reportPauses({
        runs: [
          {
            side: "the edge",
            streams: 1,
            seconds: 30,
            requests: 1,
            p50: 1,
            p99: 1,
            slow: 0,
            slowInPause: 0,
            toBackend: { p50: 1, p99: 1 },
            late: 0,
            lateInPause: 0,
            pauses: [],
            longPauses: 0,
            longFull: 0,
            gcMsPerSecond: 0,
            unattributed: unattributed(renamed)!,
          },
        ],
      }),
    ).toMatch(/the edge\s+1 pauses not measured: no collector frame/);
    expect(unattributed(long([...js, ...gc]))).toBeUndefined();
  });

  it("teammate-clone makes a clone searchable without uploading any chunk", async () => {
    const figures = await runTeammateClone(80, 1);
    expect(figures.chunks).toBeGreaterThan(80);
    expect(figures.runs[0]).toMatchObject({ chunksUploaded: 0, strategy: "unchanged", roundTrips: 1 });
    expect(figures.runs[0]!.totalMs).toBeGreaterThan(figures.runs[0]!.indexMs);
    expect(reportTeammateClone(figures)).toContain("from nothing to a search hit");
  }, 180_000);

  it("edit-searchable measures saves until search ranks them first", async () => {
    // Seeded: the same invented words every run. With the system's random words, one run in many
    // drew a save whose chunk ranked second behind an earlier save's for a minute, and failed.
    const figures = await runEditSearchable(80, 3, 50, 7);
    expect(figures.saves).toBe(3);
    expect(figures.searchable.p95).toBeGreaterThanOrEqual(figures.searchable.p50);
    expect(figures.synced.p50).toBeGreaterThan(0);
    expect(reportEditSearchable(figures)).toContain("save to top search hit");
  }, 180_000);
});

/**
 * The gateway benchmarks at a tiny size, all on one local edge whose configuration joins their
 * pools: the shape of each report and the invariants the gateway promises (never past a backend's
 * capacity, never a silent truncation, every cancellation reaching the backend); no timing.
 */
describe("gateway benchmarks (smoke)", () => {
  const modes = Object.keys(FAILOVER_MODES) as FailoverMode[];
  const coldStart = { capacity: 2, rampMs: 1_500, slowStartMs: 1_500 };
  let gateway: BenchGateway;

  beforeAll(async () => {
    gateway = await startBenchGateway([
      overheadPart(),
      cancelPart(),
      overloadPart({ capacity: 4 }),
      failoverPart({ modes }),
      coldStartPart(coldStart),
    ]);
  }, 120_000);
  afterAll(async () => gateway?.stop());

  it("overhead pairs direct and edge requests at one and several streams, against the edge's floor", async () => {
    const figures = await runOverhead({
      serialPairs: 10,
      streams: 4,
      pairsPerStream: 2,
      concurrentTokensPerSecond: 400,
      gateway,
    });
    expect(figures.runs.map((r) => [r.streams, r.pairs + r.failed])).toEqual([
      [1, 10],
      [4, 8],
    ]);
    expect(figures.floor.map((r) => r.streams)).toEqual([1, 4]);
    for (const baseline of [figures.forward, figures.relay, figures.same, figures.overRelay])
      expect(baseline.map((r) => [r.streams, r.pairs])).toEqual([
        [1, 10],
        [4, 8],
      ]);
    const all = [
      ...figures.runs,
      ...figures.floor,
      ...figures.forward,
      ...figures.relay,
      ...figures.same,
      ...figures.overRelay,
    ];
    for (const r of all) {
      expect(r.failed).toBe(0);
      expect(Number.isFinite(r.added.total.p50) && Number.isFinite(r.added.total.p99)).toBe(true);
    }
    // Every streamed side is split at the backend by its request id; the floor's GET /health is not recorded.
    for (const r of [...figures.runs, ...figures.forward, ...figures.relay, ...figures.same, ...figures.overRelay])
      expect(Number.isFinite(r.split?.toBackend.p50) && Number.isFinite(r.split?.toClient.p50)).toBe(true);
    expect(figures.floor.every((r) => r.split === undefined)).toBe(true);
    // Each Worker's CPU is read from /proc on Linux, where this runs. The relay touches every event in
    // JavaScript, so over all its requests it uses clock ticks' worth; the forwarder leaves the body
    // to the runtime, and its few requests may stay under one tick.
    expect(figures.runs.every((r) => r.cpuMs !== undefined && r.cpuMs > 0)).toBe(true);
    expect(figures.relay.reduce((sum, r) => sum + r.cpuMs! * r.pairs, 0)).toBeGreaterThan(0);
    for (const r of figures.forward) expect(r.cpuMs).toBeGreaterThanOrEqual(0);
    // Pairs of two Workers, or of none, have no one Worker's CPU.
    expect([...figures.same, ...figures.overRelay].every((r) => r.cpuMs === undefined)).toBe(true);
    // How busy the whole machine was, for every side at every concurrency: the streamed sides keep
    // it busy for clock ticks' worth; the floor's few health checks take well under a millisecond
    // each, and may all fall between two ticks (no figure then, printed as "-").
    for (const r of figures.floor) if (r.busyCores !== undefined) expect(r.busyCores).toBeGreaterThanOrEqual(0);
    for (const r of [...figures.runs, ...figures.forward, ...figures.relay, ...figures.same, ...figures.overRelay])
      expect(r.busyCores).toBeGreaterThan(0);
    // Busy cores are counted over every core of the machine, whatever this process's affinity.
    expect(figures.cores).toBe(cpus().length);
    expect(figures.concurrentTokensPerSecond).toBe(400);
    const report = reportOverhead(figures);
    expect(report).toContain("1000 tokens/s at one stream and 400 tokens/s per stream when several run at once");
    expect(report).toMatch(/busy cores \(of \d+\)/);
    expect(report).toMatch(/target at 4 streams: added p50 [\d.-]+ ms < 1.5 ms (met|MISSED) \(95% interval /);
    expect(report).toMatch(
      /added p99 [\d.-]+ ms < 5 ms (met|MISSED) \(95% interval [^)]+\) \(worse of ttft and total\)/,
    );
    expect(report).toMatch(/a Worker that only forwards adds p50 [\d.-]+ ms/);
    expect(report).toMatch(/one that relays each event in JavaScript adds p50 [\d.-]+ ms/);
    expect(report).toMatch(/two identical direct calls differ by p50 [\d.-]+ ms/);
    expect(report).toMatch(/the edge adds p50 [\d.-]+ ms, p99 [\d.-]+ ms over the relay, pair by pair/);
    expect(report).toMatch(/ttft: relay\s+edge\s+over relay/);
    expect(report).toMatch(/the edge\s+1 \|\s+[\d.-]+ \/\s*[\d.-]+\s+\|/);
    // The edge's CPU per answer against the forwarder's, where the forwarder's own run used a tick.
    for (const r of figures.runs) {
      const forward = figures.forward.find((x) => x.streams === r.streams)!;
      const line = new RegExp(
        `CPU per streamed answer at ${r.streams} streams?: the edge [\\d.]+ ms, the forwarding Worker [\\d.]+ ms in the same run: [\\d.]+x \\(goal at most 1.5x: (met|MISSED)\\)`,
      );
      if (forward.cpuMs) expect(report).toMatch(line);
      else expect(report).not.toMatch(line);
    }
  }, 60_000);

  it("overhead's intervals are order statistics that cover the true quantile", () => {
    const ranks = (n: number) => Array.from({ length: n }, (_, i) => i + 1);
    // The classic 95% interval of a median from 100 values: the 40th to the 61st.
    expect(quantileInterval(ranks(100), 0.5)).toEqual({ lo: 40, hi: 61 });
    expect(quantileInterval(ranks(500), 0.99)).toEqual({ lo: 490, hi: 500 });
    expect(quantileInterval(ranks(2000), 0.99)).toEqual({ lo: 1971, hi: 1989 });
    // 50 values cannot bound a p99 from above.
    expect(quantileInterval(ranks(50), 0.99)).toEqual({ lo: 48, hi: Infinity });
    expect(quantileInterval([], 0.99).lo).toBeNaN();
    expect(() => quantileInterval([1, 2], 1)).toThrow(RangeError);
    // Coverage: samples of an exponential distribution, whose p99 is ln 100; a seeded generator
    // keeps the draw the same on every run.
    const random = rng(42).next;
    const truth = Math.log(100);
    let covered = 0;
    const trials = 1000;
    for (let i = 0; i < trials; i++) {
      const sample = Array.from({ length: 500 }, () => -Math.log(1 - random()));
      const { lo, hi } = quantileInterval(sample, 0.99);
      if (lo <= truth && truth <= hi) covered++;
    }
    // The chosen ranks give 98% here; a rank off by one either way would show below 95% or near 99%.
    expect(covered / trials).toBeGreaterThan(0.96);
    expect(covered / trials).toBeLessThan(0.995);
  });

  it("overhead says whether a run's pairs settle a target", () => {
    expect(settles({ lo: 1.1, hi: 1.3 }, 1.5)).toBe("95% interval 1.10 ms to 1.30 ms: below the target");
    expect(settles({ lo: 5.2, hi: 9 }, 5)).toBe("95% interval 5.20 ms to 9.00 ms: above the target");
    expect(settles({ lo: 4.2, hi: 9.1 }, 5)).toBe(
      "95% interval 4.20 ms to 9.10 ms: holds the target, so these pairs cannot settle it",
    );
    expect(settles({ lo: 3, hi: Infinity }, 5)).toBe(
      "95% interval 3.00 ms to unbounded: holds the target, so these pairs cannot settle it",
    );
  });

  it("overhead prints a figure next to its target with the digits that tell them apart", () => {
    expect(against(1.497, 1.5)).toBe("1.497");
    expect(against(1.503, 1.5)).toBe("1.503");
    expect(against(1.52, 1.5)).toBe("1.52");
    expect(against(4.996, 5)).toBe("4.996");
    expect(against(12.3, 5)).toBe("12");
  });

  it("overhead times the first token, not an SSE comment sent before it", async () => {
    const server = createServer((_, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(":\n\n");
      setTimeout(() => res.end('data: {"choices":[]}\n\ndata: [DONE]\n\n'), 80);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
      const timing = await send({ url, init: {}, complete: (status) => status === 200 });
      expect(timing.failure).toBeUndefined();
      expect(timing.ttft).toBeGreaterThanOrEqual(70);
      expect(timing.total).toBeGreaterThanOrEqual(timing.ttft);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it("pauses samples the edge and the relay Worker at one and at many streams, or says why it cannot", async () => {
    const figures = await runPauses({ seconds: 1, streams: 4, gateway });
    const report = reportPauses(figures);
    if ("skipped" in figures) {
      expect(report).toMatch(/^gateway pauses: not measured: \S/);
      return;
    }
    expect(figures.runs.map((r) => [r.side, r.streams])).toEqual([
      ["the edge", 1],
      ["relay Worker", 1],
      ["the edge", 4],
      ["relay Worker", 4],
    ]);
    for (const r of figures.runs) {
      expect(r.requests).toBeGreaterThan(0);
      expect(r.p99).toBeGreaterThanOrEqual(r.p50);
      // Every request's arrival at the backend was found in the simulator's records.
      expect(r.toBackend.p50).toBeGreaterThan(0);
      expect(r.toBackend.p99).toBeGreaterThanOrEqual(r.toBackend.p50);
      expect(r.lateInPause).toBeLessThanOrEqual(r.late);
      expect(r.longFull).toBeLessThanOrEqual(r.longPauses);
      if (r.streams === 1) expect(r.slowInPause).toBeLessThanOrEqual(r.slow);
      else expect(r.slowInPause).toBeUndefined();
    }
    expect(report).toMatch(/the edge\s+1\s+1\s+\d+ \|/);
    expect(report).toMatch(/relay Worker\s+4\s+1\s+\d+ \|/);
  }, 90_000);

  it("cancel measures client abort to upstream abort, and every abort reaches the backend", async () => {
    const figures = await runCancel({
      requests: 5,
      concurrency: [1, 2],
      tokensPerSecond: [100],
      // Enough heartbeats to register on /proc's 10 ms clock ticks: a waiting stream costs the edge
      // about 1.5 ms of CPU a second, so 3 streams for 300 ms often read as no CPU at all.
      waitingStreams: [30],
      waitingMs: 1_000,
      gateway,
    });
    expect(
      figures.runs.map((r) => [r.tokensPerSecond, r.concurrency, r.requests]),
      JSON.stringify(figures.runs.map((r) => r.failures)),
    ).toEqual([
      [100, 1, 5],
      [100, 2, 5],
    ]);
    for (const r of figures.runs) {
      expect(r.neverAborted).toBe(0);
      expect(r.p99).toBeGreaterThanOrEqual(r.p50);
    }
    // Streams held before their first token: the edge's CPU is read from /proc on Linux.
    expect(figures.waiting.map((w) => [w.streams, w.failed])).toEqual([[30, 0]]);
    expect(figures.waiting[0]!.cpuPercent).toBeGreaterThan(0);
    expect(Number.isFinite(figures.waiting[0]!.msPerStreamSecond)).toBe(true);
    const report = reportCancel(figures);
    expect(report).toContain("never aborted upstream");
    expect(report).toContain("CPU ms per stream per second");
  }, 60_000);

  it("overload runs tab alone, 1x and 2x, never past the endpoint's capacity", async () => {
    const figures = await runOverload({ capacity: 4, durationMs: 1_000, gateway });
    expect(figures.scenarios.map((s) => s.name)).toEqual(["tab alone", "1x", "2x", "2x, 100 ms"]);
    expect(figures.scenarios.map((s) => s.offered)).toEqual([0.5, 1, 2, 2]);
    for (const s of figures.scenarios) {
      expect(s.tab.requests).toBeGreaterThan(0);
      expect(s.peak).toBeLessThanOrEqual(4);
    }
    expect(figures.scenarios[2]!.background.requests).toBeGreaterThan(0);
    expect(reportOverload(figures)).toMatch(/targets at 2x: tab success [\d.]+% >= 99%/);
  }, 60_000);

  it("failover classifies every stream and never truncates one silently", async () => {
    const figures = await runFailover({ requests: 20, clients: 4, modes, gateway });
    expect(figures.runs.map((r) => r.mode)).toEqual(modes);
    for (const r of figures.runs) {
      expect(r.success + r.explicitErrors + r.silentTruncations).toBe(20);
      expect(r.silentTruncations).toBe(0);
    }
    expect(reportFailover(figures)).toContain("silent truncations = 0");
  }, 60_000);

  it("cold start takes the pool down and back, within each backend's capacity, and reports goodput", async () => {
    const figures = await runColdStart({ ...coldStart, users: 4, steadyMs: 1_500, afterMs: 1_000, gateway });
    expect(figures.users).toEqual({ paid: 1, free: 3 });
    expect(figures.steadyGoodput).toBeGreaterThan(0);
    expect(figures.goodput).toHaveLength(5);
    for (const peak of Object.values(figures.peaks)) {
      expect(peak.ramp).toBeLessThanOrEqual(2);
      expect(peak.after).toBeLessThanOrEqual(2);
    }
    expect(figures.ramp.paidOffered + figures.ramp.freeOffered).toBeGreaterThan(0);
    expect(reportColdStart(figures)).toContain("recovery to 90% of steady goodput");
  }, 60_000);
});

describe("rate limit benchmarks (smoke)", () => {
  it("limiter accuracy runs 8 simulated isolates against one limiter object and reports the error", () => {
    const run = spawnSync("npx", ["vitest", "run", "--config", "vitest.limits.config.ts"], {
      cwd: new URL("../../", import.meta.url).pathname,
      env: { ...process.env, LIMITS_BENCH_SCALE: "0.1" },
      encoding: "utf8",
      timeout: 170_000,
    });
    writeFileSync(edgeLogFile("limits-accuracy"), run.stdout + run.stderr);
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      /fast path \(tab\) \| limit [\d,]+ \| offered [\d,]+ \| admitted [\d,]+ \| [+-][\d.]+% vs limit/,
    );
    expect(run.stdout).toMatch(/compliant client at 90% of 100 per 2 s over 2 s: \d+ sent, \d+ refused/);
  }, 180_000);

  it("limiter overhead compares the tab path with limits on and off, in pairs", async () => {
    const figures = await runLimitsOverhead(20);
    expect(figures.pairs).toBe(20);
    expect(figures.refused).toBe(0);
    expect(reportLimitsOverhead(figures)).toMatch(/added \(paired difference\): p50 -?[\d.]+ ms, p99 -?[\d.]+ ms/);
  }, 120_000);
});

describe("CLI start-up benchmark (smoke)", () => {
  it("times the bundled bin's version and search against node, tsx and the bare HTTP call", async () => {
    const figures = await runCliStartup(2, 20);
    expect(figures).toMatchObject({ runs: 2, files: 20 });
    for (const run of ["node", "version", "versionFromSource", "search", "httpCall"] as const) {
      expect(figures[run].cpuMs, run).toBeGreaterThan(0);
      expect(figures[run].wallMs, run).toBeGreaterThan(0);
    }
    const report = reportCliStartup(figures);
    expect(report).toMatch(/\| `sextant --version` \| [\d.]+ \| [\d.]+ \|/);
    expect(report).toMatch(/\| `sextant search` \| [\d.]+ \| [\d.]+ \|/);
    expect(report).toMatch(/version: [\d.]+ ms CPU \(goal ≤ 150\), -?[\d.]+ ms over `node -e 0`/);
    expect(report).toMatch(/search overhead over the HTTP call: -?[\d.]+ ms CPU \(goal ≤ 250\), -?[\d.]+ ms wall/);
  }, 180_000);

  it("agents measures the start to a first command, calls' round trips, parallel reads and tab beside agents", async () => {
    const result = await runAgentBench({ starts: 2, turns: 3, flood: 2, floodSeconds: 1 });
    expect(result.startToCommandMs).toHaveLength(2);
    expect(result.roundTripMs.length).toBeGreaterThanOrEqual(3);
    expect(result.parallel.together).toHaveLength(5);
    expect(result.tab.aloneTtftMs.length).toBeGreaterThan(0);
    expect(result.pastDeadlineMs).toHaveLength(3);
    const report = reportAgentBench(result);
    expect(report).toMatch(/start to first command: p50 [\d.]+ ms/);
    expect(report).toMatch(/four greps in one turn vs the slowest alone: .*median [\d.]+x/);
    expect(report).toMatch(
      /tab p95 time to first token, background yield on: [\d.]+ ms \[[\d.-]+, [\d.-]+\] alone .*: [\d.]+x/,
    );
    expect(report).toMatch(/a task over its wall time ended -?[\d.]+, -?[\d.]+, -?[\d.]+ ms after its deadline/);
  }, 240_000);

  it("agents runs with the sandbox host and each simulated backend in a process of its own", async () => {
    const result = await runAgentBench({ starts: 1, turns: 2, flood: 2, floodSeconds: 1, separateProcesses: true });
    expect(result.separateProcesses).toBe(true);
    expect(result.startToCommandMs).toHaveLength(1);
    expect(result.tab.floodedTtftMs.length).toBeGreaterThan(0);
    const report = reportAgentBench(result);
    expect(report).toContain("the sandbox host and each simulated backend in a process of its own");
    expect(report).toMatch(/the edge's workerd used [\d.]+ cores meanwhile/);
  }, 240_000);

  it("agents measures the flood alone with the gateway's background yield turned off", async () => {
    const result = await runAgentBench({
      flood: 2,
      floodSeconds: 1,
      separateProcesses: true,
      floodOnly: true,
      yieldConfig: { lagMs: 0 },
    });
    expect(result.startToCommandMs).toHaveLength(0);
    expect(result.tab.floodedTtftMs.length).toBeGreaterThan(0);
    const report = reportAgentBench(result);
    expect(report.split("\n")).toHaveLength(2);
    expect(report).toMatch(
      /tab p95 time to first token, background yield off: [\d.]+ ms \[[\d.-]+, [\d.-]+\] alone .*: [\d.]+x/,
    );
    await expect(runAgentBench({ floodOnly: true, yieldConfig: { lagMs: 0 } })).rejects.toThrow(/separateProcesses/);
  }, 240_000);
});

describe("sandbox host benchmarks (smoke)", () => {
  const tsx = (script: string, ...args: string[]) =>
    spawnSync("npx", ["tsx", script, ...args], { cwd: ROOT, encoding: "utf8", timeout: 120_000 });

  it("bench-parallel sends four greps at once and one at a time, and prints the ratio", () => {
    const run = tsx("sandboxes/bench-parallel.ts", "2");
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/machine: \d+ cores/);
    expect(run.stdout).toMatch(
      /four greps over 2000 files at once vs the slowest alone: median [\d.]+x \(rounds: [\d.]+x, [\d.]+x;/,
    );
  }, 150_000);

  it("agent-profile profiles the edge while agent tasks run, and lists where its time went", () => {
    const run = spawnSync(
      "npx",
      ["tsx", "bench/agent-profile.ts", "--tasks", "2", "--seconds", "1", "--out", "/dev/null"],
      {
        cwd: ROOT,
        encoding: "utf8",
        timeout: 150_000,
        env: { ...process.env, NODE_OPTIONS: "--experimental-websocket" },
      },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/2 agent tasks, about \d+ turns while profiled/);
    expect(run.stdout).toMatch(/self:\n +[\d.]+% /);
    expect(run.stdout).toMatch(/inclusive:\n +100\.0% +\(root\)/);
  }, 180_000);

  it("bench times a command under each driver, or says why a driver cannot run", () => {
    const run = tsx("sandboxes/bench.ts", "2");
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/direct: `true` median [\d.]+ ms/);
    expect(run.stdout).toMatch(/bubblewrap: (`true` median [\d.]+ ms|cannot run here)/);
  }, 150_000);

  it("lake measures ingest against a baseline, freshness, CPU per 1,000 events and the lake's size", async () => {
    const result = await runLakeBench(1_000, 1);
    expect(result.events).toBe(1_000);
    expect(result.freshnessMs).toHaveLength(1);
    expect(result.files).toBe(1);
    expect(result.parquetBytes).toBeGreaterThan(0);
    const text = reportLake(result);
    expect(text).toMatch(/ingest \/ me, p95: [\d.]+x/);
    expect(text).toMatch(/after compaction: 1 file for 1 table-hour; .* [\d.]+x smaller/);
  }, 180_000);
});
