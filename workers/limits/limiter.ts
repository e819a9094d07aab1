/**
 * The isolate's side of rate limiting: leases of allowance taken from each identity's limiter
 * object and spent locally, so that admitting a request costs no round trip. Unused allowance goes
 * back after the lease's time to live; in the fast path (tab) a request is admitted first and
 * charged at the next lease (bounded debt), so the total admitted across isolates stays within a
 * few percent of the limit while a tab request never waits.
 *
 * Every request does its own I/O: a request that lacks allowance makes its own lease call, whose
 * `need` the limiter object grants whole to that request or refuses because the limit is spent,
 * and a top-up runs in the `waitUntil` of the request that asked for it, awaited by nobody else.
 * The Workers runtime cancels a request that waits on I/O begun by another request.
 */
import {
  LEASE_RESERVE,
  type BucketSpec,
  type LeaseGrant,
  type LeaseRequest,
  type Throttle,
} from "../../durable-objects/buckets.js";
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
  /** Debt sent with leases that have not answered yet: it still counts against the cap. */
  sending = 0;
  /**
   * The limiter could not grant `deniedNeed` units at `deniedAt`, and said they are back at
   * `deniedUntil`: for one lease TTL, nothing as large is asked again (another isolate may give
   * back what it holds meanwhile, so the answer is not trusted for longer).
   */
  deniedAt = 0;
  deniedUntil = 0;
  deniedNeed = Infinity;
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

  /** Milliseconds until `units` are back, by the limiter's last refusal; 0 when it is not known. */
  refusedFor(units: number, now: number, settings: LeaseSettings): number {
    if (this.deniedUntil <= now || now - this.deniedAt >= settings.ttlMs || units < this.deniedNeed) return 0;
    return this.deniedUntil - now + Math.ceil(((units - this.deniedNeed) * this.spec.windowMs) / this.spec.limit);
  }
}

class Identity {
  readonly buckets = new Map<string, LocalBucket>();
  /** A top-up is due or on its way (in the `waitUntil` of the request that asked for it). */
  topping = false;
  throttle: Throttle | null = null;
  /** A limiter that failed: until then, decide from the local fallback. */
  downUntil = 0;
}

/** When a limiter object cannot be reached: admit at this share of the limit, per isolate. */
const FALLBACK_SHARE = 0.125;
const DOWN_RETRY_MS = 1_000;

/** What a request's own lease brought towards one check: its cost whole, or when to try again. */
interface Grant {
  units: number;
  retryAfterMs: number;
}

/** How one check of a request is met, decided synchronously so that taking them all is atomic. */
type Way = "held" | "fallback" | "allowance" | "credit";

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

  private bucket(check: Omit<Check, "cost">): LocalBucket {
    const identity = this.identity(check.identity);
    let bucket = identity.buckets.get(check.bucket.name);
    if (!bucket || bucket.spec.limit !== check.bucket.limit || bucket.spec.windowMs !== check.bucket.windowMs) {
      const old = bucket;
      bucket = new LocalBucket(check.bucket);
      if (old) {
        bucket.debt = old.debt;
        bucket.sending = old.sending;
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
   * A top-up that no request waits for, in the `waitUntil` of the request that asked. It starts
   * one timer turn later, so that this request has its own I/O (the upstream call) under way first;
   * until it has answered, further asks for the same identity are covered by it.
   */
  private syncSoon(name: string, waitUntil: (p: Promise<unknown>) => void): void {
    const identity = this.identity(name);
    if (identity.topping) return;
    identity.topping = true;
    waitUntil(
      later()
        .then(() => this.leaseFor(name, new Map()))
        .finally(() => {
          identity.topping = false;
        }),
    );
  }

  /**
   * One lease call for every bucket of an identity: returns expired allowance, settles debt, asks
   * for top-ups, and for `needs` (units this request must have, by bucket) all or nothing. Returns
   * what was granted towards each need, kept apart for the request that asked; `undefined` when the
   * limiter could not be reached.
   */
  private async leaseFor(name: string, needs: Map<LocalBucket, number>): Promise<Map<LocalBucket, Grant> | undefined> {
    const identity = this.identity(name);
    const now = this.now();
    const buckets = [...identity.buckets.values()];
    const sent: number[] = [];
    const requests: LeaseRequest[] = buckets.map((b) => {
      const elapsed = Math.max(1, now - b.syncedAt);
      b.rate = b.syncedAt === 0 ? b.spent / this.settings.ttlMs : 0.5 * b.rate + 0.5 * (b.spent / elapsed);
      // A bucket a request lacks gives back what it holds, so that the limiter decides on all of it.
      const expired = needs.has(b) || now - b.leasedAt >= this.settings.ttlMs;
      const returned = expired ? b.allowance : 0;
      if (expired) b.allowance = 0;
      const request = { bucket: b.spec, need: needs.get(b) ?? 0, want: b.want(this.settings), returned, debt: b.debt };
      sent.push(b.debt);
      b.sending += b.debt;
      b.debt = 0;
      b.spent = 0;
      b.syncedAt = now;
      return request;
    });
    let answer: Awaited<ReturnType<LimiterStub["lease"]>>;
    try {
      answer = await this.stub(name).lease(requests);
    } catch (err) {
      // Put the debt and returns back for the next try; decide locally meanwhile.
      buckets.forEach((b, i) => {
        b.sending -= sent[i]!;
        b.debt += sent[i]!;
        b.allowance += requests[i]!.returned;
      });
      identity.downUntil = this.now() + DOWN_RETRY_MS;
      console.error(JSON.stringify({ level: "warn", message: "rate limiter unreachable", error: String(err) }));
      return undefined;
    }
    const at = this.now();
    identity.throttle = answer.throttle;
    identity.downUntil = 0;
    const held = new Map<LocalBucket, Grant>();
    buckets.forEach((b, i) => {
      const grant = answer.grants[i]!;
      const need = requests[i]!.need ?? 0;
      b.sending -= sent[i]!;
      const mine = need > 0 && grant.granted >= need ? need : 0;
      if (need > 0) held.set(b, { units: mine, retryAfterMs: Math.max(1, grant.retryAfterMs) });
      b.allowance += grant.granted - mine;
      if (grant.granted > 0) b.leasedAt = at;
      b.remaining = grant.remaining;
      b.resetAt = at + grant.resetMs;
      if (need > 0 && mine === 0) {
        b.deniedAt = at;
        b.deniedUntil = at + Math.max(1, grant.retryAfterMs);
        b.deniedNeed = need;
      } else if (grant.granted > 0 || grant.remaining >= b.deniedNeed) {
        b.deniedUntil = 0;
        b.deniedNeed = Infinity;
      }
    });
    return held;
  }

  /** The fallback when a limiter is down: a share of the limit, counted in this isolate only. */
  private fallbackState(check: Check, now: number): { tokens: number; at: number } {
    const key = `${check.identity}\0${check.bucket.name}`;
    const limit = Math.max(1, check.bucket.limit * FALLBACK_SHARE);
    let state = this.fallback.get(key);
    if (!state) this.fallback.set(key, (state = { tokens: limit, at: now }));
    state.tokens = Math.min(limit, state.tokens + ((now - state.at) * limit) / check.bucket.windowMs);
    state.at = now;
    return state;
  }

  private state(checks: Check[], now: number): PolicyState[] {
    return checks.map((check) => {
      const b = this.bucket(check);
      return {
        policy: check.policy,
        limit: check.bucket.limit,
        windowSeconds: Math.round(check.bucket.windowMs / 1000),
        remaining: Math.max(0, Math.floor(b.remaining + b.allowance - b.debt - b.sending)),
        resetSeconds: Math.max(0, Math.ceil((b.resetAt - now) / 1000)),
      };
    });
  }

  /** The fast path runs up debt only while the limit is far off, so that isolates together cannot overshoot. */
  private onCredit(b: LocalBucket, cost: number): boolean {
    const headroom = b.remaining - b.debt - b.sending - cost;
    return b.debt + b.sending + cost <= b.maxDebt(this.settings) && headroom >= LEASE_RESERVE * b.spec.limit;
  }

  /**
   * Admits a request against every check, or names the first limit it hits. `fast` never waits
   * for a limiter object while its limit is far off (the tab path); otherwise a request without
   * local allowance asks for its cost in a lease of its own. `failClosed` refuses instead of
   * falling back when a limiter cannot be reached. Nothing is taken unless every check passes.
   */
  async admit(
    checks: Check[],
    options: { fast: boolean; failClosed: boolean; waitUntil: (p: Promise<unknown>) => void },
  ): Promise<Decision> {
    /** Units this request's own leases brought for each check (granted whole, or not at all). */
    const held = new Map<Check, Grant>();
    const refuse = (check: Check, retryAfterMs: number, now: number, unavailable = false): Decision => {
      for (const [c, grant] of held) this.bucket(c).allowance += grant.units;
      return {
        ok: false,
        check,
        retryAfterMs: Math.max(1, retryAfterMs),
        state: this.state(checks, now),
        ...(unavailable ? { unavailable: true as const } : {}),
      };
    };
    for (;;) {
      const now = this.now();
      const ways: Way[] = [];
      const lacking: Check[] = [];
      for (const check of checks) {
        const b = this.bucket(check);
        const grant = held.get(check);
        if (grant && grant.units >= check.cost) {
          ways.push("held");
          continue;
        }
        if (this.identity(check.identity).downUntil > now) {
          if (options.failClosed) return refuse(check, DOWN_RETRY_MS, now, true);
          if (this.fallbackState(check, now).tokens < check.cost) return refuse(check, DOWN_RETRY_MS, now);
          ways.push("fallback");
          continue;
        }
        if (b.allowance >= check.cost) ways.push("allowance");
        else if (options.fast && this.onCredit(b, check.cost)) ways.push("credit");
        else {
          // Asked already in this request, and the limiter had less than the cost: the limit is spent.
          if (grant) return refuse(check, grant.retryAfterMs, now);
          const known = b.allowance > 0 ? 0 : b.refusedFor(check.cost, now, this.settings);
          if (known > 0) return refuse(check, known, now);
          lacking.push(check);
        }
      }
      if (lacking.length === 0) {
        checks.forEach((check, i) => this.take(check, ways[i]!, held.get(check)?.units ?? 0, now, options.waitUntil));
        const state = () => this.state(checks, now);
        // Read for the response's RateLimit fields, after the request is on its way.
        return {
          ok: true,
          get state() {
            return state();
          },
        };
      }
      const byIdentity = new Map<string, Check[]>();
      for (const check of lacking) byIdentity.set(check.identity, [...(byIdentity.get(check.identity) ?? []), check]);
      await Promise.all(
        [...byIdentity].map(async ([name, group]) => {
          const needs = new Map(group.map((check) => [this.bucket(check), check.cost] as const));
          const granted = await this.leaseFor(name, needs);
          // Unreachable: the next pass decides from the fallback.
          if (granted) for (const check of group) held.set(check, granted.get(this.bucket(check))!);
        }),
      );
    }
  }

  private take(check: Check, way: Way, held: number, now: number, waitUntil: (p: Promise<unknown>) => void): void {
    const b = this.bucket(check);
    b.spent += check.cost;
    if (way === "held") {
      b.allowance += held - check.cost;
    } else if (way === "fallback") {
      this.fallbackState(check, now).tokens -= check.cost;
      b.debt += check.cost;
    } else if (way === "allowance") {
      b.allowance -= check.cost;
      // Top up before it runs out, off the request's path.
      if (b.allowance < b.want(this.settings) / 2) this.syncSoon(check.identity, waitUntil);
    } else {
      b.debt += check.cost;
      this.syncSoon(check.identity, waitUntil);
    }
  }

  /** Charges spent units after the fact (tokens beyond a reservation): debt settled at the next lease. */
  charge(check: Omit<Check, "cost">, amount: number, waitUntil: (p: Promise<unknown>) => void): void {
    if (amount <= 0) return;
    const b = this.bucket(check);
    const fromAllowance = Math.min(b.allowance, amount);
    b.allowance -= fromAllowance;
    b.debt += amount - fromAllowance;
    b.spent += amount;
    // What the lease covered was already counted by the limiter object; only debt, or a lease
    // running low, needs a call, and charges in a burst share it.
    if (b.debt > 0 || b.allowance < b.want(this.settings) / 2) this.syncSoon(check.identity, waitUntil);
  }

  /** Gives back reserved units a request did not use: local allowance, returned with the next lease. */
  refund(check: Omit<Check, "cost">, amount: number): void {
    if (amount <= 0) return;
    const b = this.bucket(check);
    b.allowance += amount;
    b.spent = Math.max(0, b.spent - amount);
  }
}

/** `RateLimit-Policy` and `RateLimit` field values (draft-ietf-httpapi-ratelimit-headers). */
export function rateLimitHeaders(
  state: PolicyState[],
  refused?: { policy: string; retryAfterSeconds: number },
): Record<string, string> {
  if (state.length === 0) return {};
  const policies = state.map((s) => `"${s.policy}";q=${s.limit};w=${s.windowSeconds}`).join(", ");
  // A refusal reports the limit that refused it, with `t` the seconds until its cost is back (as
  // `Retry-After`); otherwise the field reports the policy closest to its limit and when it is full.
  const hit = refused && state.find((s) => s.policy === refused.policy);
  if (hit)
    return {
      "RateLimit-Policy": policies,
      RateLimit: `"${hit.policy}";r=${hit.remaining};t=${refused.retryAfterSeconds}`,
    };
  const tightest = state.reduce((a, b) => (b.remaining / b.limit < a.remaining / a.limit ? b : a));
  return {
    "RateLimit-Policy": policies,
    RateLimit: `"${tightest.policy}";r=${tightest.remaining};t=${tightest.resetSeconds}`,
  };
}
