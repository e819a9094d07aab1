/**
 * Eval runs at the edge, in workerd with real D1, SQLite objects, the records queue and the lake:
 * a rollout run that plays an eval run (made here as the route makes it, since no sandbox host runs
 * in these tests) is told its members' ends as members tell them, and the eval's report, list and
 * `eval_attempts` rows are read back through the API. The report's figures are worked by hand; the
 * task set's oracle and noop runs mark a task broken once they end, which the manifest learns when
 * it is next read.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { CreateRun } from "../../durable-objects/env-run/env-run.js";
import { OrgKey, RowsAnswer } from "../../protocol/envs/capture.js";
import type { RolloutEnded as MemberReport } from "../../protocol/envs/run.js";
import { generateOrgKeyPair, importPrivateKey } from "../../protocol/envs/seal.js";
import { openVerifierLog, sealVerifierLog } from "../../protocol/envs/verifier-log.js";
import { EvalReport, EvalRunList, type EvalAgent, type TokenPrice } from "../../protocol/evals/api.js";
import { toBase64url } from "../../protocol/base64.js";
import { newId } from "../../protocol/ids.js";
import { partitionOf } from "../../protocol/lake.js";
import { call, createAccount, expectJson, expectProblem, type Account } from "./harness.js";

const SHA = (n: number) => String(n).repeat(64).slice(0, 64);
const TASKSET = "tset_evals00000000000000";
const stubOf = (id: string) => env.ENV_RUN.get(env.ENV_RUN.idFromName(id));

/** A member's end as a member reports it. */
type End = { reward: number | null; outcome?: MemberReport["outcome"]; prompt?: number; completion?: number };

interface Made {
  evalId: string;
  run: CreateRun;
}

/** An eval run as `POST /v1/evals/runs` makes one: its manifest, then its rollout run. */
async function makeEval(
  account: Account,
  agent: EvalAgent,
  tasks: number,
  attempts: number,
  options: { price?: TokenPrice | null; orgLimits?: CreateRun["orgLimits"] } = {},
): Promise<Made> {
  const evalId = newId("eval");
  const price = options.price ?? null;
  const run: CreateRun = {
    id: `run_${newId("task").slice(5)}`,
    orgId: account.org.id,
    userId: account.user.id,
    keyId: account.key.id,
    taskset: TASKSET,
    tasks: Array.from({ length: tasks }, (_, i) => ({ index: i, sha256: SHA(i + 1) })),
    policy: { model: agent === "model" ? "chat-simulated" : agent, checkpoint: "ckpt-3" },
    agent,
    groupSize: attempts,
    sampling: {},
    limits: { sandboxSeconds: 60, wallSeconds: 120 },
    concurrency: 1,
    orgLimits: options.orgLimits ?? { concurrentTasks: 100, dailySandboxSeconds: 1_000_000 },
    eval: { id: evalId, price },
  };
  await env.DB.prepare(
    `INSERT INTO eval_runs (id, org_id, taskset_id, rollout_run_id, agent, model, checkpoint, attempts, concurrency,
       price_input, price_output) VALUES (?, ?, ?, ?, ?, ?, 'ckpt-3', ?, 1, ?, ?)`,
  )
    .bind(
      evalId,
      account.org.id,
      TASKSET,
      run.id,
      agent,
      agent === "model" ? "chat-simulated" : null,
      attempts,
      price?.input ?? null,
      price?.output ?? null,
    )
    .run();
  await stubOf(run.id).create(run);
  return { evalId, run };
}

function report(run: CreateRun, member: number, end: End, extra: Partial<MemberReport> = {}): MemberReport {
  return {
    runId: run.id,
    member,
    taskId: `${run.id}-${member}`,
    reward: end.reward,
    components: end.reward === null ? {} : { reward: end.reward },
    outcome: end.outcome ?? "finished",
    ...(end.reward === null ? { verifyError: "The rollout's sandbox is gone." } : {}),
    usage: { turns: 3, tokens: 1000 + member, toolCalls: 2, sandboxSeconds: 1.5, outputBytes: 300 },
    startedAt: "2026-01-01T00:00:00.000Z",
    endedAt: "2026-01-01T00:00:02.500Z",
    ...(end.prompt !== undefined ? { promptTokens: end.prompt, completionTokens: end.completion ?? null } : {}),
    ...extra,
  };
}

/** Tells the run each member's end, member by member (tasks in order, each task's attempts in order). */
async function play(made: Made, ends: End[][]): Promise<void> {
  let member = 0;
  for (const task of ends)
    for (const end of task) await stubOf(made.run.id).rolloutEnded(report(made.run, member++, end));
}

const reportOf = async (account: Account, id: string) =>
  expectJson(await call(`/v1/evals/runs/${id}`, { token: account.key.key }), 200, EvalReport);

describe("an eval run's report", () => {
  it("counts each task's attempts, says why each failed, and leaves broken tasks out", async () => {
    const owner = await createAccount();
    const price = { input: 2, output: 10 };
    const made = await makeEval(owner, "model", 3, 3, { price });
    await play(made, [
      [
        { reward: 1, prompt: 1000, completion: 100 },
        { reward: 1, prompt: 500, completion: 50 },
        { reward: 1, prompt: 10, completion: 1 },
      ],
      [
        { reward: 1, prompt: 100, completion: 10 },
        { reward: 0, prompt: 100, completion: 10 },
        { reward: 0, outcome: "turns", prompt: 100, completion: 10 },
      ],
      [
        { reward: 0, prompt: 1, completion: 1 },
        { reward: null, outcome: "sandbox_gone", prompt: 1, completion: 1 },
        { reward: 0.5, prompt: 1, completion: 1 },
      ],
    ]);
    let got = await reportOf(owner, made.evalId);
    expect(got).toMatchObject({
      id: made.evalId,
      status: "ended",
      taskset: TASKSET,
      agent: "model",
      model: "chat-simulated",
      checkpoint: "ckpt-3",
      attempts: 3,
      price,
      rolloutRun: made.run.id,
    });
    expect(got.tasks.map((t) => [t.index, t.sha256, t.broken])).toEqual([
      [0, SHA(1), null],
      [1, SHA(2), null],
      [2, SHA(3), null],
    ]);
    expect(
      got.tasks[1]!.attempts.map((a) => [a.attempt, a.member, a.reward, a.passed, a.outcome, a.failureKind]),
    ).toEqual([
      [0, 3, 1, true, "finished", null],
      [1, 4, 0, false, "finished", "tests"],
      [2, 5, 0, false, "turns", "budget"],
    ]);
    expect(got.tasks[2]!.attempts.map((a) => a.failureKind)).toEqual(["tests", "error", "tests"]);
    // (1000 × 2 + 100 × 10) / 1e6
    expect(got.tasks[0]!.attempts[0]).toMatchObject({
      tokens: 1000,
      promptTokens: 1000,
      completionTokens: 100,
      durationMs: 2500,
      turns: 3,
    });
    expect(got.tasks[0]!.attempts[0]!.costUsd).toBeCloseTo(0.003, 12);
    // pass@1: (3/3 + 1/3 + 0/3) / 3 = 4/9; pass@3: every draw of 3 is all 3, so (1 + 1 + 0) / 3.
    expect(got.summary).toMatchObject({ tasks: 3, counted: 3, attempts: 9, passed: 4, passAtK: { k: 3 } });
    expect(got.summary.passAt1).toBeCloseTo(4 / 9, 12);
    expect(got.summary.passAtK.value).toBeCloseTo(2 / 3, 12);
    // Over every attempt, the unverified one scoring 0: (3 + 1 + 0.5) / 9.
    expect(got.summary.meanReward).toBeCloseTo(4.5 / 9, 12);
    expect(got.summary.failures).toEqual({ tests: 3, budget: 1, error: 1, quota: 0 });
    expect(got.summary.tokens).toBe(9 * 1000 + 36);
    expect(got.summary.wallMs).toBe(9 * 2500);

    // The set's checks: the reference solution fails task 2, and the untouched tree passes task 1.
    // Both are still running as far as D1 knows; reading the report brings them up to date.
    const oracle = await makeEval(owner, "oracle", 3, 1);
    await play(oracle, [[{ reward: 1 }], [{ reward: 1 }], [{ reward: 0 }]]);
    const noop = await makeEval(owner, "noop", 3, 1);
    await play(noop, [[{ reward: 0 }], [{ reward: 1 }], [{ reward: 0 }]]);
    got = await reportOf(owner, made.evalId);
    expect(got.tasks.map((t) => t.broken)).toEqual([null, { oracle: 1, noop: 1 }, { oracle: 0, noop: 0 }]);
    // Task 0 alone counts: pass@1 1, pass@3 1, and no failure is counted.
    expect(got.summary).toMatchObject({ tasks: 3, counted: 1, attempts: 3, passed: 3, passAt1: 1 });
    expect(got.summary.passAtK).toEqual({ k: 3, value: 1 });
    expect(got.summary.failures).toEqual({ tests: 0, budget: 0, error: 0, quota: 0 });
    expect(got.summary.costUsd).toBeCloseTo((1510 * 2 + 151 * 10) / 1e6, 12);

    // A later oracle run that passes every task takes task 2 off; task 1 stays broken by the noop run.
    const fixed = await makeEval(owner, "oracle", 3, 1);
    await play(fixed, [[{ reward: 1 }], [{ reward: 1 }], [{ reward: 1 }]]);
    got = await reportOf(owner, made.evalId);
    expect(got.tasks.map((t) => t.broken)).toEqual([null, { oracle: 1, noop: 1 }, null]);

    // The manifest kept the run's end and its figures, numbers only.
    const row = await env.DB.prepare("SELECT status, ended_at, summary_json FROM eval_runs WHERE id = ?")
      .bind(made.evalId)
      .first<{ status: string; ended_at: number; summary_json: string }>();
    expect(row!.status).toBe("ended");
    expect(row!.ended_at).toBeGreaterThan(0);
    const kept = JSON.parse(row!.summary_json) as { rewards: Record<string, number | null>; summary: unknown };
    expect(kept.rewards).toEqual({ 0: 1, 1: 1 / 3, 2: null });
    expect(JSON.stringify(kept)).not.toMatch(/[a-f0-9]{64}/);
  });

  it("is a missing run to another org, and an unknown id is 404", async () => {
    const owner = await createAccount();
    const stranger = await createAccount();
    const made = await makeEval(owner, "noop", 1, 1);
    for (const path of [`/v1/evals/runs/${made.evalId}`, `/v1/evals/runs/${made.evalId}/events`])
      await expectProblem(await call(path, { token: stranger.key.key }), 404, "not_found");
    await expectProblem(
      await call("/v1/evals/runs/eval_00000000000000000000", { token: owner.key.key }),
      404,
      "not_found",
    );
    await expectProblem(await call("/v1/evals/runs/run_x", { token: owner.key.key }), 404, "not_found");
    const list = await expectJson(await call("/v1/evals/runs", { token: stranger.key.key }), 200, EvalRunList);
    expect(list.runs).toEqual([]);
  });

  it("lists the org's runs newest first, by task set, each brought up to date", async () => {
    const owner = await createAccount();
    const first = await makeEval(owner, "noop", 1, 1);
    const second = await makeEval(owner, "oracle", 1, 2);
    await env.DB.prepare("UPDATE eval_runs SET taskset_id = 'tset_other00000000000000' WHERE id = ?")
      .bind(first.evalId)
      .run();
    let list = await expectJson(await call("/v1/evals/runs", { token: owner.key.key }), 200, EvalRunList);
    expect(list.runs.map((r) => [r.id, r.status])).toEqual([
      [second.evalId, "running"],
      [first.evalId, "running"],
    ]);
    await play(second, [[{ reward: 1 }, { reward: 1 }]]);
    list = await expectJson(
      await call(`/v1/evals/runs?taskset=${TASKSET}&limit=1`, { token: owner.key.key }),
      200,
      EvalRunList,
    );
    expect(list.runs.map((r) => [r.id, r.status, r.attempts, r.agent, r.model])).toEqual([
      [second.evalId, "ended", 2, "oracle", null],
    ]);
    expect(list.runs[0]!.endedAt).not.toBeNull();
    await expectProblem(await call("/v1/evals/runs?limit=0", { token: owner.key.key }), 400, "invalid_request");
    await expectProblem(await call("/v1/evals/runs?limit=101", { token: owner.key.key }), 400, "invalid_request");
    await expectProblem(await call("/v1/evals/runs?surprise=1", { token: owner.key.key }), 400, "invalid_request");
  });
});

describe("an eval run's lake rows", () => {
  /** The eval's `eval_attempts` rows, once `n` have landed (the queue's consumer takes its time). */
  async function rowsOf(account: Account, evalId: string, createdAt: string, n: number) {
    const { day, hour } = partitionOf("eval_attempts", Date.parse(createdAt));
    const deadline = Date.now() + 60_000;
    for (;;) {
      const res = await call(`/v1/envs/rows/eval_attempts?day=${day}&hour=${hour}&eval=${evalId}`, {
        token: account.key.key,
      });
      const rows = (await expectJson(res, 200, RowsAnswer)).rows;
      if (rows.length >= n) return rows;
      if (Date.now() > deadline) throw new Error(`${rows.length} of ${n} eval_attempts rows landed`);
      await scheduler.wait(200);
    }
  }

  it("holds one row per attempt, however often a member tells its end and across a restart", async () => {
    const owner = await createAccount();
    const pair = await generateOrgKeyPair();
    const registered = await call("/v1/envs/keys", {
      method: "PUT",
      token: owner.key.key,
      body: { publicKey: toBase64url(pair.publicKey) },
    });
    const { keyId } = await expectJson(registered, 200, OrgKey);
    const key = { keyId, publicKey: pair.publicKey };
    const made = await makeEval(owner, "model", 2, 2, { price: { input: 1, output: 4 } });
    const { run } = made;
    const log = (member: number) =>
      sealVerifierLog(key, owner.org.id, `${run.id}-${member}`, `1 failing (member ${member})`);
    const stub = () => stubOf(run.id);
    await stub().rolloutEnded(
      report(run, 0, { reward: 1, prompt: 300, completion: 20 }, { sealedVerifierLog: await log(0) }),
    );
    await stub().rolloutEnded(
      report(run, 0, { reward: 1, prompt: 300, completion: 20 }, { sealedVerifierLog: await log(0) }),
    );
    await stub().rolloutEnded(
      report(run, 1, { reward: 0, prompt: 200, completion: 10 }, { sealedVerifierLog: await log(1) }),
    );
    // Evicted between two ends: the next instance carries on from storage.
    await stub()
      .restart()
      .catch(() => undefined);
    for (let i = 0; ; i++)
      try {
        await stub().rolloutEnded(report(run, 2, { reward: 0, outcome: "wall_time" }));
        break;
      } catch (err) {
        if (i >= 5 || !/restarted by an operator/.test(String(err))) throw err;
      }
    await stub().rolloutEnded(report(run, 3, { reward: null, outcome: "model_error" }));
    await stub().rolloutEnded(report(run, 1, { reward: 1 }));

    const createdAt = (await stub().evalAttempts(owner.org.id)) as { ok: true; value: { createdAt: string } };
    const rows = await rowsOf(owner, made.evalId, createdAt.value.createdAt, 4);
    // Time for any second copy to land too: none does.
    await scheduler.wait(2000);
    const again = await rowsOf(owner, made.evalId, createdAt.value.createdAt, 4);
    expect(again).toHaveLength(4);
    rows.sort((a, b) => Number(a.member) - Number(b.member));
    expect(rows.map((r) => r.attempt_id)).toEqual([0, 1, 2, 3].map((m) => `${made.evalId}.${m}`));
    const created = Date.parse(createdAt.value.createdAt);
    expect(rows[0]).toMatchObject({
      eval_id: made.evalId,
      run_id: run.id,
      org_id: owner.org.id,
      at: created,
      taskset: TASKSET,
      task_index: 0,
      task_sha256: SHA(1),
      attempt: 0,
      member: 0,
      agent: "model",
      model: "chat-simulated",
      checkpoint: "ckpt-3",
      reward: 1,
      passed: true,
      outcome: "finished",
      failure_kind: null,
      tokens: 1000,
      prompt_tokens: 300,
      completion_tokens: 20,
      turns: 3,
      tool_calls: 2,
      sandbox_seconds: 1.5,
      duration_ms: 2500,
      started_at: Date.parse("2026-01-01T00:00:00.000Z"),
      ended_at: Date.parse("2026-01-01T00:00:02.500Z"),
      content_key_id: keyId,
    });
    expect(Number(rows[0]!.cost_usd)).toBeCloseTo((300 * 1 + 20 * 4) / 1e6, 12);
    expect(rows.map((r) => [r.task_index, r.attempt, r.reward, r.failure_kind])).toEqual([
      [0, 0, 1, null],
      [0, 1, 0, "tests"],
      [1, 0, 0, "budget"],
      [1, 1, null, "error"],
    ]);
    // No tokens split and no verifier log came with the last two: no cost, nothing sealed.
    expect(rows[3]).toMatchObject({ cost_usd: null, prompt_tokens: null, content_key_id: null, verifier_log: null });
    // The log opens with the org's key, bound to its own attempt.
    const privateKey = await importPrivateKey(pair.privateJwk);
    const sealed = { content_key_id: keyId, content: String(rows[1]!.verifier_log) };
    expect(await openVerifierLog(privateKey, owner.org.id, `${run.id}-1`, sealed)).toBe("1 failing (member 1)");
    await expect(openVerifierLog(privateKey, owner.org.id, `${run.id}-0`, sealed)).rejects.toThrow();

    // Another org reads none of them.
    const stranger = await createAccount();
    const { day, hour } = partitionOf("eval_attempts", created);
    const theirs = await call(`/v1/envs/rows/eval_attempts?day=${day}&hour=${hour}`, { token: stranger.key.key });
    expect((await expectJson(theirs, 200, RowsAnswer)).rows).toEqual([]);
  });

  it("writes the rows of attempts the org's quota never let start", async () => {
    const owner = await createAccount();
    const made = await makeEval(owner, "model", 1, 3, { orgLimits: { concurrentTasks: 5, dailySandboxSeconds: 10 } });
    const played = await stubOf(made.run.id).evalAttempts(owner.org.id);
    if (!played.ok) throw new Error(played.message);
    const rows = await rowsOf(owner, made.evalId, played.value.createdAt, 3);
    expect(rows.map((r) => [r.outcome, r.reward, r.passed, r.failure_kind]).sort()).toEqual([
      ["quota", null, false, "quota"],
      ["quota", null, false, "quota"],
      ["quota", null, false, "quota"],
    ]);
    const got = await reportOf(owner, made.evalId);
    expect(got.summary).toMatchObject({ attempts: 3, passed: 0, passAt1: 0, failures: { quota: 3 } });
    // Every row was marked sent in the run's own storage.
    const unsent = await runInDurableObject(stubOf(made.run.id), (_o, state) =>
      state.storage.sql.exec("SELECT count(*) AS n FROM eval_attempts WHERE sent = 0").one(),
    );
    expect(unsent.n).toBe(0);
  });
});
