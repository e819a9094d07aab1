import { spawnSync } from "node:child_process";
import { mkdtempSync, statSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rng } from "../../bench/code-fixture.js";
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
import { reportPauses, runPauses } from "../../bench/gateway-pauses.js";
import { overloadPart, reportOverload, runOverload } from "../../bench/gateway-overload.js";
import { ROOT } from "../support/local-edge.js";

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
    // The headline: the edge over the relay floor, its CPU per answer where the relay's run used a tick.
    for (const r of figures.runs) {
      const relay = figures.relay.find((x) => x.streams === r.streams)!;
      const at = `at ${r.streams} streams?`;
      const cpu = new RegExp(
        `headline ${at}: CPU per streamed answer, the edge [\\d.]+ ms over the relay floor's [\\d.]+ ms: [\\d.]+x \\(goal at most 1.3x: (met|MISSED)\\)`,
      );
      if (relay.cpuMs && r.cpuMs !== undefined) expect(report).toMatch(cpu);
      expect(report).toMatch(
        new RegExp(
          `headline ${at}: added p99 \\(worse of ttft and total\\), the edge [\\d.-]+ ms over the relay floor's [\\d.-]+ ms: [\\d.-]+x \\(goal at most 2x: (met|MISSED)\\)`,
        ),
      );
    }
    expect(report.startsWith("headline at 1 stream")).toBe(true);
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

  it("overload runs tab alone, 1x and 2x, taking turns, never past the endpoint's capacity", async () => {
    const figures = await runOverload({ capacity: 4, durationMs: 1_000, rounds: 2, gateway });
    expect(figures.scenarios.map((s) => s.name)).toEqual(["tab alone", "1x", "2x", "2x, 100 ms"]);
    // The baseline takes its turns among the overloads, in order and then the other way round.
    expect(figures.order).toEqual(["tab alone", "1x", "2x", "2x, 100 ms", "2x, 100 ms", "2x", "1x", "tab alone"]);
    expect(figures.scenarios.map((s) => s.offered)).toEqual([0.5, 1, 2, 2]);
    for (const s of figures.scenarios) {
      expect(s.tab.requests).toBeGreaterThan(0);
      expect(s.peak).toBeLessThanOrEqual(4);
    }
    expect(figures.scenarios[2]!.background.requests).toBeGreaterThan(0);
    const report = reportOverload(figures);
    expect(report).toContain("1 s per scenario in 2 rounds of 0.5 s, the scenarios taking turns in each");
    expect(report).toMatch(/targets at 2x: tab success [\d.]+% >= 99%/);
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

  it("profile splits the edge's and the relay floor's CPU per answer into parts", () => {
    // Its own edge and simulator, with the V8 inspector on: not the shared gateway above.
    const out = join(mkdtempSync(join(tmpdir(), "sextant-gateway-profile-")), "p");
    const run = spawnSync(
      "npx",
      ["tsx", "bench/gateway-profile.ts", "--streams", "2", "--seconds", "1", "--out", out],
      {
        cwd: ROOT,
        encoding: "utf8",
        timeout: 150_000,
        env: { ...process.env, NODE_OPTIONS: "--experimental-websocket" },
      },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      /2 streams, 1 s profiled a side .*: the edge \d+ answers \(0 failed\), the relay floor \d+ \(0 failed\)/,
    );
    expect(run.stdout).toMatch(/\npart \(ms of CPU per answer\) +edge +floor +added\n/);
    expect(run.stdout).toMatch(/\ntotal \(\/proc, while profiled\) +[\d.]+ +[\d.]+ +-?[\d.]+\n/);
    for (const side of ["edge", "relay"]) expect(statSync(`${out}-${side}.cpuprofile`).size).toBeGreaterThan(0);
  }, 180_000);
});
