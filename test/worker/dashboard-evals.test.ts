/**
 * The dashboard's Evals panel's data, in workerd with real D1 and the rollout runs' objects: every
 * org's eval runs of the window with their figures (worked by hand here), any org's run reported as
 * its owner's `GET /v1/evals/runs/{id}` reports it, and two runs compared as the CLI and SDK compare
 * them. The runs are made as `POST /v1/evals/runs` makes them (no sandbox host runs in these tests),
 * and each member's end is told to its run as members tell it.
 */
import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { CreateRun } from "../../durable-objects/env-run/env-run.js";
import type { DashboardData, DashboardEvalComparison, DashboardEvalReport } from "../../protocol/dashboard.js";
import type { RolloutEnded as MemberReport } from "../../protocol/envs/run.js";
import { EvalReport, type EvalAgent } from "../../protocol/evals/api.js";
import { compareRuns } from "../../protocol/evals/stats.js";
import { newId } from "../../protocol/ids.js";
import { SESSION_COOKIE } from "../../workers/dashboard/session.js";
import { adminCall, call, createAccount, expectJson, expectProblem, ORIGIN, type Account } from "./harness.js";

const SHA = (n: number) => String(n).repeat(64).slice(0, 64);
const TASKSET = "tset_dashevals0000000000";
const DAY_MS = 86_400_000;
const stubOf = (id: string) => env.ENV_RUN.get(env.ENV_RUN.idFromName(id));

interface Made {
  evalId: string;
  run: CreateRun;
}

/** An eval run as `POST /v1/evals/runs` makes one: its manifest, then its rollout run. */
async function makeEval(
  account: Account,
  options: { agent?: EvalAgent; checkpoint?: string | null; tasks?: number; attempts?: number; createdAt?: number },
): Promise<Made> {
  const agent = options.agent ?? "model";
  const tasks = options.tasks ?? 2;
  const attempts = options.attempts ?? 2;
  const checkpoint = options.checkpoint === undefined ? "ckpt-1" : options.checkpoint;
  const evalId = newId("eval");
  const run: CreateRun = {
    id: `run_${newId("task").slice(5)}`,
    orgId: account.org.id,
    userId: account.user.id,
    keyId: account.key.id,
    taskset: TASKSET,
    tasks: Array.from({ length: tasks }, (_, i) => ({ index: i, sha256: SHA(i + 1) })),
    policy: { model: agent === "model" ? "chat-simulated" : agent, ...(checkpoint ? { checkpoint } : {}) },
    agent,
    groupSize: attempts,
    sampling: {},
    limits: { sandboxSeconds: 60, wallSeconds: 120 },
    concurrency: 1,
    orgLimits: { concurrentTasks: 100, dailySandboxSeconds: 1_000_000 },
    eval: { id: evalId, price: { input: 2, output: 10 } },
  };
  await env.DB.prepare(
    `INSERT INTO eval_runs (id, org_id, taskset_id, rollout_run_id, agent, model, checkpoint, attempts, concurrency,
       price_input, price_output, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, 2, 10, ?)`,
  )
    .bind(
      evalId,
      account.org.id,
      TASKSET,
      run.id,
      agent,
      agent === "model" ? "chat-simulated" : null,
      checkpoint,
      attempts,
      options.createdAt ?? Date.now(),
    )
    .run();
  await stubOf(run.id).create(run);
  return { evalId, run };
}

/** Tells the run each member's reward, task by task, each task's attempts in order. */
async function play(made: Made, rewards: (number | null)[][]): Promise<void> {
  let member = 0;
  for (const task of rewards)
    for (const reward of task) {
      const report: MemberReport = {
        runId: made.run.id,
        member,
        taskId: `${made.run.id}-${member}`,
        reward,
        components: reward === null ? {} : { reward },
        outcome: "finished",
        ...(reward === null ? { verifyError: "The rollout's sandbox is gone." } : {}),
        usage: { turns: 2, tokens: 100 + member, toolCalls: 1, sandboxSeconds: 1, outputBytes: 10 },
        startedAt: "2026-01-01T00:00:00.000Z",
        endedAt: `2026-01-01T00:00:0${1 + (member % 5)}.000Z`,
        promptTokens: 80,
        completionTokens: 20 + member,
      };
      await stubOf(made.run.id).rolloutEnded(report);
      member++;
    }
}

const today = () => new Date().toISOString().slice(0, 10);
const dataOf = async (day = today()) => (await (await adminCall(`/dashboard/data?day=${day}`)).json()) as DashboardData;
const ownerReport = async (account: Account, id: string) =>
  expectJson(await call(`/v1/evals/runs/${id}`, { token: account.key.key }), 200, EvalReport);

async function namedAccount(name: string): Promise<Account> {
  const account = await createAccount();
  expect((await adminCall(`/orgs/${account.org.id}`, { method: "PATCH", body: { name } })).status).toBe(200);
  return account;
}

describe("the dashboard's eval runs", () => {
  it("lists every org's runs of the window, newest first, with their settings, org and figures", async () => {
    const north = await namedAccount("North Lab");
    const south = await namedAccount("South Lab");
    const old = await makeEval(north, { createdAt: Date.now() - 20 * DAY_MS });
    await play(old, [
      [1, 1],
      [1, 1],
    ]);
    const first = await makeEval(north, { checkpoint: "ckpt-1" });
    // pass@1 (1 + 1/2) / 2; pass@2 (1 + 1) / 2; mean reward 3/4.
    await play(first, [
      [1, 1],
      [1, 0],
    ]);
    const second = await makeEval(south, { checkpoint: "ckpt-2" });
    // pass@1 (1/2 + 0) / 2; pass@2 (1 + 0) / 2; mean reward, the unverified attempt scoring 0, 1/4.
    await play(second, [
      [0, 1],
      [null, 0],
    ]);
    const running = await makeEval(north, { agent: "oracle", checkpoint: null, attempts: 1 });
    await play(running, [[1]]);

    const data = await dataOf();
    const ours = data.evals.runs.filter((r) => [north.org.id, south.org.id].includes(r.orgId));
    expect(ours.map((r) => [r.id, r.orgName, r.status, r.agent, r.model, r.checkpoint, r.attempts])).toEqual([
      [running.evalId, "North Lab", "running", "oracle", null, null, 1],
      [second.evalId, "South Lab", "ended", "model", "chat-simulated", "ckpt-2", 2],
      [first.evalId, "North Lab", "ended", "model", "chat-simulated", "ckpt-1", 2],
    ]);
    const [r, s, f] = ours;
    expect(f!.summary).toMatchObject({ tasks: 2, counted: 2, attempts: 4, passed: 3, passAtK: { k: 2, value: 1 } });
    expect(f!.summary!.passAt1).toBeCloseTo(0.75, 12);
    expect(f!.summary!.meanReward).toBeCloseTo(0.75, 12);
    expect(s!.summary).toMatchObject({ passed: 1, passAtK: { k: 2, value: 0.5 }, failures: { tests: 2, error: 1 } });
    expect(s!.summary!.passAt1).toBeCloseTo(0.25, 12);
    expect(s!.summary!.meanReward).toBeCloseTo(0.25, 12);
    // A running run's figures are its attempts so far: task 1 has none, so no pass@1 yet.
    expect(r!.summary).toMatchObject({ tasks: 2, attempts: 1, passed: 1, passAt1: null });
    expect(r!.endedAt).toBeNull();
    // Each listed figure is what the run's owner is told.
    for (const [account, run] of [
      [north, f],
      [south, s],
    ] as const)
      expect(run!.summary).toEqual((await ownerReport(account, run!.id)).summary);
    // Cost: 4 attempts of 80 prompt tokens at $2 and 20..23 completion tokens at $10 a million.
    expect(f!.summary!.costUsd).toBeCloseTo((4 * 80 * 2 + (20 + 21 + 22 + 23) * 10) / 1e6, 12);

    // Twenty days ago is outside today's window, and inside that day's.
    const then = new Date(Date.now() - 20 * DAY_MS).toISOString().slice(0, 10);
    expect((await dataOf(then)).evals.runs.map((r) => r.id)).toContain(old.evalId);
    expect(data.evals.runs.map((r) => r.id)).not.toContain(old.evalId);
  });

  it("reports any org's run as its owner is told it, and compares two runs as the CLI does", async () => {
    const north = await namedAccount("North Lab");
    const south = await namedAccount("South Lab");
    const a = await makeEval(north, { tasks: 3, checkpoint: "ckpt-1" });
    await play(a, [
      [1, 1],
      [1, 0],
      [0, 0],
    ]);
    const b = await makeEval(south, { tasks: 2, checkpoint: "ckpt-2" });
    await play(b, [
      [1, 0],
      [1, 1],
    ]);
    const reportA = await ownerReport(north, a.evalId);
    const reportB = await ownerReport(south, b.evalId);

    const got = (await (await adminCall(`/dashboard/evals/${a.evalId}`)).json()) as DashboardEvalReport;
    expect(got).toEqual({ ...reportA, orgId: north.org.id, orgName: "North Lab" });

    const res = await adminCall(`/dashboard/evals/compare?a=${a.evalId}&b=${b.evalId}`);
    expect(res.headers.get("Cache-Control")).toBe("no-store");
    const compared = (await res.json()) as DashboardEvalComparison;
    expect(compared.a.id).toBe(a.evalId);
    expect(compared.b).toEqual({ ...reportB, orgId: south.org.id, orgName: "South Lab" });
    expect(compared.comparison).toEqual(compareRuns(reportA, reportB));
    // Task 0: 1 against 1/2, a loss; task 1: 1/2 against 1, a win; task 2 only in a.
    expect(compared.comparison.tasks.map((t) => [t.indexA, t.passAt1A, t.passAt1B, t.result])).toEqual([
      [0, 1, 0.5, "loss"],
      [1, 0.5, 1, "win"],
    ]);
    expect(compared.comparison.onlyA).toEqual([{ index: 2, sha256: SHA(3) }]);
    expect(compared.comparison.difference).toBe(0);
    expect(compared.comparison.interval).toMatchObject({ low: -0.5, high: 0.5, resamples: 10_000, seed: 0 });

    // A run against itself: no difference, and an interval of nothing else.
    const self = (await (
      await adminCall(`/dashboard/evals/compare?a=${b.evalId}&b=${b.evalId}`)
    ).json()) as DashboardEvalComparison;
    expect(self.comparison).toMatchObject({ wins: 0, losses: 0, ties: 2, difference: 0 });
    expect(self.comparison.interval).toMatchObject({ low: 0, high: 0 });
  });

  it("answers only the admin secret or a session, and a missing run is 404", async () => {
    const owner = await createAccount();
    const made = await makeEval(owner, { tasks: 1, attempts: 1 });
    await play(made, [[1]]);
    const paths = [
      `/admin/dashboard/evals/${made.evalId}`,
      `/admin/dashboard/evals/compare?a=${made.evalId}&b=${made.evalId}`,
    ];
    for (const path of paths) {
      await expectProblem(await call(path), 401, "unauthenticated");
      await expectProblem(
        await call(path, { token: "not-the-admin-secret-at-all-0123456789" }),
        401,
        "unauthenticated",
      );
      // An org's own API key opens none of it: the dashboard is the operator's.
      await expectProblem(await call(path, { token: owner.key.key }), 401, "unauthenticated");
      await expectProblem(
        await SELF.fetch(`${ORIGIN}${path}`, { headers: { Cookie: `${SESSION_COOKIE}=1.abc` } }),
        401,
        "unauthenticated",
      );
      expect((await adminCall(path.slice("/admin".length))).status).toBe(200);
    }
    const missing = "eval_00000000000000000000";
    await expectProblem(await adminCall(`/dashboard/evals/${missing}`), 404, "not_found");
    await expectProblem(await adminCall("/dashboard/evals/run_x"), 404, "not_found");
    await expectProblem(await adminCall(`/dashboard/evals/compare?a=${made.evalId}&b=${missing}`), 404, "not_found");
    await expectProblem(await adminCall(`/dashboard/evals/compare?a=${made.evalId}`), 400, "invalid_request");
    await expectProblem(await adminCall(`/dashboard/evals/compare?a=${made.evalId}&b=x`), 400, "invalid_request");
    // Unauthenticated first: a stranger learns nothing of which ids are well formed.
    await expectProblem(await call(`/admin/dashboard/evals/compare?a=x`), 401, "unauthenticated");
  });

  it("serves the panel's script as a script of its own origin, and lets the page fetch its comparisons", async () => {
    const script = await SELF.fetch(`${ORIGIN}/admin/dashboard/assets/evals.js`);
    expect(script.status).toBe(200);
    expect(script.headers.get("Content-Type")).toBe("text/javascript; charset=utf-8");
    expect(await script.text()).toContain("/admin/dashboard/evals/compare");
    const page = await adminCall("/dashboard");
    expect(page.headers.get("Content-Security-Policy")).toContain("connect-src 'self'");
    expect(await page.text()).toContain('<script src="/admin/dashboard/assets/evals.js"></script>');
  });
});
