/**
 * One identity's limits (an API key, user, org or IP prefix: one object each, so load spreads
 * across objects): token buckets for requests and tokens, and concurrency slots. Isolates do not
 * ask per request; they take leases of allowance, spend them locally, and return what they did not
 * use (see workers/limits/limiter.ts). For an IP prefix the object also counts the free accounts
 * active behind it, the abuse signal that throttles it.
 */
import { DurableObject } from "cloudflare:workers";
import { recordThrottle } from "../workers/db/abuse.js";
import { database } from "../workers/db/client.js";
import {
  lease,
  refill,
  type Bucket,
  type BucketSpec,
  type LeaseGrant,
  type LeaseRequest,
  type Throttle,
} from "./buckets.js";

export { lease, refill };
export type { BucketSpec, LeaseGrant, LeaseRequest, Throttle } from "./buckets.js";

const HOUR_MS = 3_600_000;

export class RateLimiter extends DurableObject<Env> {
  private readonly buckets = new Map<string, Bucket>();
  private readonly slots = new Map<string, Map<string, number>>();
  private throttle: Throttle | null = null;
  /** Free accounts seen this hour (abuse signal for IP prefixes), as opaque hashes. */
  private accounts = { hour: 0, seen: new Set<string>(), fresh: new Set<string>() };

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS buckets (name TEXT PRIMARY KEY, tokens REAL NOT NULL, at INTEGER NOT NULL, lim INTEGER NOT NULL, window_ms INTEGER NOT NULL)",
    );
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS throttle (id INTEGER PRIMARY KEY CHECK (id = 1), reason TEXT NOT NULL, until INTEGER NOT NULL)",
    );
    for (const row of ctx.storage.sql.exec<{
      name: string;
      tokens: number;
      at: number;
      lim: number;
      window_ms: number;
    }>("SELECT name, tokens, at, lim, window_ms FROM buckets"))
      this.buckets.set(row.name, { tokens: row.tokens, at: row.at, limit: row.lim, windowMs: row.window_ms });
    const throttle = ctx.storage.sql
      .exec<{ reason: string; until: number }>("SELECT reason, until FROM throttle")
      .toArray()[0];
    this.throttle = throttle ?? null;
  }

  private bucket(spec: BucketSpec, now: number): Bucket {
    let bucket = this.buckets.get(spec.name);
    if (!bucket) {
      bucket = { tokens: spec.limit, at: now, limit: spec.limit, windowMs: spec.windowMs };
      this.buckets.set(spec.name, bucket);
    } else if (bucket.limit !== spec.limit || bucket.windowMs !== spec.windowMs) {
      // The limit changed (plan change, override): keep the share used, under the new limit.
      refill(bucket, now);
      bucket.tokens = (bucket.tokens / bucket.limit) * spec.limit;
      bucket.limit = spec.limit;
      bucket.windowMs = spec.windowMs;
    }
    return bucket;
  }

  /** Leases for several buckets at once; one round trip per identity. */
  async lease(requests: LeaseRequest[]): Promise<{ grants: LeaseGrant[]; throttle: Throttle | null }> {
    const now = Date.now();
    const grants = requests.map((request) => {
      const bucket = this.bucket(request.bucket, now);
      const grant = lease(bucket, request, now);
      this.ctx.storage.sql.exec(
        "INSERT INTO buckets (name, tokens, at, lim, window_ms) VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET tokens = excluded.tokens, at = excluded.at, lim = excluded.lim, window_ms = excluded.window_ms",
        request.bucket.name,
        bucket.tokens,
        bucket.at,
        bucket.limit,
        bucket.windowMs,
      );
      return grant;
    });
    return { grants, throttle: this.activeThrottle(now) };
  }

  /** Takes a concurrency slot; the lease id releases it, and it expires by itself after `ttlMs`. */
  async enter(name: string, limit: number, ttlMs: number): Promise<{ ok: boolean; id?: string; inflight: number }> {
    const now = Date.now();
    let slots = this.slots.get(name);
    if (!slots) this.slots.set(name, (slots = new Map()));
    for (const [id, expires] of slots) if (expires <= now) slots.delete(id);
    if (slots.size >= limit) return { ok: false, inflight: slots.size };
    const id = crypto.randomUUID();
    slots.set(id, now + ttlMs);
    return { ok: true, id, inflight: slots.size };
  }

  async leave(name: string, id: string): Promise<void> {
    this.slots.get(name)?.delete(id);
  }

  private activeThrottle(now: number): Throttle | null {
    if (this.throttle && this.throttle.until <= now) {
      this.throttle = null;
      this.ctx.storage.sql.exec("DELETE FROM throttle");
    }
    return this.throttle;
  }

  /**
   * Abuse signals of an IP prefix: the free accounts seen sending traffic from it this hour, and
   * how many of them were created within the hour. Crossing a threshold throttles the prefix and
   * writes an audit record. Account ids are kept in memory for the hour only.
   */
  async noteFreeAccounts(input: {
    prefix: string;
    accounts: { id: string; createdAt: number }[];
    thresholds: { active: number; new: number };
    throttleMs: number;
  }): Promise<{ throttle: Throttle | null; active: number; new: number }> {
    const now = Date.now();
    const hour = Math.floor(now / HOUR_MS);
    if (this.accounts.hour !== hour) this.accounts = { hour, seen: new Set(), fresh: new Set() };
    const cap = Math.max(input.thresholds.active, input.thresholds.new) * 4;
    for (const account of input.accounts) {
      if (this.accounts.seen.size < cap) this.accounts.seen.add(account.id);
      if (now - account.createdAt < HOUR_MS && this.accounts.fresh.size < cap) this.accounts.fresh.add(account.id);
    }
    const active = this.accounts.seen.size;
    const fresh = this.accounts.fresh.size;
    if (!this.activeThrottle(now)) {
      const signal =
        fresh > input.thresholds.new
          ? {
              signal: "new_free_accounts" as const,
              observed: fresh,
              threshold: input.thresholds.new,
              what: "new free accounts",
            }
          : active > input.thresholds.active
            ? {
                signal: "active_free_accounts" as const,
                observed: active,
                threshold: input.thresholds.active,
                what: "free accounts active",
              }
            : undefined;
      if (signal) {
        const reason = `${signal.observed} ${signal.what} from ${input.prefix} within an hour (threshold ${signal.threshold})`;
        const until = now + input.throttleMs;
        this.writeThrottle(reason, until);
        await recordThrottle(database(this.env.DB), {
          kind: "prefix",
          subject: input.prefix,
          signal: signal.signal,
          observed: signal.observed,
          threshold: signal.threshold,
          reason,
          expiresAt: until,
        });
      }
    }
    return { throttle: this.activeThrottle(now), active, new: fresh };
  }

  private writeThrottle(reason: string, until: number): void {
    this.throttle = { reason, until };
    this.ctx.storage.sql.exec(
      "INSERT INTO throttle (id, reason, until) VALUES (1, ?, ?) ON CONFLICT(id) DO UPDATE SET reason = excluded.reason, until = excluded.until",
      reason,
      until,
    );
  }

  /** Throttles this identity (an admin, or a signal counted elsewhere); `null` lifts it. */
  async setThrottle(reason: string | null, until = 0): Promise<void> {
    if (reason === null) {
      this.throttle = null;
      this.ctx.storage.sql.exec("DELETE FROM throttle");
      return;
    }
    this.writeThrottle(reason, until);
  }
}
