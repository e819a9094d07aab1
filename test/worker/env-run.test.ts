/**
 * The rollout run object in workerd, with its real SQLite storage, alarms and the org's real quota
 * object. Its members' reports are sent as a member sends them (the `rolloutEnded` RPC); no sandbox
 * host runs here, so the members the run tries to make wait on retries while the reports arrive.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { CreateRun } from "../../durable-objects/env-run/env-run.js";
import type { RolloutEnded as MemberReport } from "../../protocol/envs/run.js";
import type { GroupEnded, RolloutEnded, RolloutEvent, RunSummary } from "../../protocol/envs/rollouts.js";
import { generateOrgKeyPair, importPrivateKey } from "../../protocol/envs/seal.js";
import { openVerifierLog, sealVerifierLog } from "../../protocol/envs/verifier-log.js";

const SHA = (n: number) => String(n).repeat(64).slice(0, 64);
let runs = 0;

function runInput(overrides: Partial<CreateRun> = {}): CreateRun {
  const id = `run_test${String(++runs).padStart(16, "0")}`;
  return {
    id,
    orgId: "org_run00000000000000000",
    userId: "usr_run00000000000000000",
    keyId: "key_run00000000000000000",
    taskset: "tset_run0000000000000000",
    tasks: [
      { index: 0, sha256: SHA(1) },
      { index: 3, sha256: SHA(2) },
    ],
    policy: { model: "chat-simulated", checkpoint: "step-100" },
    groupSize: 4,
    sampling: { temperature: 1, seed: 40 },
    limits: { sandboxSeconds: 60, wallSeconds: 120 },
    concurrency: 2,
    orgLimits: { concurrentTasks: 100, dailySandboxSeconds: 1_000_000 },
    ...overrides,
  };
}

const stubOf = (id: string) => env.ENV_RUN.get(env.ENV_RUN.idFromName(id));

function report(
  run: CreateRun,
  member: number,
  reward: number | null,
  extra: Partial<MemberReport> = {},
): MemberReport {
  return {
    runId: run.id,
    member,
    taskId: `${run.id}-${member}`,
    reward,
    components: reward === null ? {} : { reward, style: 0.5 },
    outcome: "finished",
    usage: { turns: 3, tokens: 1200, toolCalls: 4, sandboxSeconds: 1.5, outputBytes: 300 },
    startedAt: "2026-01-01T00:00:00.000Z",
    endedAt: "2026-01-01T00:00:02.500Z",
    ...extra,
  };
}

/** A call to a run just aborted: the first call may still meet the aborted instance, and is made again on a new stub. */
async function afterRestart<T>(call: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await call();
    } catch (err) {
      if (i >= 5 || !/restarted by an operator/.test(String(err))) throw err;
    }
  }
}

async function allEvents(run: CreateRun): Promise<RolloutEvent[]> {
  const page = await stubOf(run.id).events(run.orgId, 0);
  if (!page.ok) throw new Error(page.message);
  return page.value.events;
}

/** Polls until the run has ended (the bound only keeps a broken run from hanging the suite). */
async function ended(run: CreateRun): Promise<RolloutEvent[]> {
  for (let i = 0; i < 300; i++) {
    const events = await allEvents(run);
    if (events.at(-1)?.type === "summary") return events;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error("the run did not end");
}

describe("a rollout run object", () => {
  it("records each member's end once and gives each complete group its advantages", async () => {
    const run = runInput();
    const created = await stubOf(run.id).create(run);
    expect(created.members.map((m) => [m.group, m.groupIndex, m.seed])).toEqual([
      [0, 0, 40],
      [0, 1, 41],
      [0, 2, 42],
      [0, 3, 43],
      [1, 0, 40],
      [1, 1, 41],
      [1, 2, 42],
      [1, 3, 43],
    ]);
    // Creating it again (a retried request) answers the same run.
    expect((await stubOf(run.id).create({ ...run, groupSize: 9 })).members).toHaveLength(8);

    const first = [1, 0, 1, 1];
    for (const [i, r] of first.entries())
      expect(await stubOf(run.id).rolloutEnded(report(run, i, r))).toEqual({ recorded: true });
    // A member tells its end again (its first answer was lost): nothing changes.
    expect(await stubOf(run.id).rolloutEnded(report(run, 1, 1))).toEqual({ recorded: false });
    // Reports that are not this run's members' are refused.
    expect(await stubOf(run.id).rolloutEnded(report(run, 99, 1))).toEqual({ recorded: false });
    expect(await stubOf(run.id).rolloutEnded({ ...report(run, 4, 1), taskId: "task_other" })).toEqual({
      recorded: false,
    });
    expect(await stubOf(run.id).rolloutEnded({ ...report(run, 4, 1), runId: "run_other" })).toEqual({
      recorded: false,
    });

    let events = await allEvents(run);
    const groups = events.filter((e) => e.type === "group.ended").map((e) => e.data as GroupEnded);
    expect(groups).toHaveLength(1);
    expect(groups[0]).toMatchObject({ group: 0, members: [0, 1, 2, 3], rewards: first, mean: 0.75 });
    expect(groups[0]!.std).toBeCloseTo(Math.sqrt(0.1875), 12);
    // (r - 0.75) / (0.4330127 + 1e-6)
    expect(groups[0]!.advantages[0]).toBeCloseTo(0.5773489, 6);
    expect(groups[0]!.advantages[1]).toBeCloseTo(-1.7320468, 6);
    const member1 = events.find((e) => e.type === "rollout.ended" && (e.data as RolloutEnded).member === 1)!;
    expect(member1.data).toMatchObject({ reward: 0, turns: 3, tokens: 1200, durationMs: 2500, seed: 41 });
    expect(events.filter((e) => e.type === "rollout.ended")).toHaveLength(4);

    // Evicted mid-run: the next instance carries on from storage.
    await stubOf(run.id)
      .restart()
      .catch(() => undefined);
    await afterRestart(async () => {
      await stubOf(run.id).get(run.orgId);
    });
    // The second group: one member never verified (no reward), so the others' advantages are over three.
    for (const [i, r] of [0.5, null, 0.5, 1].entries())
      await stubOf(run.id).rolloutEnded(
        report(run, 4 + i, r, r === null ? { verifyError: "The rollout's sandbox is gone." } : {}),
      );
    events = await allEvents(run);
    expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i + 1));
    const second = events.filter((e) => e.type === "group.ended").map((e) => e.data as GroupEnded)[1]!;
    expect(second.rewards).toEqual([0.5, null, 0.5, 1]);
    // [0.5, 0.5, 1]: mean 2/3, std sqrt(1/18) = 0.2357023; -1/6 / 0.2357033 = -0.7071038, 1/3 / 0.2357033 = 1.4142076.
    expect(second.advantages[1]).toBeNull();
    expect(second.advantages[0]).toBeCloseTo(-0.7071038, 6);
    expect(second.advantages[2]).toBeCloseTo(-0.7071038, 6);
    expect(second.advantages[3]).toBeCloseTo(1.4142076, 6);

    const summary = events.at(-1)!;
    expect(summary.type).toBe("summary");
    expect(summary.data as RunSummary).toMatchObject({
      rollouts: 8,
      ended: 8,
      verified: 7,
      solved: 4,
      groups: 2,
      outcomes: { finished: 8 },
      tokens: 9600,
      turns: 24,
    });
    expect((summary.data as RunSummary).meanReward).toBeCloseTo(5 / 7, 12);

    const view = await stubOf(run.id).get(run.orgId);
    expect(view.ok && view.value.status).toBe("ended");
    if (!view.ok) return;
    expect(view.value.summary).toEqual(summary.data);
    expect(view.value.members.map((m) => m.advantage?.toFixed(4) ?? null)).toEqual([
      "0.5773",
      "-1.7320",
      "0.5773",
      "0.5773",
      "-0.7071",
      null,
      "-0.7071",
      "1.4142",
    ]);
    // Every member is started once in the log, before its end, however the end arrived.
    for (let m = 0; m < 8; m++) {
      const of = (type: string) =>
        events.findIndex((e) => e.type === type && (e.data as { member?: number }).member === m);
      expect(of("rollout.started")).toBeGreaterThan(-1);
      expect(of("rollout.started")).toBeLessThan(of("rollout.ended"));
      expect(
        events.filter((e) => e.type === "rollout.started" && (e.data as { member: number }).member === m),
      ).toHaveLength(1);
    }
  });

  it("is a missing run to another org", async () => {
    const run = runInput();
    await stubOf(run.id).create(run);
    expect(await stubOf(run.id).get("org_someoneelse000000000")).toMatchObject({ ok: false, code: "not_found" });
    expect(await stubOf(run.id).events("org_someoneelse000000000", 0)).toMatchObject({ ok: false, code: "not_found" });
    expect(await stubOf("run_nobody00000000000000").get(run.orgId)).toMatchObject({ ok: false, code: "not_found" });
  });

  it("ends members the org's daily sandbox time cannot pay for, and the run with them", async () => {
    const run = runInput({
      orgId: "org_poor0000000000000000",
      orgLimits: { concurrentTasks: 5, dailySandboxSeconds: 10 },
    });
    await stubOf(run.id).create(run);
    const events = await ended(run);
    const ends = events.filter((e) => e.type === "rollout.ended").map((e) => e.data as RolloutEnded);
    expect(ends).toHaveLength(8);
    for (const e of ends) expect(e).toMatchObject({ reward: null, outcome: "quota" });
    for (const g of events.filter((e) => e.type === "group.ended"))
      expect((g.data as GroupEnded).advantages).toEqual([null, null, null, null]);
    expect(events.at(-1)!.data).toMatchObject({ rollouts: 8, verified: 0, meanReward: null, outcomes: { quota: 8 } });
  });

  it("keeps hashes, seeds and numbers, and nothing of a task's content", async () => {
    const run = runInput();
    await stubOf(run.id).create(run);
    for (let m = 0; m < 8; m++) await stubOf(run.id).rolloutEnded(report(run, m, m % 2));
    const tables = await runInDurableObject(stubOf(run.id), (_object, state) =>
      ["run", "members", "events"].map((t) => state.storage.sql.exec(`SELECT * FROM ${t}`).toArray()),
    );
    const text = JSON.stringify(tables);
    // What a run is told holds no instruction, file or conversation: only these kinds of value.
    expect(text).toContain(SHA(1));
    expect(text).not.toMatch(/instruction|content|messages/i);
  });

  it("keeps each member's verifier log as the sealed value its first report carried, and no more", async () => {
    const run = runInput();
    await stubOf(run.id).create(run);
    const pair = await generateOrgKeyPair();
    const orgKey = { keyId: "k-logs", publicKey: pair.publicKey };
    const log = (m: number) => `not ok 1 - verifier-says-${m} in src/hidden.js\npassed 0 of 1\n`;
    const sealed = await Promise.all([0, 1].map((m) => sealVerifierLog(orgKey, run.orgId, `${run.id}-${m}`, log(m))));
    await stubOf(run.id).rolloutEnded(report(run, 0, 0, { sealedVerifierLog: sealed[0] }));
    await stubOf(run.id).rolloutEnded(report(run, 1, 0, { sealedVerifierLog: sealed[1] }));
    // A repeat of member 1's report with another log changes nothing; member 2 came without one.
    const other = await sealVerifierLog(orgKey, run.orgId, `${run.id}-1`, "another log");
    await stubOf(run.id).rolloutEnded(report(run, 1, 0, { sealedVerifierLog: other }));
    await stubOf(run.id).rolloutEnded(report(run, 2, 1));
    const { rows, text } = await runInDurableObject(stubOf(run.id), (_object, state) => {
      const sql = state.storage.sql;
      const tables = sql
        .exec<{ name: string }>(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'",
        )
        .toArray()
        .map((t) => sql.exec(`SELECT * FROM ${t.name}`).toArray());
      return {
        rows: sql.exec("SELECT member, key_id, sealed FROM member_verifier_log ORDER BY member").toArray(),
        text: JSON.stringify(tables),
      };
    });
    expect(rows).toEqual([
      { member: 0, key_id: "k-logs", sealed: sealed[0]!.content },
      { member: 1, key_id: "k-logs", sealed: sealed[1]!.content },
    ]);
    expect(text).not.toMatch(/verifier-says|hidden\.js|passed 0 of/);
    const key = await importPrivateKey(pair.privateJwk);
    const kept = { content_key_id: rows[1]!.key_id as string, content: rows[1]!.sealed as string };
    expect(await openVerifierLog(key, run.orgId, `${run.id}-1`, kept)).toBe(log(1));
  });
});
