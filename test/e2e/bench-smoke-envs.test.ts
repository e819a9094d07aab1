import { describe, expect, it } from "vitest";
import { reportEnvBench, runEnvBench } from "../../bench/envs.js";

/**
 * A short run of the environment benchmark, so that CI notices when it breaks (the figures come from
 * full runs): that each part ran and printed its figures, never what they are.
 */
describe("environment benchmarks (smoke)", () => {
  it("envs measures session starts, step overhead, rollouts a minute and tab beside rollouts", async () => {
    const result = await runEnvBench({
      starts: 2,
      steps: 3,
      tasks: 2,
      group: 2,
      concurrency: 2,
      runs: 1,
      floodSeconds: 1,
      floodRounds: 2,
    });
    expect(result.start.sessionMs).toHaveLength(2);
    expect(result.start.bareMs).toHaveLength(2);
    for (const tool of ["read_file", "run_terminal"] as const) {
      expect(result.step[tool].edgeMs).toHaveLength(3);
      expect(result.step[tool].bareMs).toHaveLength(3);
    }
    expect(result.rollouts.runs).toHaveLength(1);
    expect(result.rollouts.runs[0]!.summary.rollouts).toBe(4);
    expect(result.rollouts.runs[0]!.summary.ended).toBe(4);
    // Alone and beside rollouts take turns, each side first in every other round.
    expect(result.tab.phases).toEqual(["alone", "beside rollouts", "beside rollouts", "alone"]);
    expect(result.tab.floodRuns).toHaveLength(2);
    expect(result.tab.aloneTtftMs.length).toBeGreaterThan(0);

    const report = reportEnvBench(result);
    expect(report).toContain("settings: 2 session starts and 2 bare sandboxes");
    expect(report).toContain("1 rollout run of 2 tasks x group 2 at concurrency 2");
    expect(report).toMatch(
      /session start to first step: p50 [\d.]+ ms .* over 2 sessions; .* [\d.]+x .*the bare floor/,
    );
    expect(report).toMatch(/step overhead, read_file: step p50 [\d.]+ ms .* bare call p50 [\d.]+ ms .*\(3 of each\)/);
    expect(report).toMatch(/step overhead, run_terminal `true`: step p50 [\d.]+ ms .*overhead p50 -?[\d.]+ ms/);
    expect(report).toMatch(/rollouts a minute at concurrency 2: [\d.]+ over 1 run: 4 in [\d.]+ s/);
    expect(report).toMatch(/tab p95 time to first token: [\d.]+ ms \[.*\] alone \(\d+ requests\), .* beside rollouts/);
    expect(report).toMatch(/tab errors: \d+ alone, \d+ beside rollouts/);
  }, 420_000);
});
