/**
 * The wire protocol: every request and response body the edge and the client exchange.
 * The edge validates what it receives with these schemas and the client validates what it
 * gets back, so the two can never silently drift apart.
 */
import { z } from "zod";
import { ERROR_CODES } from "./errors.js";
import { LimitOverrides } from "./limits.js";
import { TreeStatus } from "./sync.js";

export const PLANS = ["free", "pro", "business"] as const;
export const Plan = z.enum(PLANS);
export type Plan = z.infer<typeof Plan>;

export const ROLES = ["owner", "member"] as const;
export const Role = z.enum(ROLES);
export type Role = z.infer<typeof Role>;

const timestamp = z.iso.datetime();

/**
 * Control characters (NUL, escapes, line breaks) and unpaired surrogates: none belongs in a name,
 * and each one breaks a terminal table, a log line, or the name's own UTF-8 encoding.
 */
const UNPRINTABLE = /[\p{Cc}\p{Cs}\p{Zl}\p{Zp}]/u;

/** Anything a user names through the API. */
const label = (max: number) =>
  z
    .string()
    .trim()
    .min(1)
    .max(max)
    .refine((value) => !UNPRINTABLE.test(value), "must not contain control characters or unpaired surrogates");
const name = label(100);

/**
 * Whether an org's editor events may carry content: `none` (the default) refuses any; `sealed`
 * takes it encrypted with a key the org holds (`sealContent`), stored as it came.
 */
export const EVENT_CONTENT = ["none", "sealed"] as const;
export const EventContent = z.enum(EVENT_CONTENT);
export type EventContent = z.infer<typeof EventContent>;

export const Org = z.object({
  id: z.string(),
  name: z.string(),
  plan: Plan,
  /** Rate limits that replace the plan's, class by class (docs/rate-limits.md). */
  limits: LimitOverrides.nullable().default(null),
  eventContent: EventContent.default("none"),
  createdAt: timestamp,
});
export type Org = z.infer<typeof Org>;

export const User = z.object({
  id: z.string(),
  orgId: z.string(),
  email: z.string(),
  name: z.string().nullable(),
  role: Role,
  createdAt: timestamp,
});
export type User = z.infer<typeof User>;

export const ApiKeyInfo = z.object({
  id: z.string(),
  orgId: z.string(),
  userId: z.string(),
  name: z.string(),
  prefix: z.string(),
  createdAt: timestamp,
  expiresAt: timestamp.nullable(),
  revokedAt: timestamp.nullable(),
  lastUsedAt: timestamp.nullable(),
});
export type ApiKeyInfo = z.infer<typeof ApiKeyInfo>;

/** Returned once, when a key is created: the only time the secret is ever shown. */
export const CreatedApiKey = ApiKeyInfo.extend({ key: z.string() });
export type CreatedApiKey = z.infer<typeof CreatedApiKey>;

export const Me = z.object({ org: Org, user: User, key: ApiKeyInfo });
export type Me = z.infer<typeof Me>;

export const Workspace = z.object({ id: z.string(), orgId: z.string(), name: z.string(), createdAt: timestamp });
export type Workspace = z.infer<typeof Workspace>;

export const WorkspaceDetail = Workspace.extend({ tree: TreeStatus });
export type WorkspaceDetail = z.infer<typeof WorkspaceDetail>;

export const Health = z.object({ status: z.literal("ok"), version: z.string(), time: timestamp });
export type Health = z.infer<typeof Health>;

export const listOf = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item) });

// Requests. `strict` so that a misspelt field is an error rather than silently ignored.
export const CreateOrgRequest = z.strictObject({ name, plan: Plan.default("free") });
export type CreateOrgRequest = z.input<typeof CreateOrgRequest>;

export const UpdateOrgRequest = z
  .strictObject({
    name: name.optional(),
    plan: Plan.optional(),
    limits: LimitOverrides.nullable().optional(),
    eventContent: EventContent.optional(),
  })
  .refine(
    (body) =>
      body.name !== undefined ||
      body.plan !== undefined ||
      body.limits !== undefined ||
      body.eventContent !== undefined,
    "Give at least one of name, plan, limits or eventContent",
  );
export type UpdateOrgRequest = z.input<typeof UpdateOrgRequest>;

export const CreateUserRequest = z.strictObject({
  email: z
    .email()
    .max(254)
    .transform((email) => email.toLowerCase()),
  name: name.optional(),
  role: Role.default("member"),
});
export type CreateUserRequest = z.input<typeof CreateUserRequest>;

const expiresAt = z.iso
  .datetime({ offset: true })
  .refine((value) => Date.parse(value) > Date.now(), "expiresAt must be in the future");

export const CreateKeyRequest = z.strictObject({ name, expiresAt: expiresAt.optional() });
export type CreateKeyRequest = z.input<typeof CreateKeyRequest>;

export const AdminCreateKeyRequest = CreateKeyRequest.extend({ userId: z.string().min(1).max(64) });
export type AdminCreateKeyRequest = z.input<typeof AdminCreateKeyRequest>;

/** Clients send an encrypted label here, which runs longer than a human name. */
export const CreateWorkspaceRequest = z.strictObject({ name: label(400) });
export type CreateWorkspaceRequest = z.input<typeof CreateWorkspaceRequest>;

export const Problem = z
  .object({
    type: z.string(),
    title: z.string(),
    status: z.number().int(),
    detail: z.string().optional(),
    instance: z.string().optional(),
    code: z.enum(Object.keys(ERROR_CODES) as [keyof typeof ERROR_CODES, ...(keyof typeof ERROR_CODES)[]]),
    errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  })
  // A problem's extension members (`limit`, `refused`, …) stay for the caller to read.
  .loose();
export type Problem = z.infer<typeof Problem>;

// Usage metering (`GET /v1/usage`): token counts the inference gateway recorded, summed per UTC day.
export const USAGE_DIMENSIONS = ["day", "model", "key", "user"] as const;
export const UsageDimension = z.enum(USAGE_DIMENSIONS);
export type UsageDimension = z.infer<typeof UsageDimension>;

/** A UTC calendar day, `YYYY-MM-DD`; impossible dates such as 2026-02-30 are refused. */
export const UsageDay = z.iso.date();

const tokens = z.number().int().nonnegative();
export const UsageCounts = z.object({
  requests: tokens,
  promptTokens: tokens,
  completionTokens: tokens,
  totalTokens: tokens,
});
export type UsageCounts = z.infer<typeof UsageCounts>;

/** One group of a report: only the dimensions it was grouped by are present. */
export const UsageRow = UsageCounts.extend({
  day: UsageDay.optional(),
  model: z.string().optional(),
  keyId: z.string().optional(),
  userId: z.string().optional(),
});
export type UsageRow = z.infer<typeof UsageRow>;

export const UsageReport = z.object({
  from: UsageDay,
  to: UsageDay,
  groupBy: z.array(UsageDimension),
  rows: z.array(UsageRow),
  totals: UsageCounts,
});
export type UsageReport = z.infer<typeof UsageReport>;

/** `from` and `to` are inclusive UTC days; the edge defaults to the last 30 days, grouped by day and model. */
export interface UsageQuery {
  from?: string;
  to?: string;
  groupBy?: UsageDimension[];
}

// Abuse throttles (`/admin/abuse`): the audit record of each automatic (or admin) throttle.
export const THROTTLE_KINDS = ["prefix", "account"] as const;
export const ThrottleKind = z.enum(THROTTLE_KINDS);
export type ThrottleKind = z.infer<typeof ThrottleKind>;

export const ABUSE_SIGNALS = ["active_free_accounts", "new_free_accounts", "key_creations", "admin"] as const;
export const AbuseSignal = z.enum(ABUSE_SIGNALS);
export type AbuseSignal = z.infer<typeof AbuseSignal>;

/** `subject` is an IP prefix ("203.0.113.0/24", "2001:db8:1:2::/64") or a user id, by `kind`. */
export const AbuseThrottle = z.object({
  id: z.string(),
  kind: ThrottleKind,
  subject: z.string(),
  orgId: z.string().nullable(),
  signal: AbuseSignal,
  /** The signal's value when it crossed `threshold`. */
  observed: z.number().int(),
  threshold: z.number().int(),
  reason: z.string(),
  createdAt: timestamp,
  expiresAt: timestamp,
  liftedAt: timestamp.nullable(),
  /** Neither lifted nor expired when the edge answered. */
  active: z.boolean(),
});
export type AbuseThrottle = z.infer<typeof AbuseThrottle>;
