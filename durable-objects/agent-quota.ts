/**
 * An org's agent quota, one object per org: how many tasks it runs at once and how many sandbox
 * seconds its tasks may use per UTC day, by the reservation pattern. A task reserves its whole
 * `sandboxSeconds` budget (and a slot) before it is created; when it ends, it settles for what it
 * used and the rest goes back. A reservation never settled (its task object lost the call) lapses at
 * its expiry, counted in full: an org can be held back by a lost settlement, never let past its quota.
 */
import { DurableObject } from "cloudflare:workers";
import type { AgentOrgLimits } from "../protocol/agents/task.js";

export type Reserved =
  | { ok: true }
  | { ok: false; limit: "agent-concurrency" | "agent-sandbox-seconds"; retryAfterSeconds: number; message: string };

const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);
const secondsToMidnight = (ms: number) => Math.ceil((Date.parse(`${day(ms)}T00:00:00Z`) + 86_400_000 - ms) / 1000);

export class AgentQuota extends DurableObject<object> {
  constructor(ctx: DurableObjectState, env: object) {
    super(ctx, env);
    ctx.storage.sql.exec(`
      CREATE TABLE IF NOT EXISTS reservations (
        task TEXT PRIMARY KEY, day TEXT NOT NULL, seconds REAL NOT NULL,
        expires_at INTEGER NOT NULL, settled INTEGER NOT NULL DEFAULT 0
      );
      CREATE INDEX IF NOT EXISTS reservations_day ON reservations (day);
    `);
  }

  /** Reserves a slot and `seconds` of today's sandbox time for `task`, or says which limit refuses it. */
  reserve(task: string, seconds: number, expiresAt: number, limits: AgentOrgLimits): Reserved {
    const now = Date.now();
    const sql = this.ctx.storage.sql;
    const running = sql
      .exec<{ n: number }>("SELECT count(*) AS n FROM reservations WHERE settled = 0 AND expires_at > ?", now)
      .one().n;
    if (running >= limits.concurrentTasks)
      return {
        ok: false,
        limit: "agent-concurrency",
        retryAfterSeconds: 30,
        message: `Your org runs ${running} agent tasks, its plan's most at once; wait for one to end.`,
      };
    const today = day(now);
    // Days before yesterday no longer count for anything.
    sql.exec(
      "DELETE FROM reservations WHERE day < ? AND (settled = 1 OR expires_at <= ?)",
      day(now - 2 * 86_400_000),
      now,
    );
    const used =
      sql.exec<{ s: number | null }>("SELECT sum(seconds) AS s FROM reservations WHERE day = ?", today).one().s ?? 0;
    if (used + seconds > limits.dailySandboxSeconds)
      return {
        ok: false,
        limit: "agent-sandbox-seconds",
        retryAfterSeconds: secondsToMidnight(now),
        message: `This task's ${seconds} sandbox seconds would take your org past its ${limits.dailySandboxSeconds} a day (${Math.floor(limits.dailySandboxSeconds - used)} left today); ask for fewer with limits.sandboxSeconds.`,
      };
    sql.exec(
      "INSERT INTO reservations (task, day, seconds, expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (task) DO NOTHING",
      task,
      today,
      seconds,
      expiresAt,
    );
    return { ok: true };
  }

  /** The task is over: it keeps what it used of its reservation and frees its slot. Idempotent. */
  settle(task: string, usedSeconds: number): void {
    this.ctx.storage.sql.exec(
      "UPDATE reservations SET seconds = min(seconds, ?), settled = 1 WHERE task = ? AND settled = 0",
      Math.max(0, usedSeconds),
      task,
    );
  }

  /** What the org has in use now. */
  usage(): { running: number; sandboxSecondsToday: number } {
    const now = Date.now();
    const sql = this.ctx.storage.sql;
    return {
      running: sql
        .exec<{ n: number }>("SELECT count(*) AS n FROM reservations WHERE settled = 0 AND expires_at > ?", now)
        .one().n,
      sandboxSecondsToday:
        sql.exec<{ s: number | null }>("SELECT sum(seconds) AS s FROM reservations WHERE day = ?", day(now)).one().s ??
        0,
    };
  }
}
