import { and, desc, eq, gt, isNull, sql } from "drizzle-orm";
import { newId } from "../../protocol/ids.js";
import type { AbuseSignal, AbuseThrottle, ThrottleKind } from "../../protocol/schemas.js";
import type { Db } from "./client.js";
import { abuseThrottles } from "./schema.js";

/** Times are milliseconds since the epoch, as the limiter objects count them. */
export interface RecordThrottleInput {
  kind: ThrottleKind;
  /** An IP prefix for `prefix`, a user id for `account`. */
  subject: string;
  orgId?: string | null;
  signal: AbuseSignal;
  observed: number;
  threshold: number;
  reason: string;
  expiresAt: number;
}

/** The most any list returns: operators page through abuse by lifting it, not by scrolling. */
const LIST_LIMIT = 500;

type Row = typeof abuseThrottles.$inferSelect;

const toAbuseThrottle = (row: Row, now: number): AbuseThrottle => ({
  id: row.id,
  kind: row.kind,
  subject: row.subject,
  orgId: row.orgId,
  signal: row.signal,
  observed: row.observed,
  threshold: row.threshold,
  reason: row.reason,
  createdAt: row.createdAt.toISOString(),
  expiresAt: row.expiresAt.toISOString(),
  liftedAt: row.liftedAt ? row.liftedAt.toISOString() : null,
  active: row.liftedAt === null && row.expiresAt.getTime() > now,
});

const active = (now: number) => and(isNull(abuseThrottles.liftedAt), gt(abuseThrottles.expiresAt, new Date(now)));
// Rows written in the same millisecond keep their insertion order.
const newestFirst = [desc(abuseThrottles.createdAt), desc(sql`rowid`)];

export async function recordThrottle(db: Db, input: RecordThrottleInput): Promise<AbuseThrottle> {
  const [row] = await db
    .insert(abuseThrottles)
    .values({
      id: newId("abt"),
      kind: input.kind,
      subject: input.subject,
      orgId: input.orgId ?? null,
      signal: input.signal,
      observed: Math.round(input.observed),
      threshold: Math.round(input.threshold),
      reason: input.reason,
      expiresAt: new Date(input.expiresAt),
    })
    .returning();
  return toAbuseThrottle(row!, Date.now());
}

async function activeThrottle(db: Db, kind: ThrottleKind, subject: string, now: number) {
  const [row] = await db
    .select()
    .from(abuseThrottles)
    .where(and(eq(abuseThrottles.kind, kind), eq(abuseThrottles.subject, subject), active(now)))
    .orderBy(...newestFirst)
    .limit(1);
  return row ? toAbuseThrottle(row, now) : null;
}

/** The newest throttle on a user that is neither lifted nor expired. */
export const activeAccountThrottle = (db: Db, userId: string, now = Date.now()) =>
  activeThrottle(db, "account", userId, now);

/** The newest throttle on an IP prefix that is neither lifted nor expired. */
export const activePrefixThrottle = (db: Db, prefix: string, now = Date.now()) =>
  activeThrottle(db, "prefix", prefix, now);

/** Active throttles, or with `all` the latest ones whatever their state; newest first, at most 500. */
export async function listThrottles(db: Db, options: { all?: boolean; now?: number } = {}): Promise<AbuseThrottle[]> {
  const now = options.now ?? Date.now();
  const rows = await db
    .select()
    .from(abuseThrottles)
    .where(options.all ? undefined : active(now))
    .orderBy(...newestFirst)
    .limit(LIST_LIMIT);
  return rows.map((row) => toAbuseThrottle(row, now));
}

/** Lifts once; lifting again keeps the original time, so the call is idempotent. `null` if no such id. */
export async function liftThrottle(db: Db, id: string, now = Date.now()): Promise<AbuseThrottle | null> {
  await db
    .update(abuseThrottles)
    .set({ liftedAt: new Date(now) })
    .where(and(eq(abuseThrottles.id, id), isNull(abuseThrottles.liftedAt)));
  const row = await db.query.abuseThrottles.findFirst({ where: eq(abuseThrottles.id, id) });
  return row ? toAbuseThrottle(row, now) : null;
}
