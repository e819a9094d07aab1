/**
 * Rate limits on a request: admission against every limit of its class, concurrency slots released
 * when the request is over (completion, abort or error), tokens charged after the response, the
 * RateLimit header fields, and the abuse signal of free-tier traffic per IP prefix.
 */
import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import type { LimitClass } from "../../protocol/limits.js";
import type { AppEnv } from "../app-env.js";
import { keyCache } from "../auth/authenticate.js";
import { recordThrottle } from "../db/abuse.js";
import { database } from "../db/client.js";
import { ApiError } from "../problem.js";
import { IsolateLimiter, rateLimitHeaders, type Check, type Decision } from "./limiter.js";
import { cachedLimitsFor, ipPrefix, limitsFor, loadLimits } from "./policy.js";

let limiter: IsolateLimiter | undefined;

function isolateLimiter(env: Env): IsolateLimiter {
  limiter ??= new IsolateLimiter(
    (identity) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(identity)),
    loadLimits(env).lease,
  );
  return limiter;
}

const limiterStub = (env: Env, identity: string) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(identity));

/** Local concurrency counts (the fast path cannot wait on a remote slot). */
const localSlots = new Map<string, number>();
/** Concurrency slots held in limiter objects live at most this long if a release is lost. */
const SLOT_TTL_MS = 10 * 60_000;

/** Free accounts already reported per prefix this hour, so each is reported once per isolate. */
let reported = { hour: 0, seen: new Set<string>() };

function noteFreeTraffic(c: Context<AppEnv>, prefix: string): void {
  const principal = c.get("principal");
  if (!principal || principal.org.plan !== "free") return;
  const hour = Math.floor(Date.now() / 3_600_000);
  if (reported.hour !== hour) reported = { hour, seen: new Set() };
  const key = `${prefix}\0${principal.user.id}`;
  if (reported.seen.has(key)) return;
  reported.seen.add(key);
  const { abuse } = loadLimits(c.env);
  const isolate = isolateLimiter(c.env);
  c.executionCtx.waitUntil(
    limiterStub(c.env, `ip:${prefix}`)
      .noteFreeAccounts({
        prefix,
        accounts: [{ id: principal.user.id, createdAt: Date.parse(principal.user.createdAt) }],
        thresholds: { active: abuse.activeFreeAccountsPerPrefixPerHour, new: abuse.newFreeAccountsPerPrefixPerHour },
        throttleMs: abuse.throttleMinutes * 60_000,
      })
      .then((result) => isolate.setThrottle(`ip:${prefix}`, result.throttle))
      .catch((err: unknown) =>
        console.error(JSON.stringify({ level: "warn", message: "abuse signal not recorded", error: String(err) })),
      ),
  );
}

function refusal(decision: Extract<Decision, { ok: false }>): ApiError {
  const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000));
  const headers = {
    "Retry-After": String(seconds),
    ...rateLimitHeaders(decision.state, { policy: decision.check.policy, retryAfterSeconds: seconds }),
  };
  if (decision.unavailable)
    return new ApiError("unavailable", "Rate limits cannot be checked right now; retry shortly.", { headers });
  const { check } = decision;
  const left = decision.state.find((s) => s.policy === check.policy)?.remaining ?? 0;
  // A tokens limit refuses a request whose reservation does not fit, though some may be left.
  const reserved =
    check.cost > 1 ? ` This request reserves ${check.cost} tokens (its prompt and max_tokens); ${left} are left.` : "";
  return new ApiError("rate_limited", `Rate limit reached: ${check.describe}.${reserved} Retry after ${seconds} s.`, {
    headers,
    extra: { limit: decision.check.policy },
    // OpenAI names which kind of limit it was in the error's type.
    openai: { type: check.bucket.name.endsWith(":tokens") ? "tokens" : "requests" },
  });
}

export interface Admitted {
  /** The RateLimit fields for the response. */
  headers: Record<string, string>;
  /** Releases concurrency slots; call once when the request is over, however it ended. */
  release(): void;
  /** Settles the reserved tokens against metered usage: the rest is given back, any excess charged. */
  chargeTokens(tokens: number): void;
}

/**
 * Admits a request of `cls` or throws a 429 (or 503 when the class fails closed and its limiter is
 * unreachable). `fast` (tab) decides from the isolate's leases without waiting on a limiter object.
 * `reserveTokens` is what the request may spend of a tokens limit (see `tokenReserve`), taken up
 * front (at most the whole limit) and settled by `chargeTokens`.
 */
export async function enforceLimits(
  c: Context<AppEnv>,
  cls: LimitClass,
  fast: boolean,
  reserveTokens = 1,
): Promise<Admitted> {
  c.set("limitClass", cls);
  const config = loadLimits(c.env);
  const isolate = isolateLimiter(c.env);
  const waitUntil = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
  const prefix = ipPrefix(c.req.header("CF-Connecting-IP"));
  const principal = c.get("principal");
  const plan = cachedLimitsFor(config, cls, {
    principal,
    prefix,
    prefixThrottled: prefix !== undefined && isolate.throttleOf(`ip:${prefix}`) !== null,
  });
  if (prefix) noteFreeTraffic(c, prefix);
  // The tokens checks cost the request's reservation (at most the whole limit), settled after it.
  const reserved: Check[] = [];
  const checks =
    plan.tokens.length === 0
      ? plan.checks
      : plan.checks.map((check) => {
          if (!plan.tokens.includes(check)) return check;
          const held = { ...check, cost: Math.max(1, Math.min(check.bucket.limit, Math.ceil(reserveTokens))) };
          reserved.push(held);
          return held;
        });
  const decision = await isolate.admit(checks, { fast, failClosed: config.failure[cls] === "closed", waitUntil });
  if (!decision.ok) throw refusal(decision);

  const releases: (() => void)[] = [];
  /** A request refused for concurrency gives back its slots and everything it was admitted with. */
  const refused = (error: ApiError) => {
    releases.forEach((r) => r());
    for (const check of checks) isolate.refund(check, check.cost);
    return error;
  };
  for (const slot of plan.concurrency) {
    const name = `${cls}:concurrency`;
    if (fast) {
      const key = `${slot.identity}\0${name}`;
      const held = localSlots.get(key) ?? 0;
      if (held >= slot.limit)
        throw refused(
          new ApiError("rate_limited", `Rate limit reached: ${slot.describe}. Retry after 1 s.`, {
            headers: { "Retry-After": "1", ...rateLimitHeaders(decision.state) },
            extra: { limit: `${cls}-concurrency` },
          }),
        );
      localSlots.set(key, held + 1);
      releases.push(() => localSlots.set(key, (localSlots.get(key) ?? 1) - 1));
      continue;
    }
    const stub = limiterStub(c.env, slot.identity);
    let entered: { ok: boolean; id?: string };
    try {
      entered = await stub.enter(name, slot.limit, SLOT_TTL_MS);
    } catch {
      if (config.failure[cls] === "closed")
        throw refused(
          new ApiError("unavailable", "Rate limits cannot be checked right now; retry shortly.", {
            headers: { "Retry-After": "1" },
          }),
        );
      continue; // Fail open: no slot to release.
    }
    if (!entered.ok)
      throw refused(
        new ApiError("rate_limited", `Rate limit reached: ${slot.describe}. Retry when one finishes.`, {
          headers: { "Retry-After": "1", ...rateLimitHeaders(decision.state) },
          extra: { limit: `${cls}-concurrency` },
        }),
      );
    const id = entered.id!;
    releases.push(() =>
      waitUntil(
        limiterStub(c.env, slot.identity)
          .leave(name, id)
          .catch(() => {}),
      ),
    );
  }

  let settled = false;
  function settle(used: number) {
    if (settled) return;
    settled = true;
    for (const check of reserved) {
      if (used > check.cost) isolate.charge(check, used - check.cost, waitUntil);
      else isolate.refund(check, check.cost - used);
    }
  }
  let released = false;
  return {
    get headers() {
      return rateLimitHeaders(decision.state);
    },
    release() {
      if (released) return;
      released = true;
      releases.forEach((r) => r());
      // A request that ends without metered usage spent none of its reservation.
      settle(0);
    },
    chargeTokens: settle,
  };
}

/** For routes whose class is known up front: admits, then releases when the handler is done. */
export const limit = (cls: LimitClass) =>
  createMiddleware<AppEnv>(async (c, next) => {
    const admitted = await enforceLimits(c, cls, false);
    try {
      await next();
    } finally {
      admitted.release();
      for (const [name, value] of Object.entries(admitted.headers)) c.res.headers.set(name, value);
    }
  });

/** Unauthenticated requests spend their network's limit; past it they get 429 instead of 401. */
export async function limitUnauthenticated(c: Context<AppEnv>): Promise<void> {
  const prefix = ipPrefix(c.req.header("CF-Connecting-IP"));
  if (!prefix) return;
  const config = loadLimits(c.env);
  const plan = limitsFor(config, "admin", { prefix, prefixThrottled: false });
  const decision = await isolateLimiter(c.env).admit(plan.checks, {
    fast: true,
    failClosed: false,
    waitUntil: (p) => c.executionCtx.waitUntil(p),
  });
  if (!decision.ok) throw refusal(decision);
}

/**
 * Key-creation velocity: a user creating keys faster than `keyCreationsPerUserPerHour` has the
 * account throttled (an audit record says why) and gets 429.
 */
export async function keyCreationVelocity(c: Context<AppEnv>): Promise<void> {
  const { abuse } = loadLimits(c.env);
  const { user, org } = c.get("principal");
  const decision = await isolateLimiter(c.env).admit(
    [
      {
        identity: `user:${user.id}`,
        policy: "key-creation-user",
        bucket: { name: "keys:create", limit: abuse.keyCreationsPerUserPerHour, windowMs: 3_600_000 },
        cost: 1,
        describe: `${abuse.keyCreationsPerUserPerHour} new API keys per hour per user`,
      },
    ],
    { fast: false, failClosed: false, waitUntil: (p) => c.executionCtx.waitUntil(p) },
  );
  if (decision.ok) return;
  if (!c.get("principal").throttle) {
    const until = Date.now() + abuse.throttleMinutes * 60_000;
    const reason = `more than ${abuse.keyCreationsPerUserPerHour} API keys created within an hour`;
    await recordThrottle(database(c.env.DB), {
      kind: "account",
      subject: user.id,
      orgId: org.id,
      signal: "key_creations",
      observed: abuse.keyCreationsPerUserPerHour + 1,
      threshold: abuse.keyCreationsPerUserPerHour,
      reason,
      expiresAt: until,
    });
    // This isolate applies it at once; the others within the key cache's TTL.
    keyCache(c.get("config")).evict({ userId: user.id });
  }
  throw refusal(decision);
}
