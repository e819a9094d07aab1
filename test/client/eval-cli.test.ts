/**
 * `sextant eval` without an edge: what it prints for a run and a comparison (a report fixture
 * through the same functions the command writes with), and the mistakes in how it is called, each a
 * usage error (exit 2) with a message naming the flag, refused before any edge is asked.
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { EvalReport, type EvalAttempt, type EvalTaskReport } from "../../protocol/evals/api.js";
import { compareRuns } from "../../protocol/evals/stats.js";
import {
  comparisonText,
  logsText,
  summaryText,
  taskTable,
  validationFailures,
  validationText,
} from "../../client/cli/eval-report.js";
import { evalRequest } from "../../client/cli/commands/eval.js";
import { sextant } from "../support/local-edge.js";

const sha = (c: string) => c.repeat(64);

function attempt(i: number, passed: boolean, over: Partial<EvalAttempt> = {}): EvalAttempt {
  return {
    attempt: i,
    member: i,
    reward: passed ? 1 : 0,
    passed,
    outcome: "finished",
    failureKind: passed ? null : "tests",
    tokens: 1000,
    promptTokens: 800,
    completionTokens: 200,
    costUsd: 0.0025,
    durationMs: 1500,
    turns: 3,
    ...over,
  };
}

function report(over: Partial<EvalReport> = {}, tasks?: EvalTaskReport[]): EvalReport {
  const all = tasks ?? [
    { index: 0, sha256: sha("a"), broken: null, attempts: [attempt(0, true), attempt(1, false), attempt(2, true)] },
    {
      index: 1,
      sha256: sha("b"),
      broken: null,
      attempts: [
        attempt(0, false, { outcome: "turns", failureKind: "budget", reward: null }),
        attempt(1, false),
        attempt(2, false),
      ],
    },
    {
      index: 2,
      sha256: sha("c"),
      broken: { oracle: 0, noop: 0 },
      attempts: [attempt(0, true), attempt(1, true), attempt(2, true)],
    },
  ];
  return EvalReport.parse({
    id: "eval_aaaaaaaaaaaaaaaaaaaa",
    status: "ended",
    taskset: "tset_one",
    agent: "model",
    model: "chat-simulated",
    checkpoint: null,
    attempts: 3,
    concurrency: 8,
    price: { input: 2, output: 4.5 },
    rolloutRun: "run_aaaaaaaaaaaaaaaaaaaa",
    createdAt: "2026-01-02T03:04:05.000Z",
    endedAt: "2026-01-02T03:05:05.000Z",
    tasks: all,
    // The summary as the edge sends it: over tasks 0 and 1 (task 2 is broken).
    summary: {
      tasks: 3,
      counted: 2,
      attempts: 6,
      passed: 2,
      passAt1: (2 / 3 + 0) / 2,
      passAtK: { k: 3, value: 0.5 },
      meanReward: 2 / 6,
      tokens: 6000,
      costUsd: 0.015,
      wallMs: 9000,
      failures: { tests: 3, budget: 1, error: 0, quota: 0 },
    },
    ...over,
  });
}

describe("what eval run and eval show print", () => {
  it("a row per task: passes, pass@1 and pass@k, reward, tokens, cost, time and why attempts failed", () => {
    expect(taskTable(report()).split("\n")).toEqual([
      "TASK  SHA256        PASSED  PASS@1  PASS@3  REWARD  TOKENS  COST     TIME   FAILURES",
      "0     aaaaaaaaaaaa  2/3     0.667   1.000   0.667   3000    $0.0075  4.5 s  tests 1",
      "1     bbbbbbbbbbbb  0/3     0.000   0.000   0.000   3000    $0.0075  4.5 s  budget 1, tests 2",
      "2     cccccccccccc  3/3     1.000   1.000   1.000   3000    $0.0075  4.5 s  broken",
      "",
    ]);
  });

  it("the summary, with broken tasks listed apart by what the oracle and noop runs scored", () => {
    const r = report({}, [
      ...report().tasks,
      { index: 3, sha256: sha("d"), broken: { oracle: 0, noop: 0 }, attempts: [] },
      { index: 4, sha256: sha("e"), broken: { noop: 1 }, attempts: [] },
    ]);
    expect(summaryText(r).split("\n")).toEqual([
      "Eval eval_aaaaaaaaaaaaaaaaaaaa: chat-simulated on tset_one, ended",
      "3 tasks (2 counted), 6 attempts, 2 passed",
      "pass@1 0.333  pass@3 0.500  mean reward 0.333",
      "6000 tokens, cost $0.0150, attempts' time 9.0 s",
      "Failures: tests 3, budget 1, error 0, quota 0",
      "broken (oracle 0, noop 0): task 2 (cccccccccccc), task 3 (dddddddddddd)",
      "broken (noop 1): task 4 (eeeeeeeeeeee)",
      "",
    ]);
  });

  it("an oracle or noop run says which tasks failed validation", () => {
    expect(validationText(report())).toBe("");
    expect(validationFailures(report())).toBeNull();
    const oracle = report({ agent: "oracle", model: null });
    expect(validationFailures(oracle)!.map((f) => f.index)).toEqual([0, 1]);
    expect(validationText(oracle)).toBe(
      "Validation (oracle): 2 of 3 tasks failed (each should score 1):\n" +
        "  task 0 (aaaaaaaaaaaa) scored 1, 0, 1\n" +
        "  task 1 (bbbbbbbbbbbb) scored -, 0, 0\n",
    );
    const noop = report({ agent: "noop", model: null });
    expect(validationText(noop)).toBe(
      "Validation (noop): 3 of 3 tasks failed (each should score 0):\n" +
        "  task 0 (aaaaaaaaaaaa) scored 1, 0, 1\n" +
        "  task 1 (bbbbbbbbbbbb) scored -, 0, 0\n" +
        "  task 2 (cccccccccccc) scored 1, 1, 1\n",
    );
    const clean = report({ agent: "noop", model: null }, [
      { index: 0, sha256: sha("a"), broken: null, attempts: [attempt(0, false)] },
    ]);
    expect(validationText(clean)).toBe("Validation (noop): every task scored 0.\n");
  });

  it("failed attempts' logs: the last lines, with a terminal's control sequences taken out", () => {
    const text = logsText(
      [
        {
          index: 1,
          sha256: sha("b"),
          attempt: 2,
          failureKind: "tests",
          log: "line 1\nline 2\n\u001b[31mnot ok 3 - parses\u001b[0m\r\n# fail 1\n",
        },
        { index: 1, sha256: sha("b"), attempt: 0, failureKind: "budget", log: null, missing: "none was kept" },
      ],
      2,
    );
    expect(text.split("\n")).toEqual([
      "Verifier logs of failed attempts (last 2 lines):",
      "task 1 (bbbbbbbbbbbb), attempt 2 (tests):",
      "  | not ok 3 - parses",
      "  | # fail 1",
      "task 1 (bbbbbbbbbbbb), attempt 0 (budget):",
      "  (no log: none was kept)",
      "",
    ]);
  });

  it("a comparison: the tasks side by side, wins and losses, the difference with its interval, the ratios", () => {
    const a = report();
    const b = report({ id: "eval_bbbbbbbbbbbbbbbbbbbb", model: "chat-other" }, [
      { index: 0, sha256: sha("a"), broken: null, attempts: [attempt(0, true), attempt(1, true), attempt(2, true)] },
      { index: 1, sha256: sha("b"), broken: null, attempts: [attempt(0, false), attempt(1, false), attempt(2, false)] },
      { index: 5, sha256: sha("f"), broken: null, attempts: [attempt(0, true)] },
    ]);
    const text = comparisonText(a, b, compareRuns(a, b, { seed: 3 }));
    expect(text.split("\n")).toEqual([
      "SHA256        TASK A  TASK B  PASS@1 A  PASS@1 B  DIFF    RESULT",
      "aaaaaaaaaaaa  0       0       0.667     1.000     +0.333  win",
      "bbbbbbbbbbbb  1       1       0.000     0.000     +0.000  tie",
      "b eval_bbbbbbbbbbbbbbbbbbbb (chat-other) against a eval_aaaaaaaaaaaaaaaaaaaa (chat-simulated): 2 tasks compared",
      "Wins 1, losses 0, ties 1 (b against a, by pass@1)",
      "pass@1 0.333 -> 0.500: difference +0.167 (95% CI +0.000 to +0.333; paired bootstrap over tasks, 10000 resamples, seed 3)",
      "Cost per attempt 1.00x, time per attempt 1.00x (b over a)",
      "Only in a: task 2 (cccccccccccc)",
      "Only in b: task 5 (ffffffffffff)",
      "",
    ]);
  });
});

describe("eval run's arguments", () => {
  const base = { logLines: "20" };

  it("become the edge's request", () => {
    expect(
      evalRequest("tset_one", { ...base, model: "m", attempts: "5", concurrency: "2", tasks: "0,2", checkpoint: "c1" }),
    ).toEqual({
      taskset: "tset_one",
      agent: "model",
      model: "m",
      checkpoint: "c1",
      tasks: [0, 2],
      attempts: 5,
      concurrency: 2,
    });
    expect(evalRequest("tset_one", { ...base, agent: "oracle" })).toEqual({ taskset: "tset_one", agent: "oracle" });
  });

  const config = () => ({ SEXTANT_CONFIG_DIR: mkdtempSync(join(tmpdir(), "sextant-eval-cli-")) });

  it.each([
    [["eval", "run", "tset_one"], "eval run needs --model <model>, or --agent oracle|noop"],
    [["eval", "run"], "eval run takes a task set"],
    [["eval", "run", "tset_one", "--agent", "oracle", "--model", "m"], "--agent oracle plays without a model"],
    [["eval", "run", "tset_one", "--agent", "judge"], "Allowed choices are model, oracle, noop"],
    [
      ["eval", "run", "tset_one", "--model", "m", "--attempts", "three"],
      '--attempts takes a whole number, not "three"',
    ],
    [["eval", "run", "tset_one", "--model", "m", "--attempts", "0"], "--attempts: "],
    [["eval", "run", "tset_one", "--model", "m", "--attempts", "101"], "--attempts: "],
    [["eval", "run", "tset_one", "--model", "m", "--concurrency", "5000"], "--concurrency: "],
    [["eval", "run", "tset_one", "--model", "m", "--tasks", "0,x"], "--tasks takes a comma list"],
    [["eval", "run", "tset_one", "--resume", "eval_aaaaaaaaaaaaaaaaaaaa"], "leave out the task set"],
    [["eval", "run", "--resume", "eval_aaaaaaaaaaaaaaaaaaaa", "--attempts", "2"], "leave out --attempts"],
    [
      ["eval", "run", "tset_one", "--model", "m", "--key", "/nonexistent/org.key.json"],
      "--key /nonexistent/org.key.json",
    ],
    [["eval", "compare", "eval_aaaaaaaaaaaaaaaaaaaa"], "missing required argument 'b'"],
    [["eval", "compare", "eval_a", "eval_b", "--confidence", "1"], "--confidence takes a number above 0 and below 1"],
    [["eval", "compare", "eval_a", "eval_b", "--seed", "-1"], "--seed takes a whole number"],
    [["eval", "list", "--limit", "0"], "--limit takes a whole number of at least 1"],
  ])("%j is a usage error", (args, message) => {
    const out = sextant(args, config());
    expect(out.code, out.stderr).toBe(2);
    expect(out.stderr).toContain(message);
  });

  it("a key file that is not one is refused before any run starts", () => {
    const dir = mkdtempSync(join(tmpdir(), "sextant-eval-key-"));
    writeFileSync(join(dir, "k.json"), "{}");
    const out = sextant(["eval", "run", "tset_one", "--model", "m", "--key", join(dir, "k.json")], config());
    expect(out.code).toBe(2);
    expect(out.stderr).toContain("not a key file sextant envs keygen wrote");
  });
});
