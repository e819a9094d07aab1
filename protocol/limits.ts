/**
 * Rate limits, quotas and abuse thresholds, as data: per plan and class, applied per API key, user
 * and org, and per IP prefix for unauthenticated and free-tier traffic. The edge validates
 * `RATE_LIMITS` with this schema (defaults below); an org's overrides use the same shapes.
 */
import { z } from "zod";

/** What a request spends its limits on. */
export const LIMIT_CLASSES = ["tab", "chat", "apply", "embed", "index", "events", "admin"] as const;
export const LimitClass = z.enum(LIMIT_CLASSES);
export type LimitClass = z.infer<typeof LimitClass>;

/** Who a limit counts: the API key, its user, its org, or the client's IP prefix (/24, /64). */
export const LIMIT_SCOPES = ["key", "user", "org", "ip"] as const;
export const LimitScope = z.enum(LIMIT_SCOPES);
export type LimitScope = z.infer<typeof LimitScope>;

export const Rate = z
  .object({
    limit: z.number().int().min(1).max(1_000_000_000),
    windowSeconds: z.number().int().min(1).max(86_400),
  })
  .strict();
export type Rate = z.infer<typeof Rate>;

/** The limits of one class for one scope; any may be absent (no limit). */
export const Limits = z
  .object({
    /** Requests per window (GCRA: a steady rate with a burst of the whole window). */
    requests: Rate.optional(),
    /** Model tokens per window, charged from metered usage after each response. */
    tokens: Rate.optional(),
    /** Requests in flight at once. */
    concurrency: z.number().int().min(1).max(1_000_000).optional(),
  })
  .strict();
export type Limits = z.infer<typeof Limits>;

export const ScopedLimits = z
  .object({ key: Limits.optional(), user: Limits.optional(), org: Limits.optional() })
  .strict();
export type ScopedLimits = z.infer<typeof ScopedLimits>;

export const PlanLimits = z.partialRecord(LimitClass, ScopedLimits);
export type PlanLimits = z.infer<typeof PlanLimits>;

/**
 * When a limiter object cannot be reached: `open` admits within conservative limits kept in the
 * isolate (a share of the real one), `closed` refuses with 503.
 */
export const FailureMode = z.enum(["open", "closed"]);

export const AbuseThresholds = z
  .object({
    /** Free accounts created from one IP prefix in an hour before the prefix is throttled. */
    newFreeAccountsPerPrefixPerHour: z.number().int().min(1).default(20),
    /** Distinct free accounts sending traffic from one prefix in an hour. */
    activeFreeAccountsPerPrefixPerHour: z.number().int().min(1).default(50),
    /** Keys one user creates in an hour before the account is throttled. */
    keyCreationsPerUserPerHour: z.number().int().min(1).default(20),
    /** How long an automatic throttle lasts unless an admin lifts it first. */
    throttleMinutes: z
      .number()
      .int()
      .min(1)
      .max(7 * 24 * 60)
      .default(60),
    /** What a throttled account, or free-tier traffic from a throttled prefix, may still do per class. */
    throttled: z.partialRecord(LimitClass, Limits).default({
      tab: { requests: { limit: 10, windowSeconds: 60 } },
      chat: { requests: { limit: 2, windowSeconds: 60 } },
      apply: { requests: { limit: 2, windowSeconds: 60 } },
      embed: { requests: { limit: 10, windowSeconds: 60 } },
      index: { requests: { limit: 10, windowSeconds: 60 } },
      events: { requests: { limit: 10, windowSeconds: 60 } },
      admin: { requests: { limit: 10, windowSeconds: 60 } },
    }),
  })
  .strict();
export type AbuseThresholds = z.infer<typeof AbuseThresholds>;

/**
 * What a gateway request reserves of a tokens limit before it runs: its prompt at one token per
 * `CHARS_PER_TOKEN` characters plus its `max_tokens` (`max_completion_tokens`), or
 * `DEFAULT_COMPLETION_RESERVE` when it sets none. Settled against metered usage afterwards.
 */
export const TOKEN_RESERVE = { CHARS_PER_TOKEN: 3, DEFAULT_COMPLETION_RESERVE: 1024 } as const;

/**
 * Characters of text in a request body's prompt fields (strings at any depth); a number counts as
 * one token's worth, as in a prompt or embedding input sent as token ids.
 */
function textLength(value: unknown, depth = 0): number {
  if (typeof value === "string") return value.length;
  if (typeof value === "number") return TOKEN_RESERVE.CHARS_PER_TOKEN;
  if (depth > 8 || value === null || typeof value !== "object") return 0;
  let total = 0;
  for (const item of Array.isArray(value) ? value : Object.values(value)) total += textLength(item, depth + 1);
  return total;
}

const PROMPT_FIELDS = ["messages", "prompt", "suffix", "input", "tools", "prediction"] as const;

/**
 * What a gateway request reserves of its tokens limits (`TOKEN_RESERVE`); `generates` is false for
 * embeddings, which produce no tokens. A chat completion asking for `n` choices reserves each
 * choice's completion.
 */
export function tokenReserve(body: Record<string, unknown>, generates = true): number {
  let chars = 0;
  for (const field of PROMPT_FIELDS) chars += textLength(body[field]);
  const limit = body.max_completion_tokens ?? body.max_tokens;
  const completion = !generates ? 0 : typeof limit === "number" ? limit : TOKEN_RESERVE.DEFAULT_COMPLETION_RESERVE;
  const choices = typeof body.n === "number" && body.n > 1 ? body.n : 1;
  return Math.ceil(chars / TOKEN_RESERVE.CHARS_PER_TOKEN) + completion * choices;
}

const minute = (limit: number) => ({ limit, windowSeconds: 60 });
const hour = (limit: number) => ({ limit, windowSeconds: 3600 });

/** The limits a deployment starts with; `RATE_LIMITS` replaces any part of them. */
export const DEFAULT_PLAN_LIMITS: Record<"free" | "pro" | "business", PlanLimits> = {
  free: {
    tab: { key: { requests: minute(300), concurrency: 4 }, user: { requests: minute(300) } },
    chat: { key: { requests: minute(20), tokens: hour(200_000), concurrency: 2 }, user: { tokens: hour(200_000) } },
    apply: { key: { requests: minute(20), concurrency: 2 } },
    embed: { key: { requests: minute(120) } },
    index: { key: { requests: minute(120) } },
    events: { key: { requests: minute(120) } },
    admin: { key: { requests: minute(30) } },
  },
  pro: {
    tab: { key: { requests: minute(1_200), concurrency: 8 }, user: { requests: minute(1_200) } },
    chat: {
      key: { requests: minute(120), tokens: hour(2_000_000), concurrency: 8 },
      user: { tokens: hour(2_000_000) },
    },
    apply: { key: { requests: minute(120), concurrency: 8 } },
    embed: { key: { requests: minute(600) } },
    index: { key: { requests: minute(600) } },
    events: { key: { requests: minute(600) } },
    admin: { key: { requests: minute(120) } },
  },
  business: {
    tab: { key: { requests: minute(1_200), concurrency: 8 }, org: { requests: minute(100_000) } },
    chat: {
      key: { requests: minute(240), tokens: hour(4_000_000), concurrency: 16 },
      org: { tokens: hour(100_000_000) },
    },
    apply: { key: { requests: minute(240), concurrency: 16 } },
    embed: { key: { requests: minute(1_200) } },
    index: { key: { requests: minute(1_200) } },
    events: { key: { requests: minute(1_200) } },
    admin: { key: { requests: minute(240) } },
  },
};

export const LimitsConfig = z
  .object({
    plans: z.object({ free: PlanLimits, pro: PlanLimits, business: PlanLimits }).partial().default({}),
    /** Per IP prefix: unauthenticated requests (every class) and free-tier traffic. */
    ipPrefix: z
      .partialRecord(LimitClass, Limits)
      .default({ tab: { requests: minute(3_000) }, chat: { requests: minute(300) }, admin: { requests: minute(60) } }),
    failure: z.partialRecord(LimitClass, FailureMode).default({
      tab: "open",
      chat: "open",
      apply: "open",
      embed: "open",
      index: "open",
      events: "open",
      admin: "closed",
    }),
    /**
     * How much of a limit an isolate may hold as a local lease (the fast path; docs/rate-limits.md,
     * "How it is enforced").
     */
    lease: z
      .object({
        /** Largest lease, as a share of the limit. */
        maxShare: z.number().min(0.0001).max(0.5).default(0.005),
        /** Unused allowance goes back to the limiter after this long. */
        ttlMs: z.number().int().min(50).max(60_000).default(1_000),
      })
      .strict()
      .prefault({}),
    abuse: AbuseThresholds.prefault({}),
  })
  .strict();
export type LimitsConfig = z.infer<typeof LimitsConfig>;
export type LimitsConfigInput = z.input<typeof LimitsConfig>;

/** Per-org overrides (admin API): replace the plan's limits class by class. */
export const LimitOverrides = PlanLimits;
export type LimitOverrides = z.infer<typeof LimitOverrides>;
