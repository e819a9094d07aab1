/**
 * Which limits a request spends: the plan's (or the org's overrides') per class and scope, the IP
 * prefix's for free-tier and unauthenticated traffic, and the stricter ones of a throttled prefix
 * or account. Turns them into checks for the isolate's limiter.
 */
import {
  DEFAULT_PLAN_LIMITS,
  LimitsConfig,
  type LimitClass,
  type Limits,
  type LimitScope,
  type PlanLimits,
} from "../../protocol/limits.js";
import type { Principal } from "../auth/principal.js";
import { ConfigError } from "../config.js";
import type { Check } from "./limiter.js";

const loaded = new WeakMap<object, LimitsConfig>();

/** `RATE_LIMITS` (JSON) over the defaults: a plan's class replaces that class only. */
export function loadLimits(env: Env): LimitsConfig {
  const cached = loaded.get(env);
  if (cached) return cached;
  const raw = (env as unknown as Record<string, unknown>).RATE_LIMITS;
  let input: unknown = {};
  if (raw !== undefined && raw !== "") {
    try {
      input = typeof raw === "string" ? JSON.parse(raw) : raw;
    } catch (err) {
      throw new ConfigError(`RATE_LIMITS is not valid JSON: ${(err as Error).message}`);
    }
  }
  const parsed = LimitsConfig.safeParse(input);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
    throw new ConfigError(`Invalid RATE_LIMITS: ${issues.join("; ")}`);
  }
  const config = parsed.data;
  for (const plan of Object.keys(DEFAULT_PLAN_LIMITS) as (keyof typeof DEFAULT_PLAN_LIMITS)[])
    config.plans[plan] = { ...DEFAULT_PLAN_LIMITS[plan], ...config.plans[plan] };
  loaded.set(env, config);
  return config;
}

/** The client's network: the /24 of an IPv4 address, the /64 of an IPv6 one. */
export function ipPrefix(ip: string | undefined): string | undefined {
  if (!ip) return undefined;
  const v4 = ip.match(/^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/);
  if (v4) return `${v4[1]}.${v4[2]}.${v4[3]}.0/24`;
  if (!ip.includes(":")) return undefined;
  const [head = "", tail = ""] = ip.split("::");
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  const missing = 8 - left.length - right.length;
  const groups = ip.includes("::") ? [...left, ...Array<string>(Math.max(0, missing)).fill("0"), ...right] : left;
  if (groups.length !== 8 || groups.some((g) => !/^[0-9a-f]{1,4}$/i.test(g))) return undefined;
  return `${groups
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(":")}::/64`;
}

/** 1234567 as "1,234,567" (built on every request: `toLocaleString` costs far more). */
const number = (n: number) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
const per = (windowSeconds: number) =>
  windowSeconds === 60 ? "per minute" : windowSeconds === 3600 ? "per hour" : `per ${number(windowSeconds)} s`;
const SCOPE_WORDS: Record<LimitScope, string> = { key: "API key", user: "user", org: "org", ip: "network" };

function checksOf(limits: Limits | undefined, cls: LimitClass, scope: LimitScope, id: string, owner: string): Check[] {
  const checks: Check[] = [];
  const identity = `${scope}:${id}`;
  if (limits?.requests)
    checks.push({
      identity,
      policy: `${cls}-${scope}`,
      bucket: { name: `${cls}:requests`, limit: limits.requests.limit, windowMs: limits.requests.windowSeconds * 1000 },
      cost: 1,
      describe: `${owner} ${number(limits.requests.limit)} ${cls} requests ${per(limits.requests.windowSeconds)} per ${SCOPE_WORDS[scope]}`,
    });
  if (limits?.tokens)
    checks.push({
      identity,
      policy: `${cls}-tokens-${scope}`,
      bucket: { name: `${cls}:tokens`, limit: limits.tokens.limit, windowMs: limits.tokens.windowSeconds * 1000 },
      // Replaced by the request's reservation (`tokenReserve`) in `enforceLimits`, settled after the response.
      cost: 1,
      describe: `${owner} ${number(limits.tokens.limit)} ${cls} tokens ${per(limits.tokens.windowSeconds)} per ${SCOPE_WORDS[scope]}`,
    });
  return checks;
}

export interface Caller {
  principal?: Principal;
  prefix?: string;
  /** The prefix is throttled for abuse (as its limiter object last said). */
  prefixThrottled: boolean;
}

export interface Plan {
  checks: Check[];
  /** Concurrency limits of the class, by identity. */
  concurrency: { identity: string; limit: number; describe: string }[];
  /** The tokens checks, to charge from usage after the response. */
  tokens: Check[];
}

const plans = new WeakMap<LimitsConfig, WeakMap<Principal, Map<string, Plan>>>();

/**
 * `limitsFor`, built once per principal (the key cache's object, replaced when it refreshes) and
 * class rather than on every request: the hot path only looks it up.
 */
export function cachedLimitsFor(config: LimitsConfig, cls: LimitClass, caller: Caller): Plan {
  const { principal } = caller;
  if (!principal) return limitsFor(config, cls, caller);
  const throttled = principal.throttle ? principal.throttle.until > Date.now() : false;
  const key = `${cls}\0${caller.prefix ?? ""}\0${caller.prefixThrottled}\0${throttled}`;
  let byPrincipal = plans.get(config);
  if (!byPrincipal) plans.set(config, (byPrincipal = new WeakMap()));
  let byKey = byPrincipal.get(principal);
  if (!byKey) byPrincipal.set(principal, (byKey = new Map()));
  let plan = byKey.get(key);
  if (!plan) byKey.set(key, (plan = limitsFor(config, cls, caller)));
  return plan;
}

/** Every limit a request of class `cls` spends. */
export function limitsFor(config: LimitsConfig, cls: LimitClass, caller: Caller): Plan {
  const plan: Plan = { checks: [], concurrency: [], tokens: [] };
  const { principal, prefix } = caller;
  if (principal) {
    const tier = principal.org.plan;
    const overrides: PlanLimits | undefined = principal.org.limits ?? undefined;
    const scoped = overrides?.[cls] ?? config.plans[tier]?.[cls] ?? {};
    const owner = overrides?.[cls] ? "your org's" : `the ${tier} plan's`;
    const ids: Record<Exclude<LimitScope, "ip">, string> = {
      key: principal.key.id,
      user: principal.user.id,
      org: principal.org.id,
    };
    for (const scope of ["key", "user", "org"] as const) {
      const limits = scoped[scope];
      plan.checks.push(...checksOf(limits, cls, scope, ids[scope], owner));
      if (limits?.concurrency)
        plan.concurrency.push({
          identity: `${scope}:${ids[scope]}`,
          limit: limits.concurrency,
          describe: `${owner} ${limits.concurrency} concurrent ${cls} requests per ${SCOPE_WORDS[scope]}`,
        });
    }
    if (principal.throttle && principal.throttle.until > Date.now()) {
      const strict = config.abuse.throttled[cls];
      plan.checks.push(...checksOf(strict, cls, "user", `${principal.user.id}:throttled`, "a throttled account's"));
    }
  }
  const free = !principal || principal.org.plan === "free";
  if (free && prefix) {
    const limits = config.ipPrefix[cls];
    plan.checks.push(...checksOf(limits, cls, "ip", prefix, "the free tier's"));
    if (caller.prefixThrottled)
      plan.checks.push(
        ...checksOf(config.abuse.throttled[cls], cls, "ip", `${prefix}:throttled`, "a throttled network's"),
      );
  }
  plan.tokens = plan.checks.filter((c) => c.bucket.name.endsWith(":tokens"));
  return plan;
}
