import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { reportAgentBench, runAgentBench } from "../../bench/agents.js";
import { reportLake, runLakeBench } from "../../bench/lake.js";
import { ROOT } from "../support/local-edge.js";
import { reportHostileBench, runHostileBench } from "../../sandboxes/bench-hostile.js";
import { bubblewrapWorks } from "../../sandboxes/drivers.js";

/**
 * Short runs of the agent, sandbox host and lake benchmarks, so that CI notices when one breaks (the
 * figures come from full runs). Apart from `bench-smoke.test.ts` so that the two run side by side.
 */
describe("agent benchmarks (smoke)", () => {
  it("agents measures the start to a first command, calls' round trips, parallel reads and tab beside agents", async () => {
    const result = await runAgentBench({ starts: 2, turns: 3, flood: 2, floodSeconds: 1 });
    expect(result.startToCommandMs).toHaveLength(2);
    expect(result.roundTripMs.length).toBeGreaterThanOrEqual(3);
    expect(result.parallel.together).toHaveLength(5);
    expect(result.tab.aloneTtftMs.length).toBeGreaterThan(0);
    expect(result.pastDeadlineMs).toHaveLength(3);
    // Tab alone and beside the agents take turns through the run, each side first in every other round.
    expect(result.tab.phases).toEqual([
      "alone",
      "beside agents",
      "beside agents",
      "alone",
      "alone",
      "beside agents",
      "beside agents",
      "alone",
    ]);
    const report = reportAgentBench(result);
    expect(report).toContain(
      "settings: 2 starts, 3 read_file turns; tab from 8 closed-loop clients, 1 s alone and 1 s beside 2 agent tasks, taking turns in 4 rounds of 0.25 s a side",
    );
    // Each side's failed tab requests are counted apart.
    expect(report).toContain(`tab errors: ${result.tab.aloneErrors} alone, ${result.tab.floodedErrors} beside agents`);
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
    expect(report).toMatch(/the edge's workerd used [\d.]+ cores alone, [\d.]+ beside agents/);
  }, 240_000);

  it("agents measures the flood alone with the gateway's background yield turned off", async () => {
    const result = await runAgentBench({
      flood: 2,
      floodSeconds: 1,
      floodRounds: 1,
      separateProcesses: true,
      floodOnly: true,
      yieldConfig: { lagMs: 0 },
    });
    expect(result.startToCommandMs).toHaveLength(0);
    expect(result.tab.floodedTtftMs.length).toBeGreaterThan(0);
    expect(result.tab.phases).toEqual(["alone", "beside agents"]);
    const report = reportAgentBench(result);
    expect(report.split("\n")).toHaveLength(3);
    expect(report).toMatch(
      /settings: tab from 8 closed-loop clients, 1 s alone and 1 s beside 2 agent tasks, taking turns in 1 round of 1 s a side/,
    );
    expect(report).toMatch(
      /tab p95 time to first token, background yield off: [\d.]+ ms \[[\d.-]+, [\d.-]+\] alone .*: [\d.]+x/,
    );
    await expect(runAgentBench({ floodOnly: true, yieldConfig: { lagMs: 0 } })).rejects.toThrow(/separateProcesses/);
  }, 240_000);
});

describe("sandbox host benchmarks (smoke)", () => {
  it("bench-hostile runs benign tasks beside a hostile org's: no escape, no wedge, every benign task done", async () => {
    const result = await runHostileBench({
      seconds: 8,
      orgs: 2,
      tasks: 2,
      driver: bubblewrapWorks() ? "bubblewrap" : "direct",
    });
    expect(result.escapes).toEqual([]);
    expect(result.wedges).toEqual([]);
    expect(result.benignStarted).toBeGreaterThan(0);
    expect(result.benignFinished).toBe(result.benignStarted);
    expect(Object.keys(result.attacks).length).toBeGreaterThan(0);
    const report = reportHostileBench(result);
    expect(report).toMatch(/sandbox creation: alone p50 [\d.]+ ms .* ratio p50 [\d.]+x p90 [\d.]+x/);
    expect(report).toMatch(/tool calls: alone p50 [\d.]+ ms .* ratio p50 [\d.]+x p90 [\d.]+x/);
    expect(report).toMatch(/tool calls: as loaded without the attacker p50 [\d.]+ ms .* ratio p50 [\d.]+x/);
    expect(report).toMatch(/escapes: 0\nwedges: 0/);
  }, 180_000);

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
