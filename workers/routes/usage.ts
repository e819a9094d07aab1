import { and, asc, between, eq, sql, type SQL } from "drizzle-orm";
import type { SQLiteColumn } from "drizzle-orm/sqlite-core";
import { Hono } from "hono";
import { z } from "zod";
import { UsageDay, UsageDimension, type UsageCounts, type UsageReport, type UsageRow } from "../../protocol/schemas.js";
import type { AppEnv } from "../app-env.js";
import { database } from "../db/client.js";
import { usageDaily } from "../db/schema.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { ApiError } from "../problem.js";
import { validated } from "../middleware/json-body.js";

const DAY_MS = 86_400_000;
const DEFAULT_DAYS = 30;
const MAX_DAYS = 366;

/** Each dimension a report can be grouped by: its column and its field in a row. */
const DIMENSIONS = {
  day: { column: usageDaily.day, field: "day" },
  model: { column: usageDaily.model, field: "model" },
  key: { column: usageDaily.keyId, field: "keyId" },
  user: { column: usageDaily.userId, field: "userId" },
} as const satisfies Record<UsageDimension, { column: SQLiteColumn; field: keyof UsageRow }>;

const Query = z.strictObject({
  from: UsageDay.optional(),
  to: UsageDay.optional(),
  groupBy: z
    .string()
    .transform((list) => [...new Set(list.split(",").map((d) => d.trim()))].filter(Boolean))
    .pipe(z.array(UsageDimension).min(1, "Give at least one of day, model, key, user"))
    .default(["day", "model"]),
});

const shiftDay = (day: string, days: number) => new Date(Date.parse(day) + days * DAY_MS).toISOString().slice(0, 10);

function parseQuery(query: Record<string, string>) {
  const data = validated(Query, query, "query");
  const to = data.to ?? new Date().toISOString().slice(0, 10);
  const from = data.from ?? shiftDay(to, 1 - DEFAULT_DAYS);
  if (from > to) throw new ApiError("invalid_request", `from (${from}) is after to (${to}).`);
  const days = (Date.parse(to) - Date.parse(from)) / DAY_MS + 1;
  if (days > MAX_DAYS) {
    throw new ApiError("invalid_request", `The range spans ${days} days; ask for at most ${MAX_DAYS} at a time.`);
  }
  return { from, to, groupBy: data.groupBy };
}

const total = (column: SQLiteColumn) => sql<number>`sum(${column})`.mapWith(Number);

/**
 * Metered tokens of the caller's org per UTC day, grouped as asked. Owners see every member's
 * usage; members only their own (whichever of their keys it went through).
 */
export const usage = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("admin"))
  .get("/", async (c) => {
    const { org, user } = c.get("principal");
    const { from, to, groupBy } = parseQuery(c.req.query());
    const columns = groupBy.map((d) => DIMENSIONS[d].column);
    const filters: SQL[] = [eq(usageDaily.orgId, org.id), between(usageDaily.day, from, to)];
    if (user.role !== "owner") filters.push(eq(usageDaily.userId, user.id));

    const found = await database(c.env.DB)
      .select({
        ...Object.fromEntries(groupBy.map((d) => [DIMENSIONS[d].field, DIMENSIONS[d].column])),
        requests: total(usageDaily.requests),
        promptTokens: total(usageDaily.promptTokens),
        completionTokens: total(usageDaily.completionTokens),
      })
      .from(usageDaily)
      .where(and(...filters))
      .groupBy(...columns)
      .orderBy(...columns.map((column) => asc(column)));

    const totals: UsageCounts = { requests: 0, promptTokens: 0, completionTokens: 0, totalTokens: 0 };
    const rows = found.map((r): UsageRow => {
      const row: UsageRow = {
        requests: r.requests,
        promptTokens: r.promptTokens,
        completionTokens: r.completionTokens,
        totalTokens: r.promptTokens + r.completionTokens,
      };
      for (const d of groupBy) row[DIMENSIONS[d].field] = String((r as Record<string, unknown>)[DIMENSIONS[d].field]);
      totals.requests += row.requests;
      totals.promptTokens += row.promptTokens;
      totals.completionTokens += row.completionTokens;
      totals.totalTokens += row.totalTokens;
      return row;
    });
    return c.json({ from, to, groupBy, rows, totals } satisfies UsageReport);
  });
