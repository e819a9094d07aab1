import { describe, expect, it } from "vitest";
import { reportEvalBench, runEvalBench } from "../../bench/evals.js";

/**
 * A short run of the eval benchmark, so that CI notices when it breaks (the figures come from full
 * runs): that each run finished every attempt, that the report read back has the run's shape, and
 * that the figures were printed, never what they are.
 */
describe("eval benchmark (smoke)", () => {
  it("evals times eval runs against rollout runs at each concurrency and reads their reports", async () => {
    const result = await runEvalBench({ tasks: 2, attempts: 2, rounds: 2, concurrency: [2, 3], reads: 2 });
    expect(result.settings).toEqual({ tasks: 2, attempts: 2, rounds: 2, concurrency: [2, 3], reads: 2 });
    expect(result.byConcurrency.map((c) => c.concurrency)).toEqual([2, 3]);
    // Each kind goes first in every other round, and the second concurrency starts the other way round.
    expect(result.byConcurrency.map((c) => c.rounds.map((r) => r.order[0]))).toEqual([
      ["eval", "rollouts"],
      ["rollouts", "eval"],
    ]);
    for (const { rounds } of result.byConcurrency)
      for (const round of rounds) {
        for (const run of [round.eval, round.rollouts]) {
          expect(run.summary).toMatchObject({ rollouts: 4, ended: 4, verified: 4 });
          expect(run.attemptMs).toHaveLength(4);
        }
        expect(round.eval.id).toMatch(/^eval_/);
        expect(round.rollouts.id).toMatch(/^run_/);
        const { report } = round;
        expect(report).toMatchObject({ id: round.eval.id, status: "ended", agent: "model", attempts: 2 });
        expect(report.tasks.map((t) => t.index)).toEqual([0, 1]);
        for (const task of report.tasks) {
          expect(task.attempts.map((a) => a.attempt)).toEqual([0, 1]);
          expect(task.broken).toBeNull();
          for (const a of task.attempts) expect(a.reward).not.toBeNull();
        }
        expect(report.summary).toMatchObject({ tasks: 2, counted: 2, attempts: 4, passAtK: { k: 2 } });
        expect(report.summary.passAt1).not.toBeNull();
        expect(round.readMs).toHaveLength(1);
      }

    const report = reportEvalBench(result);
    expect(report).toContain(
      "settings: 2 tasks x 2 attempts = 4 attempts a run; at concurrency 2 and 3, 2 rounds each",
    );
    for (const c of [2, 3]) {
      expect(report).toMatch(
        new RegExp(
          `concurrency ${c}: attempts a minute, eval runs [\\d.]+, [\\d.]+ \\(median [\\d.]+\\), rollout runs`,
        ),
      );
    }
    expect(report).toMatch(
      /run time per attempt: eval p50 [\d.]+ ms, rollouts p50 [\d.]+ ms .* eval\/rollouts [\d.]+x/,
    );
    expect(report).toMatch(/an attempt's own time: eval p50 [\d.]+ s .* eval\/rollouts [\d.]+x \[/);
    expect(report).not.toContain("NOT every run finished");
    expect(report).toMatch(
      /report read \(GET \/v1\/evals\/runs\/\{id\}, 2 tasks x 2 attempts\): first after the run's end p50 [\d.]+ ms/,
    );
  }, 420_000);
});
