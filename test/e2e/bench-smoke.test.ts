import { describe, expect, it } from "vitest";
import { report, runAuthCacheBench } from "../../bench/auth-cache.js";

/** A short run of each benchmark, so that CI notices when one breaks; the figures come from full runs. */
describe("benchmarks (smoke)", () => {
  it("auth-cache measures every case and reports the ratio", async () => {
    const results = await runAuthCacheBench(20);
    expect(Object.keys(results)).toHaveLength(3);
    for (const figures of Object.values(results)) {
      expect(figures.p50).toBeGreaterThan(0);
      expect(figures.p99).toBeGreaterThanOrEqual(figures.p50);
    }
    expect(report(results)).toContain("cache off / cache on");
  }, 180_000);
});
