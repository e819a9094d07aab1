/**
 * The isolate's side of rate limiting: leases of allowance taken from each identity's limiter
 * object and spent locally, so that admitting a request costs no round trip. Unused allowance goes
 * back after the lease's time to live; in the fast path (tab) a request is admitted first and
 * charged at the next lease (bounded debt), so the total admitted across isolates stays within a
 * few percent of the limit while a tab request never waits.
 */
import type { BucketSpec, LeaseGrant, LeaseRequest, Throttle } from "../../durable-objects/buckets.js";
import { later } from "../later.js";

export interface LimiterStub {
  lease(requests: LeaseRequest[]): Promise<{ grants: LeaseGrant[]; throttle: Throttle | null }>;
}

export interface Check {
  /** The limiter object: "key:<id>", "user:<id>", "org:<id>" or "ip:<prefix>". */
  identity: string;
  /** The policy's name in the RateLimit headers, e.g. "tab-key". */
  policy: string;
  bucket: BucketSpec;
  cost: number;
  /** What the error says was hit, e.g. "the pro plan's 1,200 tab requests per minute per API key". */
  describe: string;
}

export type Decision =
  | { ok: true; state: PolicyState[] }
  | { ok: false; check: Check; retryAfterMs: number; state: PolicyState[]; unavailable?: true };

export interface PolicyState {
  policy: string;
  limit: number;
  windowSeconds: number;
  remaining: number;
  resetSeconds: number;
}

export interface LeaseSettings {
  /** Largest lease as a share of the limit. */
  maxShare: number;
  /** Unused allowance is returned after this long. */
  ttlMs: number;
}

class LocalBucket {
  allowance = 0;
  leasedAt = 0;
  debt = 0;
  /** Debt sent with a lease that has not answered yet: it still counts against the cap. */
  sending = 0;
  deniedUntil = 0;
  /** The limiter's remaining allowance when last heard from, and its reset time. */
  remaining: number;
  resetAt = 0;
  /** Spent since the last lease, and when that was: the local rate that sizes the next lease. */
  spent = 0;
  syncedAt = 0;
  rate = 0;

  constructor(readonly spec: BucketSpec) {
    this.remaining = spec.limit;
  }

  /** The lease to ask for: about one TTL's worth at the local rate, at least one. */
  want(settings: LeaseSettings): number {
    const cap = Math.max(1, Math.floor(this.spec.limit * settings.maxShare));
    return Math.max(1, Math.min(cap, Math.ceil(this.rate * settings.ttlMs)));
  }

  /** Largest debt the fast path may run up before it has to wait for a lease. */
  maxDebt(settings: LeaseSettings): number {
    return Math.max(1, Math.floor(this.spec.limit * settings.maxShare));
  }
}

class Identity {
  readonly buckets = new Map<string, LocalBucket>();
  syncing: Promise<void> | undefined;
  /** A sync is due once the current request's own I/O is under way (`syncSoon`). */
  due = false;
  again: Promise<void> | undefined;
  throttle: Throttle | null = null;
  /** A limiter that failed: until then, decide from the local fallback. */
  downUntil = 0;
}

/** When a limiter object cannot be reached: admit at this share of the limit, per isolate. */
const FALLBACK_SHARE = 0.125;
const DOWN_RETRY_MS = 1_000;
/** Within this share of the limit, the fast path waits for a lease instead of running up debt. */
const NEAR_LIMIT = 0.2;

export class IsolateLimiter {
  private readonly identities = new Map<string, Identity>();
  private readonly fallback = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly stub: (identity: string) => LimiterStub,
    private readonly settings: LeaseSettings,
    private readonly now: () => number = Date.now,
  ) {}

  private identity(name: string): Identity {
    let identity = this.identities.get(name);
    if (!identity) this.identities.set(name, (identity = new Identity()));
    return identity;
  }

  private bucket(check: Check): LocalBucket {
    const identity = this.identity(check.identity);
    let bucket = identity.buckets.get(check.bucket.name);
    if (!bucket || bucket.spec.limit !== check.bucket.limit || bucket.spec.windowMs !== check.bucket.windowMs) {
      const old = bucket;
      bucket = new LocalBucket(check.bucket);
      if (old) {
        bucket.debt = old.debt;
        bucket.allowance = old.allowance;
        bucket.leasedAt = old.leasedAt;
      }
      identity.buckets.set(check.bucket.name, bucket);
    }
    return bucket;
  }

  /** The throttle the identity's limiter last reported, if any. */
  throttleOf(identity: string): Throttle | null {
    const throttle = this.identities.get(identity)?.throttle ?? null;
    return throttle && throttle.until > this.now() ? throttle : null;
  }

  /** Records a throttle learnt outside a lease (the abuse signal's answer). */
  setThrottle(identity: string, throttle: Throttle | null): void {
    this.identity(identity).throttle = throttle;
  }

  /**
   * A sync that no request waits for. It starts one timer turn later, so that the request that
   * asked for it has its own I/O (the upstream call) under way first; until then further asks for
   * the same identity join it.
   */
  private syncSoon(name: string, waitUntil: (p: Promise<unknown>) => void): void {
    const identity = this.identity(name);
    if (identity.due) return;
    identity.due = true;
    waitUntil(
      later().then(() => {
        identity.due = false;
        return this.sync(name);
      }),
    );
  }

  /** Takes, returns and settles leases for every bucket of one identity in one round trip. */
  sync(name: string): Promise<void> {
    const identity = this.identity(name);
    // One lease call at a time per identity; a sync asked for meanwhile runs right after it, so
    // that buckets created since (another class, the tokens bucket) are leased too.
    if (identity.syncing) {
      identity.again ??= identity.syncing.then(() => {
        identity.again = undefined;
        return this.sync(name);
      });
      return identity.again;
    }
    identity.syncing = (async () => {
      const now = this.now();
      const buckets = [...identity.buckets.values()];
      const requests: LeaseRequest[] = buckets.map((b) => {
        const elapsed = Math.max(1, now - b.syncedAt);
        b.rate = b.syncedAt === 0 ? b.spent / this.settings.ttlMs : 0.5 * b.rate + 0.5 * (b.spent / elapsed);
        const expired = now - b.leasedAt >= this.settings.ttlMs;
        const returned = expired ? b.allowance : 0;
        if (expired) b.allowance = 0;
        const request = { bucket: b.spec, want: b.want(this.settings), returned, debt: b.debt };
        b.sending = b.debt;
        b.debt = 0;
        b.spent = 0;
        b.syncedAt = now;
        return request;
      });
      try {
        const { grants, throttle } = await this.stub(name).lease(requests);
        const at = this.now();
        for (const b of buckets) b.sending = 0;
        identity.throttle = throttle;
        identity.downUntil = 0;
        grants.forEach((grant, i) => {
          const b = buckets[i]!;
          b.allowance += grant.granted;
          if (grant.granted > 0) b.leasedAt = at;
          b.remaining = grant.remaining;
          b.resetAt = at + grant.resetMs;
          b.deniedUntil =
            grant.granted === 0 && grant.retryAfterMs > 0 && b.allowance < 1 ? at + grant.retryAfterMs : 0;
        });
      } catch (err) {
        // Put the debt back for the next try; decide locally meanwhile.
        requests.forEach((r, i) => {
          buckets[i]!.debt += r.debt;
          buckets[i]!.sending = 0;
        });
        identity.downUntil = this.now() + DOWN_RETRY_MS;
        console.error(JSON.stringify({ level: "warn", message: "rate limiter unreachable", error: String(err) }));
      } finally {
        identity.syncing = undefined;
      }
    })();
    return identity.syncing;
  }

  /** The fallback when a limiter is down: a share of the limit, counted in this isolate only. */
  private fallbackAdmit(check: Check, now: number): boolean {
    const key = `${check.identity}\0${check.bucket.name}`;
    const limit = Math.max(1, check.bucket.limit * FALLBACK_SHARE);
    let state = this.fallback.get(key);
    if (!state) this.fallback.set(key, (state = { tokens: limit, at: now }));
    state.tokens = Math.min(limit, state.tokens + ((now - state.at) * limit) / check.bucket.windowMs);
    state.at = now;
    if (state.tokens < check.cost) return false;
    state.tokens -= check.cost;
    return true;
  }

  private state(checks: Check[], now: number): PolicyState[] {
    return checks.map((check) => {
      const b = this.bucket(check);
      return {
        policy: check.policy,
        limit: check.bucket.limit,
        windowSeconds: Math.round(check.bucket.windowMs / 1000),
        remaining: Math.max(0, Math.floor(b.remaining + b.allowance - b.debt)),
        resetSeconds: Math.max(0, Math.ceil((b.resetAt - now) / 1000)),
      };
    });
  }

  /**
   * A check whose limiter object is unreachable: refused when its class fails closed, else admitted
   * within the local fallback and owed to the object for when it is back.
   */
  private whileDown(
    check: Check,
    b: LocalBucket,
    checks: Check[],
    now: number,
    failClosed: boolean,
  ): Extract<Decision, { ok: false }> | undefined {
    if (failClosed)
      return { ok: false, check, retryAfterMs: DOWN_RETRY_MS, state: this.state(checks, now), unavailable: true };
    if (!this.fallbackAdmit(check, now))
      return { ok: false, check, retryAfterMs: 1000, state: this.state(checks, now) };
    b.debt += check.cost;
    return undefined;
  }

  /**
   * Admits a request against every check, or names the first limit it hits. `fast` never waits
   * for a limiter object (the tab path); otherwise a request without local allowance waits for one
   * lease. `failClosed` refuses instead of falling back when a limiter cannot be reached.
   */
  async admit(
    checks: Check[],
    options: { fast: boolean; failClosed: boolean; waitUntil: (p: Promise<unknown>) => void },
  ): Promise<Decision> {
    let now = this.now();
    const taken: [LocalBucket, number][] = [];
    const refund = () => taken.forEach(([b, n]) => (b.allowance += n));
    for (const check of checks) {
      const b = this.bucket(check);
      const identity = this.identity(check.identity);
      // At most two passes: from the local lease, then once more after waiting for a lease.
      for (let synced = false; ; synced = true) {
        if (identity.downUntil > now) {
          const refused = this.whileDown(check, b, checks, now, options.failClosed);
          if (refused) {
            refund();
            return refused;
          }
          break;
        }
        if (b.allowance >= check.cost) {
          b.allowance -= check.cost;
          b.spent += check.cost;
          taken.push([b, check.cost]);
          // Top up before it runs out, off the request's path.
          if (b.allowance < b.want(this.settings) / 2) this.syncSoon(check.identity, options.waitUntil);
          break;
        }
        if (synced || b.deniedUntil > now) {
          refund();
          return { ok: false, check, retryAfterMs: Math.max(1, b.deniedUntil - now), state: this.state(checks, now) };
        }
        // The fast path runs up debt only while the limit is far off; within the last 20% it waits
        // for a lease like any other request, so that isolates together cannot overshoot.
        const headroom = b.remaining - b.debt - b.sending - check.cost;
        if (
          options.fast &&
          b.debt + b.sending + check.cost <= b.maxDebt(this.settings) &&
          headroom >= NEAR_LIMIT * b.spec.limit
        ) {
          b.debt += check.cost;
          b.spent += check.cost;
          this.syncSoon(check.identity, options.waitUntil);
          break;
        }
        await this.sync(check.identity);
        now = this.now();
      }
    }
    // Read for the response's RateLimit fields, after the request is on its way.
    const state = () => this.state(checks, now);
    return {
      ok: true,
      get state() {
        return state();
      },
    };
  }

  /** Charges spent units after the fact (tokens from metered usage): debt settled at the next lease. */
  charge(check: Omit<Check, "cost">, amount: number, waitUntil: (p: Promise<unknown>) => void): void {
    if (amount <= 0) return;
    const b = this.bucket({ ...check, cost: amount });
    const fromAllowance = Math.min(b.allowance, amount);
    b.allowance -= fromAllowance;
    b.debt += amount - fromAllowance;
    b.spent += amount;
    // What the lease covered was already counted by the limiter object; only debt, or a lease
    // running low, needs a call, and charges in a burst share it.
    if (b.debt > 0 || b.allowance < b.want(this.settings) / 2) this.syncSoon(check.identity, waitUntil);
  }
}

/** `RateLimit-Policy` and `RateLimit` field values (draft-ietf-httpapi-ratelimit-headers). */
export function rateLimitHeaders(state: PolicyState[]): Record<string, string> {
  if (state.length === 0) return {};
  const policies = state.map((s) => `"${s.policy}";q=${s.limit};w=${s.windowSeconds}`).join(", ");
  // The field reports the policy closest to its limit.
  const tightest = state.reduce((a, b) => (b.remaining / b.limit < a.remaining / a.limit ? b : a));
  return {
    "RateLimit-Policy": policies,
    RateLimit: `"${tightest.policy}";r=${tightest.remaining};t=${tightest.resetSeconds}`,
  };
}
