/**
 * `sextant eval` end to end through `npm start`'s edge and its sandbox host, with the simulator's
 * scripted agent model as the model (a stand-in for a model server, speaking OpenAI's chat API).
 * Three tasks, pushed with `sextant envs push`: alpha, which every attempt solves; beta, which the
 * seeds 0 and 3 solve and 1 and 2 do not; gamma, which no attempt solves and whose reference solution
 * is wrong, so the oracle run fails it and it is reported broken and not counted. A model run of four
 * attempts a task must then give exactly pass@1 (1 + 1/2) / 2 = 0.75 and pass@4 1; its failed
 * attempts' verifier logs open with the org's key; a run compared with itself differs by 0 with an
 * interval of [0, 0]; the oracle run against it wins beta and ties alpha.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import type { EvalReport, EvalRun } from "../../protocol/evals/api.js";
import type { RunComparison, TaskStats } from "../../protocol/evals/stats.js";
import type { RolloutEvent } from "../../protocol/envs/rollouts.js";
import type { AttemptLog } from "../../client/envs/eval-logs.js";
import { makeOrg, setAgentScripts, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { sextantAsync } from "../support/local-edge.js";

let stack: AgentStack;
let taskset: string;
let keyFile: string;
/** Each task's index and archive hash in the set, by word. */
const tasks: Record<string, { index: number; sha256: string }> = {};

const write = (word: string): AgentScript["turns"] => [
  { toolCalls: [{ name: "create_file", arguments: { path: "answer.txt", content: word } }] },
  { toolCalls: [{ name: "finish", arguments: { summary: `wrote ${word}` } }] },
];

/** The scripts; a member's seed (its attempt, 0 to 3) picks its variant. */
const SCRIPTS: AgentScript[] = [
  { name: "eval-alpha", match: "(eval task alpha)", turns: write("alpha") },
  {
    name: "eval-beta",
    match: "(eval task beta)",
    turns: write("beta"),
    variants: [write("beta"), write("wrong"), write("betamax"), write("beta")],
  },
  { name: "eval-gamma", match: "(eval task gamma)", turns: write("delta") },
];

/** A task: write `word` to answer.txt. Its reference solution writes `solves`. */
function taskDir(root: string, word: string, solves: string): void {
  const dir = join(root, word);
  for (const sub of ["environment", "tests", "solution"]) mkdirSync(join(dir, sub), { recursive: true });
  writeFileSync(join(dir, "instruction.md"), `Write the word \`${word}\` into answer.txt. (eval task ${word})\n`);
  writeFileSync(join(dir, "task.toml"), "[verifier]\ntimeout_sec = 30\n\n[agent]\ntimeout_sec = 120\n");
  writeFileSync(
    join(dir, "environment", "Dockerfile"),
    "FROM debian:bookworm-slim\nWORKDIR /workspace\nCOPY . /workspace\n",
  );
  writeFileSync(join(dir, "environment", "README.md"), "The answer goes in answer.txt.\n");
  writeFileSync(
    join(dir, "tests", "test.sh"),
    "#!/bin/bash\ncd /workspace\nmkdir -p /logs/verifier\n" +
      `got="$(cat answer.txt 2>/dev/null)"\n` +
      `echo "answer.txt holds '$got'; expected '${word}'"\n` +
      `[ "$got" = "${word}" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n`,
    { mode: 0o755 },
  );
  writeFileSync(
    join(dir, "solution", "solve.sh"),
    `#!/bin/bash\ncd /workspace\nprintf '%s' '${solves}' > answer.txt\n`,
    { mode: 0o755 },
  );
}

const cli = (args: string[]) => sextantAsync(args, stack.env);

/** `eval run … --json`: the id it printed to stderr first, and the document. */
async function evalRunJson(args: string[], code = 0) {
  const out = await cli(["eval", "run", ...args, "--json"]);
  expect(out.code, out.stderr).toBe(code);
  const id = /^(eval_[0-9a-z]{20})$/m.exec(out.stderr)?.[1];
  expect(id, out.stderr).toBeDefined();
  const doc = JSON.parse(out.stdout) as {
    report: EvalReport;
    stats: TaskStats[];
    validation: { index: number; rewards: (number | null)[] }[] | null;
    logs: AttemptLog[] | null;
  };
  expect(doc.report.id).toBe(id);
  return doc;
}

beforeAll(async () => {
  stack = await startAgentStack();
  await setAgentScripts(stack.edge, SCRIPTS);
  const dir = mkdtempSync(join(tmpdir(), "sextant-eval-set-"));
  keyFile = join(dir, "org.key.json");
  const root = join(dir, "set");
  taskDir(root, "alpha", "alpha");
  taskDir(root, "beta", "beta");
  // gamma's reference solution is wrong: the set's own check must catch it.
  taskDir(root, "gamma", "gamm");
  const keygen = await cli(["envs", "keygen", "--out", keyFile]);
  expect(keygen.code, keygen.stderr).toBe(0);
  const push = await cli(["envs", "push", root, "--json"]);
  expect(push.code, push.stderr).toBe(0);
  const pushed = JSON.parse(push.stdout) as {
    id: string;
    tasks: Record<string, { index: number; sha256: string }>;
  };
  taskset = pushed.id;
  Object.assign(tasks, pushed.tasks);
  expect(Object.keys(tasks).sort()).toEqual(["alpha", "beta", "gamma"]);
}, 180_000);

afterAll(async () => {
  await stack?.edge.stop();
});

describe("sextant eval", () => {
  let oracle: EvalReport;
  let model: EvalReport;

  it("--agent oracle and noop check the set: gamma's solution scores 0, and the run exits 1 naming it", async () => {
    const checked = await evalRunJson([taskset, "--agent", "oracle"], 1);
    oracle = checked.report;
    expect(oracle).toMatchObject({ agent: "oracle", model: null, attempts: 1, status: "ended" });
    expect(checked.validation).toEqual([{ index: tasks.gamma!.index, sha256: tasks.gamma!.sha256, rewards: [0] }]);
    const noop = await cli(["eval", "run", taskset, "--agent", "noop"]);
    expect(noop.code, noop.stderr).toBe(0);
    expect(noop.stdout).toMatch(/^Eval run eval_[0-9a-z]{20} \(reattach: sextant eval run --resume eval_/);
    expect(noop.stdout).toContain("Validation (noop): every task scored 0.");
  }, 600_000);

  it("a model's run: a row per task, pass@1 0.750 and pass@4 1.000 over the unbroken tasks, gamma listed apart", async () => {
    const out = await cli([
      "eval",
      "run",
      taskset,
      "--model",
      "chat-simulated",
      "--attempts",
      "4",
      "--concurrency",
      "4",
    ]);
    expect(out.code, out.stderr).toBe(0);
    const id = /^Eval run (eval_[0-9a-z]{20}) /.exec(out.stdout)?.[1];
    expect(id, out.stdout).toBeDefined();
    const lines = out.stdout.split("\n");
    const row = (word: string) => lines.find((l) => l.startsWith(`${tasks[word]!.index} `))!.split(/\s{2,}/);
    // TASK, SHA256, PASSED, PASS@1, PASS@4, REWARD, …, FAILURES.
    expect(row("alpha").slice(1, 6)).toEqual([tasks.alpha!.sha256.slice(0, 12), "4/4", "1.000", "1.000", "1.000"]);
    expect(row("beta").slice(1, 6)).toEqual([tasks.beta!.sha256.slice(0, 12), "2/4", "0.500", "1.000", "0.500"]);
    expect(row("beta").at(-1)).toBe("tests 2");
    expect(row("gamma").slice(2, 4)).toEqual(["0/4", "0.000"]);
    expect(row("gamma").at(-1)).toBe("broken");
    expect(out.stdout).toContain("3 tasks (2 counted), 8 attempts, 6 passed");
    expect(out.stdout).toContain("pass@1 0.750  pass@4 1.000  mean reward 0.750");
    expect(out.stdout).toContain(
      `broken (oracle 0, noop 0): task ${tasks.gamma!.index} (${tasks.gamma!.sha256.slice(0, 12)})`,
    );
    expect(out.stdout).not.toContain("Validation");

    // Reattached, and shown: the same report.
    const resumed = await evalRunJson(["--resume", id!]);
    model = resumed.report;
    expect(model.summary).toMatchObject({
      counted: 2,
      attempts: 8,
      passed: 6,
      passAt1: 0.75,
      passAtK: { k: 4, value: 1 },
    });
    expect(resumed.stats.find((s) => s.index === tasks.beta!.index)).toMatchObject({
      passed: 2,
      passAt1: 0.5,
      passAtK: 1,
    });
    const shown = await cli(["eval", "show", id!, "--json"]);
    expect(shown.code, shown.stderr).toBe(0);
    expect((JSON.parse(shown.stdout) as { report: EvalReport }).report).toEqual(model);
  }, 600_000);

  it("--key opens the failed attempts' verifier logs", async () => {
    // The lake's queue takes its time: ask until every failed attempt's row is in.
    let logs: AttemptLog[] = [];
    for (const deadline = Date.now() + 120_000; ; ) {
      const shown = await cli(["eval", "show", model.id, "--json", "--key", keyFile]);
      expect(shown.code, shown.stderr).toBe(0);
      logs = (JSON.parse(shown.stdout) as { logs: AttemptLog[] }).logs;
      if (logs.every((l) => l.log !== null) || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 2000));
    }
    // beta's two failures and gamma's four, each with what the verifier printed.
    expect(logs.map((l) => [l.index, l.attempt])).toEqual([
      ...[1, 2].map((a) => [tasks.beta!.index, a]),
      ...[0, 1, 2, 3].map((a) => [tasks.gamma!.index, a]),
    ]);
    expect(
      logs.map((l) => l.log?.trim()),
      JSON.stringify(logs.map((l) => l.missing)),
    ).toEqual([
      "answer.txt holds 'wrong'; expected 'beta'",
      "answer.txt holds 'betamax'; expected 'beta'",
      ...Array.from({ length: 4 }, () => "answer.txt holds 'delta'; expected 'gamma'"),
    ]);
    const text = await cli(["eval", "show", model.id, "--key", keyFile, "--log-lines", "1"]);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain(
      `task ${tasks.beta!.index} (${tasks.beta!.sha256.slice(0, 12)}), attempt 1 (tests):\n  | answer.txt holds 'wrong'; expected 'beta'\n`,
    );
  }, 300_000);

  it("compare: a run against itself differs by 0 within [0, 0]; the oracle against the model wins beta", async () => {
    const self = await cli(["eval", "compare", model.id, model.id, "--json"]);
    expect(self.code, self.stderr).toBe(0);
    const same = JSON.parse(self.stdout) as { a: EvalRun; b: EvalRun; comparison: RunComparison };
    expect(same.a.id).toBe(model.id);
    expect(same.comparison).toMatchObject({ counted: 2, wins: 0, losses: 0, ties: 2, difference: 0 });
    expect(same.comparison.interval).toMatchObject({ low: 0, high: 0, confidence: 0.95, resamples: 10_000, seed: 0 });
    expect(same.comparison.tasks.find((t) => t.indexA === tasks.gamma!.index)?.excluded).toBe("broken in a");

    const versus = await cli(["eval", "compare", model.id, oracle.id, "--seed", "5"]);
    expect(versus.code, versus.stderr).toBe(0);
    expect(versus.stdout).toContain("Wins 1, losses 0, ties 1 (b against a, by pass@1)");
    expect(versus.stdout).toContain("pass@1 0.750 -> 1.000: difference +0.250 (95% CI +0.000 to +0.500;");
    expect(versus.stdout).toContain("seed 5)");
  }, 120_000);

  it("list: the org's runs newest first, of one task set with --taskset", async () => {
    const out = await cli(["eval", "list", "--taskset", taskset, "--json"]);
    expect(out.code, out.stderr).toBe(0);
    const { runs } = JSON.parse(out.stdout) as { runs: EvalRun[] };
    expect(runs.map((r) => r.agent)).toEqual(["model", "noop", "oracle"]);
    expect(runs[0]!.id).toBe(model.id);
    const none = await cli(["eval", "list", "--taskset", "tset_none"]);
    expect(none.stdout).toBe("(none)\n");
  }, 60_000);

  it("another org's run is not found (exit 4)", async () => {
    const other = await makeOrg(stack.edge, "eval-other");
    const out = await sextantAsync(["eval", "show", model.id], { ...stack.env, SEXTANT_API_KEY: other.key });
    expect(out.code).toBe(4);
    const resumed = await sextantAsync(["eval", "run", "--resume", model.id], {
      ...stack.env,
      SEXTANT_API_KEY: other.key,
    });
    expect(resumed.code).toBe(4);
    expect(resumed.stdout).toBe("");
  }, 60_000);
});

describe("the SDK", () => {
  it("evals.run says the run's id first and yields its events; get, list and compare read it", async () => {
    const evals = stack.sdk.evals;
    let announced: string | undefined;
    const events: RolloutEvent[] = [];
    for await (const event of evals.run(
      { taskset, tasks: [tasks.beta!.sha256], model: "chat-simulated", attempts: 2 },
      {
        onRun: (id, run) => {
          expect(events).toHaveLength(0);
          expect(run).toMatchObject({ id, agent: "model", attempts: 2, status: "running" });
          announced = id;
        },
      },
    ))
      events.push(event);
    expect(announced).toMatch(/^eval_[0-9a-z]{20}$/);
    expect(events.filter((e) => e.type === "rollout.ended")).toHaveLength(2);
    expect(events.at(-1)!.type).toBe("summary");
    const report = await evals.get(announced!);
    // Seeds 0 and 1: beta's first variant solves, its second does not.
    expect(report.tasks.map((t) => t.attempts.map((a) => a.passed))).toEqual([[true, false]]);
    expect(report.summary.passAt1).toBe(0.5);
    expect((await evals.list({ taskset, limit: 1 })).map((r) => r.id)).toEqual([announced]);
    const replay: RolloutEvent[] = [];
    for await (const event of evals.events(announced!, { after: 2 })) replay.push(event);
    expect(replay).toEqual(events.slice(2));
    const { comparison } = await evals.compare(announced!, announced!);
    expect(comparison).toMatchObject({ counted: 1, difference: 0, interval: { low: 0, high: 0 } });
  }, 300_000);
});
