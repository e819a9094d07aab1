/**
 * The lake: what Sextant records, as Parquet on R2, one table per kind of record, partitioned by
 * UTC day and hour of the record's own time:
 *
 *   lake/<table>/day=YYYY-MM-DD/hour=HH/<file>.parquet
 *   lake/<table>/day=YYYY-MM-DD/hour=HH/_manifest.json
 *
 * The tables' columns are fixed here, shared by the edge that writes them, the admin API that lists
 * them and the CLI that exports them. No column holds code, a prompt, a completion or a path in the
 * clear: a rollout's content is sealed to its org's public key (`envs/seal.ts`) before it is a row.
 */
import { z } from "zod";
import { UsageDay } from "./schemas.js";

export type ColumnType = "STRING" | "TIMESTAMP" | "INT32" | "DOUBLE" | "BOOLEAN";

export interface Column {
  name: string;
  type: ColumnType;
}

const c = (name: string, type: ColumnType): Column => ({ name, type });

/** Editor events (`POST /v1/events`), one row per event id and org. */
const EDITOR_EVENTS: Column[] = [
  c("event_id", "STRING"),
  c("type", "STRING"),
  c("at", "TIMESTAMP"),
  c("received_at", "TIMESTAMP"),
  c("org_id", "STRING"),
  c("user_id", "STRING"),
  c("key_id", "STRING"),
  c("request_id", "STRING"),
  c("session_id", "STRING"),
  c("model", "STRING"),
  c("language", "STRING"),
  c("file_id", "STRING"),
  c("client", "STRING"),
  c("shown_chars", "INT32"),
  c("shown_lines", "INT32"),
  c("latency_ms", "INT32"),
  c("accepted_chars", "INT32"),
  c("partial", "BOOLEAN"),
  c("after_s", "INT32"),
  c("retained_ratio", "DOUBLE"),
  c("rating", "STRING"),
  c("lines_changed", "INT32"),
  c("task_id", "STRING"),
  c("outcome", "STRING"),
  c("content_key_id", "STRING"),
  c("content", "STRING"),
];

/** The edge's own record of each model request through the gateway, joined to events by `request_id`. */
const EDGE_REQUESTS: Column[] = [
  c("record_id", "STRING"),
  c("request_id", "STRING"),
  c("at", "TIMESTAMP"),
  c("started_at", "TIMESTAMP"),
  c("org_id", "STRING"),
  c("user_id", "STRING"),
  c("key_id", "STRING"),
  c("surface", "STRING"),
  c("pool", "STRING"),
  c("class", "STRING"),
  c("model", "STRING"),
  c("served_model", "STRING"),
  c("checkpoint", "STRING"),
  c("endpoint", "STRING"),
  c("region", "STRING"),
  c("ttft_ms", "INT32"),
  c("total_ms", "INT32"),
  c("prompt_tokens", "INT32"),
  c("completion_tokens", "INT32"),
  c("attempts", "INT32"),
  c("failovers", "INT32"),
  c("hedged", "BOOLEAN"),
  c("outcome", "STRING"),
];

/** Requests the edge refused for a rate limit (429) or to shed load (503), whatever the route. */
const REFUSALS: Column[] = [
  c("record_id", "STRING"),
  c("request_id", "STRING"),
  c("at", "TIMESTAMP"),
  c("org_id", "STRING"),
  c("user_id", "STRING"),
  c("key_id", "STRING"),
  c("route", "STRING"),
  c("class", "STRING"),
  c("code", "STRING"),
  c("limit", "STRING"),
];

/**
 * One row per rollout (an environment run's member, or an env session), written when its reward and
 * advantage are known. `at` is the rollout's start, so that every row of a rollout (this and its steps)
 * falls in one partition whoever sends it. `content` is sealed (`envs/seal.ts`): the opening messages.
 */
const ROLLOUTS: Column[] = [
  c("rollout_id", "STRING"),
  c("run_id", "STRING"),
  c("org_id", "STRING"),
  c("at", "TIMESTAMP"),
  c("member", "INT32"),
  c("group_index", "INT32"),
  c("task_sha256", "STRING"),
  c("task_index", "INT32"),
  c("seed", "INT32"),
  c("policy", "STRING"),
  c("checkpoint", "STRING"),
  c("reward", "DOUBLE"),
  c("components", "STRING"),
  c("advantage", "DOUBLE"),
  c("turns", "INT32"),
  c("tool_calls", "INT32"),
  c("prompt_tokens", "INT32"),
  c("completion_tokens", "INT32"),
  c("outcome", "STRING"),
  c("started_at", "TIMESTAMP"),
  c("ended_at", "TIMESTAMP"),
  c("duration_ms", "INT32"),
  c("content_key_id", "STRING"),
  c("content", "STRING"),
];

/**
 * One row per model call (`kind` = `model`: the answer, with log-probabilities and token ids when the
 * backend gave them) and per tool result (`tool`) of a rollout, in `seq` order. `at` is the rollout's
 * start (as in `rollouts`); `step_at` the step's own time. `content` is sealed.
 */
const ROLLOUT_STEPS: Column[] = [
  c("step_id", "STRING"),
  c("rollout_id", "STRING"),
  c("run_id", "STRING"),
  c("org_id", "STRING"),
  c("at", "TIMESTAMP"),
  c("step_at", "TIMESTAMP"),
  c("seq", "INT32"),
  c("turn", "INT32"),
  c("kind", "STRING"),
  c("model", "STRING"),
  c("tool", "STRING"),
  c("prompt_tokens", "INT32"),
  c("completion_tokens", "INT32"),
  c("finish_reason", "STRING"),
  c("has_logprobs", "BOOLEAN"),
  c("latency_ms", "INT32"),
  c("content_key_id", "STRING"),
  c("content", "STRING"),
];

/**
 * One row per attempt of an eval run (a member of its rollout run), written when the attempt ends.
 * `attempt_id` is `<eval_id>.<member>` and `at` the eval run's creation, so that however often an
 * attempt's row is sent (a redelivery, a run that resumed after a crash), the lake keeps one, and a
 * run's rows share its partition. `verifier_log` is the verifier's output, sealed (`envs/seal.ts`).
 */
const EVAL_ATTEMPTS: Column[] = [
  c("attempt_id", "STRING"),
  c("eval_id", "STRING"),
  c("run_id", "STRING"),
  c("org_id", "STRING"),
  c("at", "TIMESTAMP"),
  c("taskset", "STRING"),
  c("task_index", "INT32"),
  c("task_sha256", "STRING"),
  c("attempt", "INT32"),
  c("member", "INT32"),
  c("agent", "STRING"),
  c("model", "STRING"),
  c("checkpoint", "STRING"),
  c("reward", "DOUBLE"),
  c("passed", "BOOLEAN"),
  c("outcome", "STRING"),
  c("failure_kind", "STRING"),
  c("tokens", "INT32"),
  c("prompt_tokens", "INT32"),
  c("completion_tokens", "INT32"),
  c("cost_usd", "DOUBLE"),
  c("turns", "INT32"),
  c("tool_calls", "INT32"),
  c("sandbox_seconds", "DOUBLE"),
  c("duration_ms", "INT32"),
  c("started_at", "TIMESTAMP"),
  c("ended_at", "TIMESTAMP"),
  c("content_key_id", "STRING"),
  c("verifier_log", "STRING"),
];

export const LAKE_TABLES = {
  editor_events: { columns: EDITOR_EVENTS, id: "event_id" },
  edge_requests: { columns: EDGE_REQUESTS, id: "record_id" },
  refusals: { columns: REFUSALS, id: "record_id" },
  rollouts: { columns: ROLLOUTS, id: "rollout_id" },
  rollout_steps: { columns: ROLLOUT_STEPS, id: "step_id" },
  eval_attempts: { columns: EVAL_ATTEMPTS, id: "attempt_id" },
} as const satisfies Record<string, { columns: Column[]; id: string }>;

export type LakeTable = keyof typeof LAKE_TABLES;
export const LakeTable = z.enum(Object.keys(LAKE_TABLES) as [LakeTable, ...LakeTable[]]);

/** One row as it travels the queue: column name to value; an absent column is null. */
export type LakeRow = Record<string, string | number | boolean | null | undefined>;

/** One queue message: rows of one table (a message never mixes tables). */
export interface LakeMessage {
  v: 1;
  table: LakeTable;
  rows: LakeRow[];
}

/** A UTC day: the usage report's schema, which also refuses impossible dates such as 2026-02-30. */
export const LakeDay = UsageDay;
export const LakeHour = z.string().regex(/^([01]\d|2[0-3])$/, "an hour, 00 to 23");

export interface Partition {
  table: LakeTable;
  day: string;
  hour: string;
}

/** The partition a row's time falls in. */
export function partitionOf(table: LakeTable, at: number): Partition {
  const iso = new Date(at).toISOString();
  return { table, day: iso.slice(0, 10), hour: iso.slice(11, 13) };
}

export const partitionName = (p: Partition) => `${p.table}/${p.day}/${p.hour}`;
export const partitionPrefix = (p: Partition) => `lake/${p.table}/day=${p.day}/hour=${p.hour}/`;

/** A partition's manifest (`_manifest.json`): its files as the writer committed them. */
export const LakeManifest = z.object({
  table: LakeTable,
  day: LakeDay,
  hour: LakeHour,
  rows: z.number().int(),
  files: z.array(
    z.object({
      key: z.string(),
      rows: z.number().int(),
      bytes: z.number().int(),
      kind: z.enum(["part", "compacted"]),
      createdAt: z.string(),
    }),
  ),
  compactedAt: z.string().nullable(),
  updatedAt: z.string(),
});
export type LakeManifest = z.infer<typeof LakeManifest>;
