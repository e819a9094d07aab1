/**
 * What the operator's dashboard shows, computed at the edge: tab acceptance and latency from the
 * lake's Parquet files (the same files a data team queries, so the figures agree with theirs), usage
 * and agent tasks from D1, abuse throttles, rate-limit refusals, the gateway's health and the eval
 * runs of the window (evals.ts).
 *
 * Definitions, stated once (docs/data-pipeline.md, "The operator's dashboard"):
 * - acceptance rate: `tab.accepted` events over `tab.shown` events;
 * - latency: `ttft_ms` and `total_ms` of `edge_requests` rows with `class = 'tab'` and
 *   `outcome = 'completed'`, as discrete percentiles (DuckDB's `quantile_disc`).
 */
import { and, desc, eq, gte, lte, sql } from "drizzle-orm";
import type { Context } from "hono";
import { USAGE_DAYS, type DashboardData, type TabFigures } from "../../protocol/dashboard.js";
import type { GatewayStatus } from "../../protocol/gateway.js";
import { listThrottles } from "../db/abuse.js";
import { database } from "../db/client.js";
import { agentTasks, apiKeys, orgs, usageDaily } from "../db/schema.js";
import type { LakeRow } from "../../protocol/lake.js";
import type { AppEnv } from "../app-env.js";
import { readDay } from "../lake/read.js";
import { ApiError } from "../problem.js";
import { gatewayStatus } from "../routes/admin/gateway.js";
import { evalRunsBetween } from "./evals.js";

const DAY_MS = 86_400_000;

/** DuckDB's `quantile_disc`: the smallest value with at least `q` of the values at or below it. */
export function quantileDisc(sorted: readonly number[], q: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

function tabFigures(events: LakeRow[], requests: { ttft_ms: unknown; total_ms: unknown }[]): TabFigures {
  let shown = 0;
  let accepted = 0;
  for (const e of events) {
    if (e.type === "tab.shown") shown += 1;
    else if (e.type === "tab.accepted") accepted += 1;
  }
  const numbers = (values: unknown[]) => values.filter((v): v is number => typeof v === "number").sort((a, b) => a - b);
  const ttft = numbers(requests.map((r) => r.ttft_ms));
  const total = numbers(requests.map((r) => r.total_ms));
  return {
    shown,
    accepted,
    acceptanceRate: shown > 0 ? accepted / shown : null,
    requests: requests.length,
    ttftP50: quantileDisc(ttft, 0.5),
    ttftP95: quantileDisc(ttft, 0.95),
    totalP50: quantileDisc(total, 0.5),
    totalP95: quantileDisc(total, 0.95),
  };
}

const shiftDay = (day: string, days: number) => new Date(Date.parse(day) + days * DAY_MS).toISOString().slice(0, 10);

async function safeGateway(env: Env): Promise<GatewayStatus | { error: string }> {
  try {
    return await gatewayStatus(env);
  } catch (err) {
    return { error: err instanceof ApiError ? err.detail : "The gateway's status could not be read." };
  }
}

export async function dashboardData(c: Context<AppEnv>, day: string): Promise<DashboardData> {
  const env = c.env;
  const db = database(env.DB);
  const from = shiftDay(day, 1 - USAGE_DAYS);
  const [events, requests, refusals, usageRows, tasks, throttles, gateway, evalRuns] = await Promise.all([
    readDay(env.LAKE, "editor_events", day, ["type", "outcome"]),
    readDay(env.LAKE, "edge_requests", day, ["class", "outcome", "ttft_ms", "total_ms"]),
    readDay(env.LAKE, "refusals", day, ["class", "limit"]),
    db
      .select({
        day: usageDaily.day,
        orgId: usageDaily.orgId,
        orgName: orgs.name,
        keyId: usageDaily.keyId,
        keyName: apiKeys.name,
        keyPrefix: apiKeys.prefix,
        model: usageDaily.model,
        requests: usageDaily.requests,
        promptTokens: usageDaily.promptTokens,
        completionTokens: usageDaily.completionTokens,
      })
      .from(usageDaily)
      .innerJoin(orgs, eq(orgs.id, usageDaily.orgId))
      // A left join: usage outlives a key deleted with its user, and keeps its row.
      .leftJoin(apiKeys, eq(apiKeys.id, usageDaily.keyId))
      .where(and(gte(usageDaily.day, from), lte(usageDaily.day, day)))
      .orderBy(desc(usageDaily.day), desc(usageDaily.completionTokens))
      .limit(500),
    db
      .select({
        day: sql<string>`strftime('%Y-%m-%d', ${agentTasks.createdAt} / 1000, 'unixepoch')`,
        tasks: sql<number>`count(*)`.mapWith(Number),
      })
      .from(agentTasks)
      .where(
        and(
          gte(agentTasks.createdAt, new Date(Date.parse(from))),
          lte(agentTasks.createdAt, new Date(Date.parse(day) + DAY_MS - 1)),
        ),
      )
      .groupBy(sql`1`),
    listThrottles(db),
    safeGateway(env),
    evalRunsBetween(c, new Date(Date.parse(from)), new Date(Date.parse(day) + DAY_MS - 1)),
  ]);

  const tabRequests = (rows: Record<string, unknown>[]) =>
    rows.filter((r) => r.class === "tab" && r.outcome === "completed") as { ttft_ms: unknown; total_ms: unknown }[];
  const hours = [...new Set([...events.keys(), ...requests.keys()])].sort();
  const allEvents = [...events.values()].flat();
  const allRequests = tabRequests([...requests.values()].flat());

  const byModel = new Map<string, { day: string; model: string; requests: number; tokens: number }>();
  for (const row of usageRows) {
    const id = `${row.day}\0${row.model}`;
    const cell = byModel.get(id) ?? { day: row.day, model: row.model, requests: 0, tokens: 0 };
    cell.requests += row.requests;
    cell.tokens += row.promptTokens + row.completionTokens;
    byModel.set(id, cell);
  }

  const byLimit: Record<string, number> = {};
  let refusalTotal = 0;
  const refusalHours = [...refusals.entries()].map(([hour, rows]) => {
    const byClass: Record<string, number> = {};
    for (const row of rows) {
      const cls = typeof row.class === "string" ? row.class : "unknown";
      byClass[cls] = (byClass[cls] ?? 0) + 1;
      const limit = typeof row.limit === "string" ? row.limit : "shed";
      byLimit[limit] = (byLimit[limit] ?? 0) + 1;
      refusalTotal += 1;
    }
    return { hour, byClass };
  });

  const days = Array.from({ length: USAGE_DAYS }, (_, i) => shiftDay(from, i));
  const tasksByDay = new Map(tasks.map((t) => [t.day, t.tasks]));

  const outcomes: Record<string, number> = {};
  for (const e of allEvents)
    if (e.type === "agent.outcome" && typeof e.outcome === "string")
      outcomes[e.outcome] = (outcomes[e.outcome] ?? 0) + 1;

  return {
    day,
    generatedAt: new Date().toISOString(),
    tab: {
      day: tabFigures(allEvents, allRequests),
      hours: hours.map((hour) => ({
        hour,
        ...tabFigures(events.get(hour) ?? [], tabRequests(requests.get(hour) ?? [])),
      })),
    },
    usage: {
      days,
      byModel: [...byModel.values()].sort((a, b) => a.day.localeCompare(b.day) || a.model.localeCompare(b.model)),
      rows: usageRows,
    },
    refusals: { total: refusalTotal, hours: refusalHours, byLimit },
    throttles,
    agents: { createdByDay: days.map((d) => ({ day: d, tasks: tasksByDay.get(d) ?? 0 })), outcomes },
    gateway,
    evals: { runs: evalRuns },
  };
}
