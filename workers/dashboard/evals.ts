/**
 * The dashboard's eval runs: every org's, as the operator sees everything. A run's report is built
 * as its owner's `GET /v1/evals/runs/{id}` builds it (the manifest brought up to date with its run,
 * the task set's broken tasks from its oracle and noop runs, `evalReport`), and two runs are
 * compared by `compareRuns` with its defaults, as `sextant eval compare` compares them, so the
 * dashboard, the API and the CLI give one set of figures.
 */
import { and, desc, eq, gte, lte, sql } from "drizzle-orm";
import type { Context } from "hono";
import {
  EVAL_RUNS_SHOWN,
  type DashboardEvalComparison,
  type DashboardEvalReport,
  type DashboardEvalRun,
} from "../../protocol/dashboard.js";
import { EvalSummary, type BrokenTask } from "../../protocol/evals/api.js";
import { compareRuns } from "../../protocol/evals/stats.js";
import type { AppEnv } from "../app-env.js";
import { database } from "../db/client.js";
import { evalRuns, orgs } from "../db/schema.js";
import { brokenOf, currentReport, EVAL_ID, evalRunOf, type EvalRunRow } from "../evals/runs.js";
import { ApiError } from "../problem.js";

type OwnedRow = { run: EvalRunRow; orgName: string };

/** The task sets' broken tasks, read once per org and task set however many of its runs are shown. */
type BrokenCache = Map<string, Promise<Map<number, BrokenTask>>>;

function brokenFor(c: Context<AppEnv>, cache: BrokenCache, row: EvalRunRow): Promise<Map<number, BrokenTask>> {
  const key = `${row.orgId}\0${row.tasksetId}`;
  let broken = cache.get(key);
  if (!broken) cache.set(key, (broken = brokenOf(c, row.orgId, row.tasksetId)));
  return broken;
}

/** The run's report as its owner would get it now; null when its rollout run cannot be read. */
const reportFor = (c: Context<AppEnv>, row: EvalRunRow, cache: BrokenCache) =>
  currentReport(c, row, () => brokenFor(c, cache, row));

/** The summary an ended run's manifest kept, if it kept one. */
function keptSummary(row: EvalRunRow): EvalSummary | null {
  if (row.status !== "ended" || !row.summaryJson) return null;
  const parsed = EvalSummary.safeParse((JSON.parse(row.summaryJson) as { summary?: unknown }).summary);
  return parsed.success ? parsed.data : null;
}

/** The eval runs made between `from` and `to`, newest first, each with its figures. */
export async function evalRunsBetween(c: Context<AppEnv>, from: Date, to: Date): Promise<DashboardEvalRun[]> {
  const rows: OwnedRow[] = await database(c.env.DB)
    .select({ run: evalRuns, orgName: orgs.name })
    .from(evalRuns)
    .innerJoin(orgs, eq(orgs.id, evalRuns.orgId))
    .where(and(gte(evalRuns.createdAt, from), lte(evalRuns.createdAt, to)))
    .orderBy(desc(evalRuns.createdAt), desc(sql`${evalRuns}.rowid`))
    .limit(EVAL_RUNS_SHOWN);
  const cache: BrokenCache = new Map();
  return Promise.all(
    rows.map(async ({ run, orgName }) => {
      const owner = { orgId: run.orgId, orgName };
      // An ended run keeps its figures once its report is built; a running one's are built each time.
      const kept = keptSummary(run);
      if (kept) return { ...evalRunOf(run), ...owner, summary: kept };
      const report = await reportFor(c, run, cache);
      if (!report) return { ...evalRunOf(run), ...owner, summary: null };
      const { tasks: _tasks, summary, ...manifest } = report;
      return { ...manifest, ...owner, summary };
    }),
  );
}

/** Any org's run, reported; 404 when there is no such run or its rollout run cannot be read. */
export async function dashboardEvalReport(
  c: Context<AppEnv>,
  id: string,
  cache: BrokenCache = new Map(),
): Promise<DashboardEvalReport> {
  const missing = new ApiError("not_found", `No eval run \`${id}\`.`);
  if (!EVAL_ID.test(id)) throw missing;
  const [found] = await database(c.env.DB)
    .select({ run: evalRuns, orgName: orgs.name })
    .from(evalRuns)
    .innerJoin(orgs, eq(orgs.id, evalRuns.orgId))
    .where(eq(evalRuns.id, id))
    .limit(1);
  if (!found) throw missing;
  const report = await reportFor(c, found.run, cache);
  if (!report) throw missing;
  return { ...report, orgId: found.run.orgId, orgName: found.orgName };
}

/** Run `b` against run `a`, task by task. */
export async function dashboardEvalComparison(
  c: Context<AppEnv>,
  a: string,
  b: string,
): Promise<DashboardEvalComparison> {
  const cache: BrokenCache = new Map();
  const [reportA, reportB] = await Promise.all([dashboardEvalReport(c, a, cache), dashboardEvalReport(c, b, cache)]);
  return { a: reportA, b: reportB, comparison: compareRuns(reportA, reportB) };
}
