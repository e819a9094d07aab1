import { sql } from "drizzle-orm";
import { index, integer, primaryKey, real, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";
import { EVAL_AGENTS, EVAL_STATUSES } from "../../protocol/evals/api.js";
import type { LimitOverrides } from "../../protocol/limits.js";
import { ABUSE_SIGNALS, EVENT_CONTENT, PLANS, ROLES, THROTTLE_KINDS } from "../../protocol/schemas.js";

const createdAt = () =>
  integer("created_at", { mode: "timestamp_ms" })
    .notNull()
    .default(sql`(unixepoch('subsec') * 1000)`);

export const orgs = sqliteTable("orgs", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  plan: text("plan", { enum: PLANS }).notNull().default("free"),
  /** Per-org rate limit overrides (JSON, protocol/limits.ts), replacing the plan's class by class. */
  limits: text("limits", { mode: "json" }).$type<LimitOverrides>(),
  /**
   * Whether its editor events may carry content, sealed with a key the org holds
   * (docs/data-pipeline.md, "Sending events").
   */
  eventContent: text("event_content", { enum: EVENT_CONTENT }).notNull().default("none"),
  createdAt: createdAt(),
});

export const users = sqliteTable(
  "users",
  {
    id: text("id").primaryKey(),
    orgId: text("org_id")
      .notNull()
      .references(() => orgs.id, { onDelete: "cascade" }),
    email: text("email").notNull(),
    name: text("name"),
    role: text("role", { enum: ROLES }).notNull().default("member"),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex("users_email_unique").on(t.email), index("users_org_idx").on(t.orgId)],
);

/** Only the SHA-256 of a key and a short display prefix are stored; the secret never is. */
export const apiKeys = sqliteTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    orgId: text("org_id")
      .notNull()
      .references(() => orgs.id, { onDelete: "cascade" }),
    userId: text("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    name: text("name").notNull(),
    hash: text("hash").notNull(),
    prefix: text("prefix").notNull(),
    createdAt: createdAt(),
    expiresAt: integer("expires_at", { mode: "timestamp_ms" }),
    revokedAt: integer("revoked_at", { mode: "timestamp_ms" }),
    lastUsedAt: integer("last_used_at", { mode: "timestamp_ms" }),
  },
  (t) => [uniqueIndex("api_keys_hash_unique").on(t.hash), index("api_keys_org_idx").on(t.orgId)],
);

export const workspaces = sqliteTable(
  "workspaces",
  {
    id: text("id").primaryKey(),
    orgId: text("org_id")
      .notNull()
      .references(() => orgs.id, { onDelete: "cascade" }),
    name: text("name").notNull(),
    createdAt: createdAt(),
  },
  (t) => [index("workspaces_org_idx").on(t.orgId)],
);

/**
 * Tokens the inference gateway metered, summed per UTC day, key and model. `key_id` and `user_id`
 * carry no foreign key on purpose: usage is billing history and outlives a key or user; only
 * deleting the org removes it.
 */
export const usageDaily = sqliteTable(
  "usage_daily",
  {
    day: text("day").notNull(),
    orgId: text("org_id")
      .notNull()
      .references(() => orgs.id, { onDelete: "cascade" }),
    userId: text("user_id").notNull(),
    keyId: text("key_id").notNull(),
    model: text("model").notNull(),
    requests: integer("requests").notNull().default(0),
    promptTokens: integer("prompt_tokens").notNull().default(0),
    completionTokens: integer("completion_tokens").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.day, t.keyId, t.model] }), index("usage_daily_org_day_idx").on(t.orgId, t.day)],
);

/**
 * The audit record of every abuse throttle: what crossed which threshold, until when, and whether an
 * admin lifted it. The limiter objects enforce throttles; this table is what operators read and lift.
 * `org_id` is set for account throttles so that deleting the org removes them.
 */
export const abuseThrottles = sqliteTable(
  "abuse_throttles",
  {
    id: text("id").primaryKey(),
    kind: text("kind", { enum: THROTTLE_KINDS }).notNull(),
    subject: text("subject").notNull(),
    orgId: text("org_id").references(() => orgs.id, { onDelete: "cascade" }),
    signal: text("signal", { enum: ABUSE_SIGNALS }).notNull(),
    observed: integer("observed").notNull(),
    threshold: integer("threshold").notNull(),
    reason: text("reason").notNull(),
    createdAt: createdAt(),
    expiresAt: integer("expires_at", { mode: "timestamp_ms" }).notNull(),
    liftedAt: integer("lifted_at", { mode: "timestamp_ms" }),
  },
  (t) => [
    index("abuse_throttles_subject_idx").on(t.kind, t.subject),
    index("abuse_throttles_expires_idx").on(t.expiresAt),
  ],
);

/**
 * Which org each agent task belongs to, for listing and tenancy; the task itself (status, usage, its
 * log) lives in its own `AgentTask` object. Nothing here holds a prompt or code.
 */
export const agentTasks = sqliteTable(
  "agent_tasks",
  {
    id: text("id").primaryKey(),
    orgId: text("org_id")
      .notNull()
      .references(() => orgs.id, { onDelete: "cascade" }),
    userId: text("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    model: text("model").notNull(),
    /** `agent` (the task API's), `env` (an environment session) or `rollout` (a run's member): each API lists its own. */
    kind: text("kind", { enum: ["agent", "env", "rollout"] })
      .notNull()
      .default("agent"),
    createdAt: createdAt(),
  },
  (t) => [index("agent_tasks_org_created_idx").on(t.orgId, t.createdAt)],
);

/**
 * An org's task sets: the manifest of each (its tasks' archive hashes, sizes and honoured settings,
 * in order; a task is named by its index or its hash). The tasks' names, instructions and files stay
 * with the client and the sandbox host.
 */
export const taskSets = sqliteTable(
  "task_sets",
  {
    id: text("id").primaryKey(),
    orgId: text("org_id")
      .notNull()
      .references(() => orgs.id, { onDelete: "cascade" }),
    userId: text("user_id")
      .notNull()
      .references(() => users.id, { onDelete: "cascade" }),
    /** JSON: `[{ sha256, bytes, settings }]`. */
    manifest: text("manifest").notNull(),
    tasks: integer("tasks").notNull(),
    createdAt: createdAt(),
  },
  (t) => [index("task_sets_org_created_idx").on(t.orgId, t.createdAt)],
);

/**
 * Each org's X25519 public key that rollout content is sealed to (`PUT /v1/envs/keys`): only the
 * public half is ever sent; the org keeps the private key and opens its exported rows with it.
 */
export const orgSealKeys = sqliteTable("org_seal_keys", {
  orgId: text("org_id")
    .primaryKey()
    .references(() => orgs.id, { onDelete: "cascade" }),
  keyId: text("key_id").notNull(),
  /** Raw 32 bytes, base64url. */
  publicKey: text("public_key").notNull(),
  userId: text("user_id")
    .notNull()
    .references(() => users.id, { onDelete: "cascade" }),
  createdAt: createdAt(),
});

/**
 * Each org's eval runs: the settings, the rollout run that plays them and, once the run has ended,
 * its summary (`summary_json`: the report's figures and each task's mean reward, numbers only). The
 * rollout run's object holds every attempt; this row lists runs and finds a task set's latest
 * oracle and noop runs, which mark its broken tasks.
 */
export const evalRuns = sqliteTable(
  "eval_runs",
  {
    id: text("id").primaryKey(),
    orgId: text("org_id")
      .notNull()
      .references(() => orgs.id, { onDelete: "cascade" }),
    tasksetId: text("taskset_id").notNull(),
    rolloutRunId: text("rollout_run_id").notNull(),
    agent: text("agent", { enum: EVAL_AGENTS }).notNull(),
    model: text("model"),
    checkpoint: text("checkpoint"),
    attempts: integer("attempts").notNull(),
    concurrency: integer("concurrency").notNull(),
    /** USD per million tokens when the run was made; null when the model's pool names no price. */
    priceInput: real("price_input"),
    priceOutput: real("price_output"),
    status: text("status", { enum: EVAL_STATUSES }).notNull().default("running"),
    createdAt: createdAt(),
    endedAt: integer("ended_at", { mode: "timestamp_ms" }),
    summaryJson: text("summary_json"),
  },
  (t) => [
    index("eval_runs_org_created_idx").on(t.orgId, t.createdAt),
    index("eval_runs_taskset_idx").on(t.orgId, t.tasksetId, t.agent, t.createdAt),
  ],
);
