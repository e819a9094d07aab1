/**
 * Failed sign-ins to the dashboard, counted in RateLimiter objects (token buckets, as every limit
 * of the edge is): per network (the client's /24 or /64, as the API's limits count networks) and
 * per edge, since there is one admin secret and so one account. The edge-wide count is what holds
 * when the network cannot be told: `CF-Connecting-IP` is Cloudflare's to set, and a local edge
 * takes it from whoever sends it.
 *
 * Each attempt takes one from both buckets before the secret is compared and a right secret gives
 * them back, so only failures count and guesses sent in parallel cannot overshoot. Once either is
 * spent every attempt is refused, the right secret included: answering it would tell it apart.
 */
import type { BucketSpec, LeaseRequest } from "../../durable-objects/buckets.js";
import { ipPrefix } from "../limits/policy.js";
import { ApiError } from "../problem.js";

export const LOGIN_LIMITS = {
  network: { limit: 10, windowMs: 15 * 60_000, describe: "10 failed sign-ins per 15 minutes from one network" },
  edge: { limit: 100, windowMs: 60 * 60_000, describe: "100 failed sign-ins per hour to this edge's dashboard" },
} as const;

type Scope = keyof typeof LOGIN_LIMITS;

export interface LoginAttempt {
  /** The secret was right: the attempt is given back and counts for nothing. */
  succeeded(): Promise<void>;
}

function bucketOf(scope: Scope): BucketSpec {
  const { limit, windowMs } = LOGIN_LIMITS[scope];
  return { name: "dashboard-login:failures", limit, windowMs };
}

const lease = (env: Env, identity: string, request: Omit<LeaseRequest, "bucket">, scope: Scope) =>
  env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(identity))
    .lease([{ bucket: bucketOf(scope), ...request }])
    .then(({ grants }) => grants[0]!);

/** Takes one sign-in attempt for the client at `ip`, or throws 429 (`Retry-After`) when either count is spent. */
export async function beginLogin(env: Env, ip: string | undefined): Promise<LoginAttempt> {
  const identities: Record<Scope, string> = {
    network: `dashboard-login:net:${ipPrefix(ip) ?? "unknown"}`,
    edge: "dashboard-login:edge",
  };
  const scopes = Object.keys(identities) as Scope[];
  const giveBack = (which: Scope[]) =>
    Promise.all(which.map((s) => lease(env, identities[s], { need: 0, want: 0, returned: 1, debt: 0 }, s)));
  let grants;
  try {
    grants = await Promise.all(
      scopes.map((s) => lease(env, identities[s], { need: 1, want: 0, returned: 0, debt: 0 }, s)),
    );
  } catch (err) {
    // Failing closed: with the counts out of reach, sign-ins would go unthrottled.
    console.error(JSON.stringify({ level: "warn", message: "sign-in throttle unreachable", error: String(err) }));
    throw new ApiError("unavailable", "Sign-ins cannot be checked right now; retry shortly.", {
      headers: { "Retry-After": "5" },
    });
  }
  const refused = scopes.flatMap((s, i) => (grants[i]!.granted > 0 ? [] : [{ scope: s, grant: grants[i]! }]));
  if (refused.length > 0) {
    await giveBack(scopes.filter((s, i) => grants[i]!.granted > 0));
    const worst = refused.reduce((a, b) => (b.grant.retryAfterMs > a.grant.retryAfterMs ? b : a));
    const seconds = Math.max(1, Math.ceil(worst.grant.retryAfterMs / 1000));
    throw new ApiError(
      "rate_limited",
      `Too many failed sign-ins: ${LOGIN_LIMITS[worst.scope].describe}. Retry after ${seconds} s.`,
      { headers: { "Retry-After": String(seconds) }, extra: { limit: `dashboard-login-${worst.scope}` } },
    );
  }
  return { succeeded: async () => void (await giveBack(scopes)) };
}
