/**
 * The agent task API's bodies: what a client sends to start and steer a coding-agent task, and what
 * it reads back (the task, its events, its diff). The edge validates requests with these schemas and
 * the SDK validates answers with them.
 */
import { z } from "zod";
import { Plan } from "../schemas.js";
import { TreePath } from "./tools.js";

/** Per-task budgets; each is enforced before a turn starts, never in the middle of a write. */
export const TaskLimits = z.strictObject({
  /** Model turns (one model call and the tool calls it asked for). */
  turns: z.number().int().min(1).max(500).default(30),
  /** Prompt plus completion tokens over all turns, as the gateway meters them. */
  tokens: z.number().int().min(1000).max(50_000_000).default(500_000),
  /** Seconds from the task's start to its end. */
  wallSeconds: z.number().int().min(5).max(86_400).default(1800),
  /** Seconds the sandbox's commands (terminal and lints) may run, summed. */
  sandboxSeconds: z.number().int().min(1).max(86_400).default(900),
  /** Bytes of tool output the model may be sent in all. */
  outputBytes: z
    .number()
    .int()
    .min(1024)
    .max(1 * 2 ** 30)
    .default(8 * 2 ** 20),
});
export type TaskLimits = z.infer<typeof TaskLimits>;

/** An org's agent quota: tasks at once (uploading or running), and sandbox seconds per UTC day. */
export const AgentOrgLimits = z.strictObject({
  concurrentTasks: z.number().int().min(1).max(100_000),
  dailySandboxSeconds: z.number().int().min(1).max(1_000_000_000),
});
export type AgentOrgLimits = z.infer<typeof AgentOrgLimits>;

/** Each plan's agent quota; `AGENT_LIMITS` (JSON, plan by plan) replaces any of them. */
export const AGENT_PLAN_LIMITS: Record<Plan, AgentOrgLimits> = {
  free: { concurrentTasks: 2, dailySandboxSeconds: 3_600 },
  pro: { concurrentTasks: 10, dailySandboxSeconds: 36_000 },
  business: { concurrentTasks: 50, dailySandboxSeconds: 360_000 },
};
export const AgentLimitsConfig = z.partialRecord(Plan, AgentOrgLimits);

/**
 * The index a task's codebase_search reads: the workspace its code came from. The secret goes to the
 * task's sandbox, which holds it in memory for the task's life (it decrypts the index's paths there,
 * beside the code it already holds); the edge passes it on and stores none of it.
 */
export const TaskWorkspace = z.strictObject({
  id: z.string().regex(/^ws_[0-9a-z]{20}$/, "a workspace id (ws_…)"),
  /** The workspace secret: 32 bytes, base64url. */
  secret: z.string().regex(/^[A-Za-z0-9_-]{43}$/, "32 bytes, base64url"),
  /** The directory of the workspace the task's tree is (its root when empty). */
  base: TreePath.or(z.literal("")).default(""),
});
export type TaskWorkspace = z.input<typeof TaskWorkspace>;

/**
 * Where a task's code comes from when `source` is `archive`: a `.tar.gz` or `.tar` the edge fetches.
 * The edge also holds the URL to https on a public host (`archive-url.ts`), a rule its operator
 * may relax for named origins, so that part is checked there.
 */
export const TaskArchive = z.strictObject({
  url: z
    .url({ protocol: /^https?$/ })
    .max(2048)
    .refine((u) => !new URL(u).username && !new URL(u).password, "must not carry credentials"),
});

export const CreateTaskRequest = z
  .strictObject({
    prompt: z.string().trim().min(1).max(100_000),
    /** A chat model the gateway serves; the edge's `AGENT_MODEL` when omitted. */
    model: z.string().min(1).max(256).optional(),
    limits: TaskLimits.partial().default({}),
    /**
     * Where the code comes from: `upload` (the client sends files with `POST …/files`, then `…/start`),
     * `archive` (the edge fetches `archive.url` into the sandbox, then starts), or `empty` (the task
     * starts at once on an empty tree).
     */
    source: z.enum(["upload", "archive", "empty"]).default("upload"),
    archive: TaskArchive.optional(),
    /** Offer the agent codebase_search over this workspace's index (the CLI sends it when the directory is indexed). */
    workspace: TaskWorkspace.optional(),
  })
  .refine((r) => (r.source === "archive") === (r.archive !== undefined), {
    message: '`archive` is given with `source: "archive"`, and only then',
    path: ["archive"],
  });
export type CreateTaskRequest = z.input<typeof CreateTaskRequest>;

export const TASK_STATUSES = ["uploading", "running", "finished", "failed", "cancelled"] as const;
export const TaskStatus = z.enum(TASK_STATUSES);
export type TaskStatus = z.infer<typeof TaskStatus>;
export const isTerminal = (s: TaskStatus) => s === "finished" || s === "failed" || s === "cancelled";

/** Why a task ended, when it has. */
export const END_REASONS = [
  "finished",
  "cancelled",
  "turns",
  "tokens",
  "wall_time",
  "sandbox_time",
  "output_bytes",
  "model_error",
  "sandbox_error",
  "sandbox_gone",
  "source_error",
  /** A rollout played by the task's reference solution (`agent: "oracle"`) whose solve.sh failed; it is still verified. */
  "solve_error",
  /** An environment session: verified (no step runs after it), or no request for its idle time. */
  "verified",
  "idle",
] as const;
export const EndReason = z.enum(END_REASONS);
export type EndReason = z.infer<typeof EndReason>;

export const TaskUsage = z.object({
  turns: z.number().int(),
  /** The model's tokens, as its answers count them (`usage.total_tokens`); what the token budget spends. */
  tokens: z.number().int(),
  /**
   * The same answers' `usage.prompt_tokens` and `usage.completion_tokens`, what a price applies to.
   * Absent on a task begun before they were counted: its earlier turns' split is unknown, and a sum
   * of its later turns alone would understate it.
   */
  promptTokens: z.number().int().optional(),
  completionTokens: z.number().int().optional(),
  toolCalls: z.number().int(),
  sandboxSeconds: z.number(),
  outputBytes: z.number().int(),
});
export type TaskUsage = z.infer<typeof TaskUsage>;

export const Task = z.object({
  id: z.string(),
  status: TaskStatus,
  model: z.string(),
  limits: TaskLimits,
  usage: TaskUsage,
  endReason: EndReason.nullable(),
  createdAt: z.iso.datetime(),
  startedAt: z.iso.datetime().nullable(),
  endedAt: z.iso.datetime().nullable(),
  /** The workspace whose index codebase_search reads, or null when the task has none. */
  workspaceId: z.string().nullable(),
  /** Sequence number of the task's last event. */
  lastEventId: z.number().int(),
});
export type Task = z.infer<typeof Task>;

/** An event of a task's log, as `GET …/events` streams it (SSE `id:` is `id`, `event:` is `type`). */
export const EVENT_TYPES = [
  "task.created",
  "task.started",
  "user.message",
  "turn.started",
  "assistant.message",
  "tool.call",
  "tool.result",
  "task.ended",
] as const;
export const EventType = z.enum(EVENT_TYPES);
export type EventType = z.infer<typeof EventType>;

export const TaskEvent = z.object({
  id: z.number().int().min(1),
  type: EventType,
  at: z.iso.datetime(),
  /**
   * What happened. Null once the task's sandbox is gone: the task object keeps an event's payload
   * sealed with a key only the sandbox holds.
   */
  data: z.record(z.string(), z.unknown()).nullable(),
});
export type TaskEvent = z.infer<typeof TaskEvent>;

export const TaskMessageRequest = z.strictObject({ content: z.string().trim().min(1).max(100_000) });

export const UploadTaskFilesRequest = z.strictObject({
  files: z
    .array(
      z.strictObject({
        path: TreePath,
        /** base64 */
        content: z.string(),
        executable: z.boolean().default(false),
      }),
    )
    .min(1)
    .max(2000),
});
export type UploadTaskFilesRequest = z.input<typeof UploadTaskFilesRequest>;
