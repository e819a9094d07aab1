import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { report, runAuthCacheBench } from "../../bench/auth-cache.js";
import { reportEditSearchable, runEditSearchable } from "../../bench/edit-searchable.js";
import { reportEmbedderColdStart, runEmbedderColdStart } from "../../bench/embedder-coldstart.js";
import { reportCliStartup, runCliStartup } from "../../bench/cli-startup.js";
import { gcPauses, reportPauses, unattributed } from "../../bench/gateway-pauses.js";
import { busyMs, reportThroughput, runIndexThroughput } from "../../bench/index-throughput.js";
import { reportPiecesRecall, runPiecesRecall } from "../../bench/pieces-recall.js";
import { reportLimitsOverhead, runLimitsOverhead } from "../../bench/limits-overhead.js";
import { reportScan, runScanBench } from "../../bench/scan.js";
import { reportSyncCost, runSyncCost } from "../../bench/sync-cost.js";
import { reportTeammateClone, runTeammateClone } from "../../bench/teammate-clone.js";
import { reportWatch, runWatchLatency } from "../../bench/watch-latency.js";
import { DEFAULT_DEBOUNCE_MS } from "../../client/workspace/watch.js";
import { edgeLogFile } from "../support/local-edge.js";

/** A short run of each benchmark, so that CI notices when one breaks; the figures come from full runs. */
describe("benchmarks (smoke)", () => {
  it("search-scale fills a Workspace object and reports latency, memory and segments", () => {
    const run = spawnSync("npx", ["vitest", "run", "--project", "scale"], {
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

  it("auth-cache measures every case, the cases taking turns, and reports its settings and the ratio", async () => {
    const result = await runAuthCacheBench(20, 5);
    expect(Object.keys(result.cases)).toHaveLength(3);
    for (const figures of Object.values(result.cases)) {
      expect(figures.p50).toBeGreaterThan(0);
      expect(figures.p99).toBeGreaterThanOrEqual(figures.p50);
    }
    // Interleaved: each round of three turns holds every case once, and no case always goes first.
    expect(result.order).toHaveLength(12);
    for (let i = 0; i < result.order.length; i += 3) expect(new Set(result.order.slice(i, i + 3)).size).toBe(3);
    expect(new Set([0, 3, 6].map((i) => result.order[i])).size).toBe(3);
    const text = report(result);
    expect(text).toMatch(
      /^auth-cache: 20 sequential requests per case after 20 untimed, the three cases taking turns of 5 requests/,
    );
    expect(text).toContain("KEY_CACHE_TTL_SECONDS=0");
    expect(text).toMatch(/cache off \/ cache on, p50: [\d.]+x; mean: [\d.]+x/);
  }, 180_000);

  it("scan measures cold and warm scans against git", async () => {
    const figures = await runScanBench(2000, { cold: 2, warm: 2 });
    expect(figures.files).toBe(2001);
    expect(figures.warmMs).toBeGreaterThan(0);
    expect(figures.gitHashMs).toBeGreaterThan(0);
    const printed = reportScan(figures);
    // The cold baseline reads and hashes as the scan does, and writes nothing.
    expect(printed).toMatch(/cold: sextant [\d.]+ ms +git hash-object --stdin-paths [\d.]+ ms +ratio [\d.]+x/);
    expect(printed).toMatch(/warm: sextant [\d.]+ ms +git status \(untracked cache\) +[\d.]+ ms +ratio [\d.]+x/);
    expect(printed).toMatch(
      /settings: 2,001 files of 100 to 2,000 bytes, 2 cold and 2 warm runs each side, alternating with git/,
    );
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
    // A baseline sample for every watched save, taken in the same run.
    expect(figures.directSaves).toBe(3);
    expect(figures.directP50).toBeGreaterThan(0);
    expect(figures.directP95).toBeGreaterThanOrEqual(figures.directP50);
    // Measured with what a user gets from `sextant watch`, and says so beside its figures.
    expect(figures.debounceMs).toBe(DEFAULT_DEBOUNCE_MS);
    const printed = reportWatch(figures);
    expect(printed).toMatch(
      new RegExp(`p50 [\\d.]+ ms, p95 [\\d.]+ ms, max [\\d.]+ ms, of which the debounce is ${DEFAULT_DEBOUNCE_MS} ms`),
    );
    expect(printed).toMatch(/direct sync, save to edge: p50 [\d.]+ ms, p95 [\d.]+ ms/);
    expect(printed).toMatch(/watch\/direct: p50 [\d.]+x, p95 [\d.]+x/);
    expect(printed).toContain(
      `settings: 500-file workspace, 3 saves, debounce ${DEFAULT_DEBOUNCE_MS} ms (sextant watch's default)`,
    );
    expect(printed).toContain("baseline: 3 direct syncs of a one-file save");
  }, 180_000);

  it("index-throughput reports chunks per second and splits the time between edge and device", async () => {
    const figures = await runIndexThroughput(120);
    expect(figures.files).toBe(121);
    expect(figures.chunks).toBeGreaterThan(figures.files);
    expect(figures.deviceChunks).toBe(figures.chunks);
    expect(figures.requestMs).toBeGreaterThan(figures.objectMs);
    expect(figures.wallMs).toBeGreaterThan(figures.requestMs);
    expect(figures.deviceRunsMs).toHaveLength(3);
    // Overlapping requests count once in the edge's time, and at most as much as their durations added up.
    expect(figures.requestMs).toBeLessThanOrEqual(figures.requestSumMs);
    expect(figures.objectMs).toBeLessThanOrEqual(figures.objectSumMs);
    const printed = reportThroughput(figures);
    expect(printed).toMatch(/[\d,]+ chunks\/s, [\d,]+ files\/s/);
    expect(printed).toMatch(
      /a request to the edge in flight: [\d.]+ s \(\d+%\), the Workspace object at work: [\d.]+ s/,
    );
    expect(printed).toMatch(
      /settings: 121-file generated source tree .*1 index run into new workspaces, .*built-in embedder \(sextant-[\w.+-]+\), sync protocol \d/,
    );
  }, 180_000);

  it("index-throughput counts the edge's time once where requests overlap", () => {
    expect(busyMs([])).toBe(0);
    expect(
      busyMs([
        [20, 30],
        [0, 10],
        [5, 15],
        [2, 3],
        [30, 31],
      ]),
    ).toBe(26);
  });

  it("embedder-coldstart times a fresh workerd to the first chunk, pieces included, beside the lexical embedder", async () => {
    const figures = await runEmbedderColdStart(1, 20);
    expect(figures.rows.map((r) => r.embedder)).toEqual(["static", "lexical"]);
    const [built, lexical] = figures.rows;
    expect(built!.model).toMatch(/^sextant-static-v\d+\+pieces$/);
    // Chunks cut from real code hold several definitions: the built-in embedder embeds their pieces too.
    expect(built!.vectorsPerChunk).toBeGreaterThan(1);
    expect(lexical!.vectorsPerChunk).toBe(1);
    expect(reportEmbedderColdStart(figures)).toMatch(
      /static +sextant-static-v\d+\+pieces \(128 dims\) +start [\d.]+ ms, .*start to first chunk [\d.]+ ms; -?\d+ µs per chunk \([\d.]+ vectors\)/,
    );
  }, 120_000);

  it("pieces-recall compares the approximate vector search with the exact one, with and without pieces", () => {
    const verbs = ["parse", "render", "merge", "flush", "encode", "resolve", "schedule", "validate"];
    const nouns = ["invoice", "ledger", "session", "token", "segment", "manifest", "cursor", "buffer"];
    const pairs = Array.from({ length: 1000 }, (_, i) => {
      const verb = verbs[i % verbs.length]!;
      const noun = nouns[Math.floor(i / verbs.length) % nouns.length]!;
      return {
        query: `${verb} the ${noun} and return it`,
        code: `function ${verb}${noun[0]!.toUpperCase()}${noun.slice(1)}${i}(${noun}) {\n  return ${verb}(${noun}, ${i});\n}`,
        package: `pkg-${i % 4}`,
      };
    });
    // A low exact limit, so that the 1-bit scan runs at this size.
    const figures = runPiecesRecall(pairs, { queries: 20, exactLimit: 16 });
    expect(figures.chunks).toBeGreaterThan(16);
    expect(figures.pieces).toBeGreaterThan(figures.chunks);
    for (const row of figures.rows)
      for (const share of [row.recall, row.sameFirst, row.recallWithoutPieces, row.sameFirstWithoutPieces]) {
        expect(share).toBeGreaterThanOrEqual(0);
        expect(share).toBeLessThanOrEqual(1);
      }
    // With every scan exact, the comparison must find the two rankings the same.
    const exact = runPiecesRecall(pairs, { queries: 20, exactLimit: Number.MAX_SAFE_INTEGER });
    for (const row of exact.rows)
      expect([row.recall, row.sameFirst, row.recallWithoutPieces, row.sameFirstWithoutPieces]).toEqual([1, 1, 1, 1]);
    expect(reportPiecesRecall(figures)).toMatch(
      /top 10: with pieces [\d.]+ of the exact top 10, same first hit [\d.]+; without pieces [\d.]+, same first hit [\d.]+/,
    );
  });

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

describe("rate limit benchmarks (smoke)", () => {
  it("limiter accuracy runs 8 simulated isolates against one limiter object and reports the error", () => {
    const run = spawnSync("npx", ["vitest", "run", "--project", "limits"], {
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
    // The figure is printed against its baseline; its value is the full run's to judge, not a test's.
    expect(report).toMatch(
      /version: [\d.]+ ms CPU, [\d.]+x `node -e 0`'s [\d.]+ ms in the same runs \(goal ≤ 2x\), -?[\d.]+ ms over it/,
    );
    expect(report).toMatch(/search overhead over the HTTP call: -?[\d.]+ ms CPU \(goal ≤ 250\), -?[\d.]+ ms wall/);
  }, 180_000);
});
