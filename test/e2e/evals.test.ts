/**
 * Eval runs end to end, through `npm start`'s edge, a sandbox host of the test's own and simulated
 * model servers the test starts itself (stand-ins for GPU servers, speaking OpenAI's chat API),
 * priced in the gateway's configuration. The policy is the simulator's scripted agent model: four
 * of the repository's Harbor tasks (test/fixtures/env-tasks), each attempt seeded `seed + i` so
 * that it plays the script variant its seed picks, chosen here so that exactly which attempts solve
 * is known: 3 of 3, 0 of 3 (one of them out of turns), 2 of 3 and 1 of 3. pass@1 is then 1/2 and
 * pass@3 3/4, worked by hand below. An eval run stopped mid-way by stopping the whole edge carries on
 * when it starts again and ends with the same report, and the lake holds one `eval_attempts` row per
 * attempt, read with DuckDB from the exported Parquet.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createParser } from "eventsource-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkTaskDir } from "../../client/envs/task-archive.js";
import { manifestSettings } from "../../client/envs/task-set.js";
import { AgentScriptsBody, type AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import { startSimulator, type Simulator } from "../../gpu-backends/simulator/simulator.js";
import { toBase64url } from "../../protocol/base64.js";
import { PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { OrgKey, RowsAnswer } from "../../protocol/envs/capture.js";
import { RolloutEvent } from "../../protocol/envs/rollouts.js";
import { generateOrgKeyPair, importPrivateKey, type OrgKeyPair } from "../../protocol/envs/seal.js";
import { openVerifierLog } from "../../protocol/envs/verifier-log.js";
import { EvalReport, EvalRun, EvalRunList } from "../../protocol/evals/api.js";
import { partitionOf } from "../../protocol/lake.js";
import { LOCAL_BACKENDS, localGatewayConfig } from "../../scripts/local-gateway.js";
import {
  makeOrg,
  rawCall,
  startAgentStack,
  startTestSandboxHost,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { duckQuery } from "../support/duckdb.js";
import { ROOT, savedLocalEdge } from "../support/local-edge.js";
import { restartCheaply } from "../support/restart-edge.js";

const ENV_TASKS = join(ROOT, "test/fixtures/env-tasks");
const FIXTURES = ["median-even", "slugify", "roman", "py-fibonacci"];
/** USD per million tokens, as the test's gateway prices the simulated chat model. */
const PRICE = { input: 3, output: 15 };
const ATTEMPTS = 3;
const TURNS = 6;

const giveUp: AgentScript["turns"] = [
  { toolCalls: [{ name: "finish", arguments: { summary: "Nothing to change." } }] },
];
/** Runs out of turns: more of them than the run's limit, none of them a change. */
const dawdle: AgentScript["turns"] = Array.from({ length: TURNS + 2 }, () => ({
  toolCalls: [{ name: "run_terminal", arguments: { command: "true", timeoutMs: 10_000 } }],
}));

/**
 * Each task's variants, by seed (attempt i plays variant i mod their count): "solve" is the fixture's
 * own script, which its tests score 1.
 */
const PLAN: ("solve" | "giveUp" | "dawdle")[][] = [
  ["solve"],
  ["giveUp", "dawdle", "giveUp"],
  ["solve", "giveUp"],
  ["giveUp", "giveUp", "solve"],
];
/** What each task's three attempts score, and why each that fails does. */
const PASSED = [
  [true, true, true],
  [false, false, false],
  [true, false, true],
  [false, false, true],
];
const FAILURES = [
  [null, null, null],
  ["tests", "budget", "tests"],
  [null, "tests", null],
  ["tests", "tests", null],
];
/**
 * pass@1 by hand: the mean over tasks of c/n = (3/3 + 0/3 + 2/3 + 1/3) / 4 = 1/2. pass@3 with n = 3:
 * 1 − C(3−c, 3)/C(3, 3) is 1 for any c ≥ 1 and 0 for c = 0, so (1 + 0 + 1 + 1) / 4 = 3/4.
 */
const PASS_AT_1 = 0.5;
const PASS_AT_3 = 0.75;

restartCheaply();

let simulator: Simulator;
let host: SandboxHostHandle;
let stack: AgentStack;
let key: string;
let pair: OrgKeyPair;
let keyId: string;
let taskset: string;
const shas: string[] = [];
/** The first fixture's archive and manifest entry, for an org of the test's own to upload. */
let solvable: { sha256: string; archive: Uint8Array; entry: unknown };
let gatewayConfig: string;
const persistTo = mkdtempSync(join(tmpdir(), "sextant-state-"));
const configDir = mkdtempSync(join(tmpdir(), "sextant-config-"));

beforeAll(async () => {
  const fixtureScripts = AgentScriptsBody.parse(JSON.parse(readFileSync(join(ENV_TASKS, "scripts.json"), "utf8")));
  const scripts: AgentScript[] = [];
  const manifest = [];
  const checked = await Promise.all(FIXTURES.map((name) => checkTaskDir(join(ENV_TASKS, name))));
  for (const [i, task] of checked.entries()) {
    const script = fixtureScripts.scripts.find((s) => task.task.instruction.includes(s.match));
    expect(script, FIXTURES[i]).toBeDefined();
    const turns = { solve: script!.turns, giveUp, dawdle };
    scripts.push({
      name: script!.name,
      match: script!.match,
      turns: script!.turns,
      variants: PLAN[i]!.map((v) => turns[v]),
    });
    manifest.push({
      sha256: task.sha256,
      bytes: task.archive.byteLength,
      settings: manifestSettings(task.task.settings),
    });
    shas.push(task.sha256);
  }
  solvable = { sha256: checked[0]!.sha256, archive: checked[0]!.archive, entry: manifest[0] };
  simulator = await startSimulator({ backends: LOCAL_BACKENDS.map((b) => ({ ...b, agentScripts: scripts })) });
  const config = localGatewayConfig(Object.fromEntries(simulator.backends.map((b) => [b.id, b.url])));
  config.pools.chat = { ...config.pools.chat!, price: PRICE };
  gatewayConfig = JSON.stringify(config);
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host, persistTo, configDir, vars: { GATEWAY_CONFIG: gatewayConfig } });
  key = savedLocalEdge(stack.edge).apiKey;
  pair = await generateOrgKeyPair();
  const registered = await rawCall(stack.edge, key, "PUT", "/v1/envs/keys", { publicKey: toBase64url(pair.publicKey) });
  expect(registered.status, JSON.stringify(registered.json)).toBe(200);
  keyId = OrgKey.parse(registered.json).keyId;
  for (const [i, task] of checked.entries()) {
    const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${task.sha256}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
      body: task.archive as Uint8Array<ArrayBuffer>,
    });
    expect(put.status, `${FIXTURES[i]}: ${await put.clone().text()}`).toBe(201);
  }
  const set = await rawCall(stack.edge, key, "POST", "/v1/envs/tasksets", { tasks: manifest });
  expect(set.status, JSON.stringify(set.json)).toBe(201);
  taskset = (set.json as { id: string }).id;
}, 300_000);

afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
  await simulator?.stop();
});

const request = (method: string, path: string, body?: unknown, token = key) =>
  fetch(`${stack.edge.baseURL}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
    },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });

async function expectProblem(response: Response, status: number, code: string): Promise<void> {
  expect(response.status, await response.clone().text()).toBe(status);
  expect(response.headers.get("Content-Type")).toContain(PROBLEM_CONTENT_TYPE);
  expect(((await response.json()) as { code: string }).code).toBe(code);
}

const modelRun = (concurrency: number) => ({
  taskset,
  model: "chat-simulated",
  checkpoint: "ckpt-eval",
  attempts: ATTEMPTS,
  concurrency,
  sampling: { seed: 0 },
  limits: { turns: TURNS, wallSeconds: 300 },
});

async function create(body: unknown): Promise<EvalRun> {
  const res = await request("POST", "/v1/evals/runs", body);
  expect(res.status, res.ok ? "" : await res.clone().text()).toBe(201);
  const run = EvalRun.parse(await res.json());
  expect(res.headers.get("Location")).toBe(`/v1/evals/runs/${run.id}`);
  return run;
}

/** The run's events from `after`, read to the summary. */
async function events(id: string, after?: number): Promise<RolloutEvent[]> {
  const res = await fetch(`${stack.edge.baseURL}/v1/evals/runs/${id}/events`, {
    headers: { Authorization: `Bearer ${key}`, ...(after === undefined ? {} : { "Last-Event-ID": String(after) }) },
  });
  expect(res.status, res.ok ? "" : await res.clone().text()).toBe(200);
  expect(res.headers.get("Content-Type")).toMatch(/^text\/event-stream/);
  const out: RolloutEvent[] = [];
  const parser = createParser({ onEvent: (m) => out.push(RolloutEvent.parse(JSON.parse(m.data))) });
  const decoder = new TextDecoder();
  const reader = res.body!.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
    parser.feed(decoder.decode(chunk.value, { stream: true }));
  return out;
}

async function report(id: string): Promise<EvalReport> {
  const res = await request("GET", `/v1/evals/runs/${id}`);
  expect(res.status, res.ok ? "" : await res.clone().text()).toBe(200);
  return EvalReport.parse(await res.json());
}

/** Polls the report until `done` holds of it (the bound only keeps a broken run from hanging the suite). */
async function reportWhen(id: string, done: (r: EvalReport) => boolean): Promise<EvalReport> {
  const deadline = Date.now() + 400_000;
  for (;;) {
    const r = await report(id).catch(() => null);
    if (r && done(r)) return r;
    if (Date.now() > deadline) throw new Error(`eval run ${id} never got there`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** What must be the same in two runs of the same plan: every attempt's result, and the figures. */
const outcome = (r: EvalReport) => ({
  tasks: r.tasks.map((t) => ({
    index: t.index,
    sha256: t.sha256,
    broken: t.broken,
    attempts: t.attempts.map((a) => [a.attempt, a.reward, a.passed, a.outcome, a.failureKind, a.turns]),
  })),
  summary: { ...r.summary, tokens: undefined, costUsd: undefined, wallMs: undefined },
});

function expectThePlan(r: EvalReport): void {
  expect(r.status).toBe("ended");
  expect(r.tasks.map((t) => [t.index, t.sha256, t.broken])).toEqual(shas.map((sha, i) => [i, sha, null]));
  expect(r.tasks.map((t) => t.attempts.map((a) => a.attempt))).toEqual(shas.map(() => [0, 1, 2]));
  expect(r.tasks.map((t) => t.attempts.map((a) => a.passed))).toEqual(PASSED);
  const outcomes = JSON.stringify(r.tasks.map((t) => t.attempts.map((a) => a.outcome)));
  expect(
    r.tasks.map((t) => t.attempts.map((a) => a.failureKind)),
    outcomes,
  ).toEqual(FAILURES);
  expect(r.tasks[1]!.attempts[1]).toMatchObject({ outcome: "turns", turns: TURNS, reward: 0 });
  expect(r.summary).toMatchObject({
    tasks: 4,
    counted: 4,
    attempts: 12,
    passed: 6,
    passAtK: { k: 3 },
    failures: { tests: 5, budget: 1, error: 0, quota: 0 },
  });
  // The estimator's product form is exact to a rounding: 1 − (1 − 1/3) is not 1/3 in binary.
  expect(r.summary.passAt1).toBeCloseTo(PASS_AT_1, 12);
  expect(r.summary.passAtK.value).toBeCloseTo(PASS_AT_3, 12);
  // Each attempt's cost at the gateway's price, from the prompt and completion tokens it reported.
  let cost = 0;
  for (const a of r.tasks.flatMap((t) => t.attempts)) {
    expect(a.promptTokens).toBeGreaterThan(0);
    expect(a.completionTokens).toBeGreaterThan(0);
    expect(a.costUsd).toBeCloseTo((a.promptTokens! * PRICE.input + a.completionTokens! * PRICE.output) / 1e6, 12);
    cost += a.costUsd!;
  }
  expect(r.summary.costUsd).toBeCloseTo(cost, 9);
}

describe("an eval run with a scripted policy", () => {
  let first: EvalRun;
  let streamed: RolloutEvent[];

  it("reports exactly the attempts the policy solves: pass@1 1/2, pass@3 3/4", async () => {
    first = await create(modelRun(4));
    expect(first).toMatchObject({
      status: "running",
      taskset,
      agent: "model",
      model: "chat-simulated",
      checkpoint: "ckpt-eval",
      attempts: ATTEMPTS,
      concurrency: 4,
      price: PRICE,
      endedAt: null,
    });
    streamed = await events(first.id);
    expect(streamed.at(-1)?.type).toBe("summary");
    expect(streamed.filter((e) => e.type === "rollout.ended")).toHaveLength(12);
    expectThePlan(await report(first.id));
  }, 600_000);

  it("streams its events again from Last-Event-ID, and lists it ended", async () => {
    expect(await events(first.id, streamed.length - 2)).toEqual(streamed.slice(-2));
    const list = await request("GET", `/v1/evals/runs?taskset=${taskset}`);
    const runs = EvalRunList.parse(await list.json()).runs;
    expect(runs.find((r) => r.id === first.id)).toMatchObject({ status: "ended", rolloutRun: first.rolloutRun });
  });

  it("is checked by an oracle and a noop run, which mark no task of the set broken", async () => {
    const oracle = await create({ taskset, agent: "oracle" });
    const noop = await create({ taskset, agent: "noop" });
    expect(oracle).toMatchObject({ model: null, price: null });
    const checked = await Promise.all([oracle, noop].map((r) => reportWhen(r.id, (x) => x.status === "ended")));
    expect(checked[0]!.tasks.map((t) => t.attempts.map((a) => a.reward))).toEqual(shas.map(() => [1]));
    expect(checked[1]!.tasks.map((t) => t.attempts.map((a) => a.reward))).toEqual(shas.map(() => [0]));
    expect(checked[0]!.summary).toMatchObject({ passAt1: 1, counted: 4 });
    expect(checked[1]!.summary).toMatchObject({ passAt1: 0, counted: 4 });
    expectThePlan(await report(first.id));
  }, 600_000);

  it("is missing to another org, which cannot run this org's task set either", async () => {
    const other = await makeOrg(stack.edge, "evals-other");
    for (const path of [`/v1/evals/runs/${first.id}`, `/v1/evals/runs/${first.id}/events`])
      await expectProblem(await request("GET", path, undefined, other.key), 404, "not_found");
    await expectProblem(await request("POST", "/v1/evals/runs", modelRun(1), other.key), 404, "not_found");
    const list = await request("GET", "/v1/evals/runs", undefined, other.key);
    expect(EvalRunList.parse(await list.json()).runs).toEqual([]);
  });

  it("prices the attempts of an org that has no sealing key, from its tasks' own token counts", async () => {
    // Nothing of this org's is captured: its rollouts' prompt and completion tokens are counted all the same.
    const bare = await makeOrg(stack.edge, "evals-no-sealing-key");
    const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${solvable.sha256}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${bare.key}`, "Content-Type": "application/gzip" },
      body: solvable.archive as Uint8Array<ArrayBuffer>,
    });
    expect(put.status, await put.clone().text()).toBe(201);
    const set = await rawCall(stack.edge, bare.key, "POST", "/v1/envs/tasksets", { tasks: [solvable.entry] });
    expect(set.status, JSON.stringify(set.json)).toBe(201);
    const body = { ...modelRun(1), taskset: (set.json as { id: string }).id, attempts: 1 };
    const made = await request("POST", "/v1/evals/runs", body, bare.key);
    expect(made.status, made.ok ? "" : await made.clone().text()).toBe(201);
    const id = EvalRun.parse(await made.json()).id;
    const deadline = Date.now() + 300_000;
    let r: EvalReport;
    for (;;) {
      const res = await request("GET", `/v1/evals/runs/${id}`, undefined, bare.key);
      expect(res.status, res.ok ? "" : await res.clone().text()).toBe(200);
      r = EvalReport.parse(await res.json());
      if (r.status === "ended") break;
      if (Date.now() > deadline) throw new Error(`eval run ${id} never ended`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const [attempt] = r.tasks.flatMap((t) => t.attempts);
    expect(attempt).toMatchObject({ passed: true, outcome: "finished" });
    expect(attempt!.promptTokens).toBeGreaterThan(0);
    expect(attempt!.completionTokens).toBeGreaterThan(0);
    expect(attempt!.promptTokens! + attempt!.completionTokens!).toBe(attempt!.tokens);
    expect(attempt!.costUsd).toBeCloseTo(
      (attempt!.promptTokens! * PRICE.input + attempt!.completionTokens! * PRICE.output) / 1e6,
      12,
    );
    expect(r.summary.costUsd).toBeCloseTo(attempt!.costUsd!, 12);
  }, 400_000);

  it("refuses bad bodies and unknown names", async () => {
    const post = (body: unknown) => request("POST", "/v1/evals/runs", body);
    for (const body of [
      { taskset, attempts: 1 },
      { taskset, agent: "noop", model: "chat-simulated" },
      { ...modelRun(1), attempts: 0 },
      { ...modelRun(1), attempts: 101 },
      { ...modelRun(1), concurrency: 1025 },
      { ...modelRun(1), agent: "human" },
      { ...modelRun(1), surprise: true },
    ])
      await expectProblem(await post(body), 400, "invalid_request");
    await expectProblem(await post("{"), 400, "invalid_request");
    await expectProblem(await post({ ...modelRun(1), model: "no-such-model" }), 404, "not_found");
    await expectProblem(await post({ ...modelRun(1), tasks: [9] }), 404, "not_found");
    await expectProblem(await post({ ...modelRun(1), taskset: "tset_nothing" }), 404, "not_found");
    await expectProblem(await request("GET", "/v1/evals/runs/eval_00000000000000000000"), 404, "not_found");
    await expectProblem(await request("GET", "/v1/evals/runs?limit=0"), 400, "invalid_request");
    await expectProblem(await fetch(`${stack.edge.baseURL}/v1/evals/runs`), 401, "unauthenticated");
  });

  it("ends with the same report when the edge is stopped mid-run, and each attempt is in the lake once", async () => {
    const run = await create(modelRun(2));
    const before = await reportWhen(run.id, (r) => r.tasks.flatMap((t) => t.attempts).length >= 3);
    expect(before.status).toBe("running");
    await stack.edge.stop();
    const port = Number(new URL(stack.edge.baseURL).port);
    stack = await startAgentStack({ host, port, persistTo, configDir, vars: { GATEWAY_CONFIG: gatewayConfig } });
    const after = await reportWhen(run.id, (r) => r.status === "ended");
    expectThePlan(after);
    expect(outcome(after)).toEqual(outcome(await report(first.id)));

    // One row per attempt: the run's rows land in its creation's hour.
    const { day, hour } = partitionOf("eval_attempts", Date.parse(run.createdAt));
    const deadline = Date.now() + 300_000;
    let rows: RowsAnswer["rows"] = [];
    for (;;) {
      const res = await rawCall(
        stack.edge,
        key,
        "GET",
        `/v1/envs/rows/eval_attempts?day=${day}&hour=${hour}&eval=${run.id}`,
      );
      expect(res.status, JSON.stringify(res.json)).toBe(200);
      rows = RowsAnswer.parse(res.json).rows;
      if (rows.length >= 12) break;
      if (Date.now() > deadline) throw new Error(`the lake holds ${rows.length}/12 of the run's attempts`);
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    expect(rows).toHaveLength(12);
    const attempt = (r: (typeof rows)[number]) => [r.task_index, r.attempt, r.passed, r.failure_kind];
    expect(rows.map(attempt).sort()).toEqual(
      PASSED.flatMap((task, i) => task.map((passed, a) => [i, a, passed, FAILURES[i]![a]])).sort(),
    );
    // Each row's verifier log opens with the org's key, to the tests' output.
    const privateKey = await importPrivateKey(pair.privateJwk);
    const failing = rows.find((r) => r.task_index === 1 && r.attempt === 0)!;
    expect(failing.content_key_id).toBe(keyId);
    const log = await openVerifierLog(privateKey, String(failing.org_id), `${run.rolloutRun}-${failing.member}`, {
      content_key_id: keyId,
      content: String(failing.verifier_log),
    });
    expect(log.length).toBeGreaterThan(0);

    // DuckDB over the exported Parquet: twelve rows, twelve attempts, the same figures.
    const out = mkdtempSync(join(tmpdir(), "sextant-eval-lake-"));
    const exported = stack.cli(["--json", "admin", "lake", "export", "--day", day, "--out", out]);
    expect(exported.code, exported.stderr).toBe(0);
    const parquet = `read_parquet('${out}/eval_attempts/**/*.parquet', hive_partitioning = true)`;
    const [counts] = await duckQuery(
      `SELECT count(*) AS n, count(DISTINCT attempt_id) AS ids, count(DISTINCT member) AS members,
              count(*) FILTER (WHERE passed) AS passed, count(*) FILTER (WHERE failure_kind = 'budget') AS budget
         FROM ${parquet} WHERE eval_id = '${run.id}'`,
    );
    expect(counts).toEqual({ n: 12, ids: 12, members: 12, passed: 6, budget: 1 });
    const perTask = await duckQuery(
      `SELECT task_index, avg(CASE WHEN passed THEN 1.0 ELSE 0.0 END) AS rate
         FROM ${parquet} WHERE eval_id = '${run.id}' GROUP BY task_index ORDER BY task_index`,
    );
    const rates = perTask.map((r) => Number(r.rate));
    expect(rates.reduce((a, b) => a + b, 0) / rates.length).toBeCloseTo(PASS_AT_1, 12);
  }, 900_000);
});
