/**
 * Eval runs' manifests in D1 (`eval_runs`). The rollout run's object is where a run lives and ends;
 * its manifest is brought up to date by whoever reads it next (`settle`): a manifest still marked
 * running whose run has ended takes its end time and each task's mean reward, and its summary once
 * a report is built. So the object needs no D1 binding, and nothing can race a run that ends before
 * its manifest is written.
 */
import { and, desc, eq, inArray, sql } from "drizzle-orm";
import type { Context } from "hono";
import type { BrokenTask, EvalReport, EvalRun, EvalSummary } from "../../protocol/evals/api.js";
import type { EvalAttempts } from "../../durable-objects/env-run/eval-rows.js";
import type { AppEnv } from "../app-env.js";
import { database } from "../db/client.js";
import { evalRuns } from "../db/schema.js";
import { runStubOf } from "../envs/rollout-runs.js";
import { ApiError } from "../problem.js";
import { brokenTasks, evalReport, taskRewards } from "./report.js";

export type EvalRunRow = typeof evalRuns.$inferSelect;

/** `summary_json`: numbers only. */
interface StoredSummary {
  /** Each task's mean reward, by its index in the set. */
  rewards: Record<string, number | null>;
  summary?: EvalSummary;
}

/** Runs made in the same millisecond in the order they were made. */
const newestFirst = [desc(evalRuns.createdAt), desc(sql`rowid`)];

export const EVAL_ID = /^eval_[0-9a-z]{20}$/;

export function evalRunOf(row: EvalRunRow): EvalRun {
  return {
    id: row.id,
    status: row.status,
    taskset: row.tasksetId,
    agent: row.agent,
    model: row.model,
    checkpoint: row.checkpoint,
    attempts: row.attempts,
    concurrency: row.concurrency,
    price:
      row.priceInput === null || row.priceOutput === null ? null : { input: row.priceInput, output: row.priceOutput },
    rolloutRun: row.rolloutRunId,
    createdAt: row.createdAt.toISOString(),
    endedAt: row.endedAt?.toISOString() ?? null,
  };
}

const stored = (row: EvalRunRow): StoredSummary | null =>
  row.summaryJson ? (JSON.parse(row.summaryJson) as StoredSummary) : null;

/** The caller's eval run, or 404: another org's run is indistinguishable from a missing one. */
export async function ownEvalRun(c: Context<AppEnv>, id: string): Promise<EvalRunRow> {
  const missing = new ApiError("not_found", `No eval run \`${id}\` in your org.`);
  if (!EVAL_ID.test(id)) throw missing;
  const [row] = await database(c.env.DB)
    .select()
    .from(evalRuns)
    .where(and(eq(evalRuns.id, id), eq(evalRuns.orgId, c.get("principal").org.id)))
    .limit(1);
  if (!row) throw missing;
  return row;
}

/** The run's attempts as its rollout run holds them; null if that object has no such run. */
export async function playedOf(c: Context<AppEnv>, row: EvalRunRow): Promise<EvalAttempts | null> {
  const result = await runStubOf(c, row.rolloutRunId).evalAttempts(row.orgId);
  return result.ok ? result.value : null;
}

/** The manifest brought up to date with its run: marked ended, with each task's mean reward, once the run has ended. */
export async function settle(c: Context<AppEnv>, row: EvalRunRow, played?: EvalAttempts | null): Promise<EvalRunRow> {
  if (row.status !== "running") return row;
  const run = played === undefined ? await playedOf(c, row) : played;
  if (!run || run.status !== "ended") return row;
  const ended: Partial<EvalRunRow> = {
    status: "ended",
    endedAt: new Date(run.endedAt ?? Date.now()),
    summaryJson: JSON.stringify({ rewards: taskRewards(run) } satisfies StoredSummary),
  };
  await database(c.env.DB)
    .update(evalRuns)
    .set(ended)
    .where(and(eq(evalRuns.id, row.id), eq(evalRuns.status, "running")));
  return { ...row, ...ended };
}

/** Keeps an ended run's summary with its manifest, once. */
export async function keepSummary(c: Context<AppEnv>, row: EvalRunRow, summary: EvalSummary): Promise<void> {
  const kept = stored(row);
  if (row.status !== "ended" || !kept || kept.summary) return;
  await database(c.env.DB)
    .update(evalRuns)
    .set({ summaryJson: JSON.stringify({ ...kept, summary } satisfies StoredSummary) })
    .where(eq(evalRuns.id, row.id));
}

/** The task set's broken tasks, from the latest ended oracle and noop runs of it in the org. */
export async function brokenOf(c: Context<AppEnv>, orgId: string, taskset: string): Promise<Map<number, BrokenTask>> {
  const db = database(c.env.DB);
  const checks = and(
    eq(evalRuns.orgId, orgId),
    eq(evalRuns.tasksetId, taskset),
    inArray(evalRuns.agent, ["oracle", "noop"]),
  );
  const running = await db
    .select()
    .from(evalRuns)
    .where(and(checks, eq(evalRuns.status, "running")));
  for (const row of running) await settle(c, row);
  const latest = async (agent: "oracle" | "noop") => {
    const [row] = await db
      .select()
      .from(evalRuns)
      .where(and(checks, eq(evalRuns.agent, agent), eq(evalRuns.status, "ended")))
      .orderBy(...newestFirst)
      .limit(1);
    return row ? (stored(row)?.rewards ?? null) : null;
  };
  return brokenTasks(await latest("oracle"), await latest("noop"));
}

/**
 * The run's report as it stands (`GET /v1/evals/runs/{id}`, and the dashboard's): the manifest
 * brought up to date with its run, and its summary kept once the run has ended. Null when its
 * rollout run's object has no such run. `broken` reads the task set's broken tasks, by default
 * from its latest oracle and noop runs.
 */
export async function currentReport(
  c: Context<AppEnv>,
  row: EvalRunRow,
  broken: () => Promise<Map<number, BrokenTask>> = () => brokenOf(c, row.orgId, row.tasksetId),
): Promise<EvalReport | null> {
  const played = await playedOf(c, row);
  if (!played) return null;
  const current = await settle(c, row, played);
  const report = evalReport(evalRunOf(current), played, await broken());
  await keepSummary(c, current, report.summary);
  return report;
}

/** The org's eval runs, newest first, each brought up to date with its run. */
export async function listEvalRuns(
  c: Context<AppEnv>,
  query: { taskset?: string; limit: number },
): Promise<EvalRunRow[]> {
  const orgId = c.get("principal").org.id;
  const rows = await database(c.env.DB)
    .select()
    .from(evalRuns)
    .where(and(eq(evalRuns.orgId, orgId), query.taskset ? eq(evalRuns.tasksetId, query.taskset) : undefined))
    .orderBy(...newestFirst)
    .limit(query.limit);
  return Promise.all(rows.map((row) => settle(c, row)));
}
