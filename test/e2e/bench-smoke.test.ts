import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { report, runAuthCacheBench } from "../../bench/auth-cache.js";
import { reportEditSearchable, runEditSearchable } from "../../bench/edit-searchable.js";
import { reportThroughput, runIndexThroughput } from "../../bench/index-throughput.js";
import { reportScan, runScanBench } from "../../bench/scan.js";
import { reportSyncCost, runSyncCost } from "../../bench/sync-cost.js";
import { reportTeammateClone, runTeammateClone } from "../../bench/teammate-clone.js";
import { reportWatch, runWatchLatency } from "../../bench/watch-latency.js";

/** A short run of each benchmark, so that CI notices when one breaks; the figures come from full runs. */
describe("benchmarks (smoke)", () => {
  it("search-scale fills a Workspace object and reports latency, memory and segments", () => {
    const run = spawnSync("npx", ["vitest", "run", "--config", "vitest.scale.config.ts"], {
      cwd: new URL("../../", import.meta.url).pathname,
      env: { ...process.env, SCALE_POINTS: "3000", SCALE_QUERIES: "20" },
      encoding: "utf8",
      timeout: 170_000,
    });
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

  it("teammate-clone makes a clone searchable without uploading any chunk", async () => {
    const figures = await runTeammateClone(80, 1);
    expect(figures.chunks).toBeGreaterThan(80);
    expect(figures.runs[0]).toMatchObject({ chunksUploaded: 0, strategy: "unchanged", roundTrips: 1 });
    expect(figures.runs[0]!.totalMs).toBeGreaterThan(figures.runs[0]!.indexMs);
    expect(reportTeammateClone(figures)).toContain("from nothing to a search hit");
  }, 180_000);

  it("edit-searchable measures saves until search ranks them first", async () => {
    const figures = await runEditSearchable(80, 3, 50);
    expect(figures.saves).toBe(3);
    expect(figures.searchable.p95).toBeGreaterThanOrEqual(figures.searchable.p50);
    expect(figures.synced.p50).toBeGreaterThan(0);
    expect(reportEditSearchable(figures)).toContain("save to top search hit");
  }, 180_000);
});
