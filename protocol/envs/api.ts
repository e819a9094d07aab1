/**
 * The environment API's bodies (`/v1/envs/...`): task sets (a manifest of task archives, each named
 * by its SHA-256), and sessions, in which a client's own model drives the production agent's tools
 * on one task, step by step, and asks for the task's reward at the end. The edge validates requests
 * with these schemas and the SDK validates answers with them.
 */
import { z } from "zod";
import { TaskLimits, TaskUsage } from "../agents/task.js";
import { TaskSettings } from "./harbor.js";
import { Sha256Hex, TASK_ARCHIVE_LIMITS } from "./task-archive.js";

/** A task archive's name: the SHA-256 of its bytes, lowercase hex. */
export const ArchiveSha256 = Sha256Hex;

/** The largest archive the sandbox host takes. */
export const MAX_ARCHIVE_BYTES = TASK_ARCHIVE_LIMITS.archiveBytes;

/**
 * The settings a task set's manifest keeps of each task: the numbers only. The rest of what the
 * client read (`workdir`, `env`, what was noted) is the task's content, which stays with the client
 * and the sandbox host, which reads it from the archive itself.
 */
export const ManifestSettings = TaskSettings.pick({
  verifierTimeoutSec: true,
  agentTimeoutSec: true,
  cpus: true,
  memoryMb: true,
  storageMb: true,
}).partial();
export type ManifestSettings = z.infer<typeof ManifestSettings>;

export const TaskSetTask = z.strictObject({
  sha256: ArchiveSha256,
  bytes: z.number().int().min(1).max(MAX_ARCHIVE_BYTES),
  /**
   * Where the task object fetches the archive when a session's or rollout's sandbox host lacks it:
   * https to a public host (`taskArchiveUrlRefusal`). The manifest keeps it as given, in the clear,
   * as the public location the client chose to publish the archive at.
   */
  url: z.url().max(2048).optional(),
  /** The task's settings as `harbor.ts` read them: the manifest keeps `ManifestSettings` of them. */
  settings: TaskSettings.partial().default({}),
});

export const CreateTaskSetRequest = z.strictObject({ tasks: z.array(TaskSetTask).min(1).max(10_000) });
export type CreateTaskSetRequest = z.input<typeof CreateTaskSetRequest>;
export const CreatedTaskSet = z.object({ id: z.string(), tasks: z.number().int() });

export const TaskSet = z.object({
  id: z.string(),
  tasks: z.array(
    z.object({
      index: z.number().int(),
      sha256: ArchiveSha256,
      bytes: z.number().int(),
      /** The archive's public location, when the set was pushed with one. */
      url: z.string().optional(),
      settings: ManifestSettings,
    }),
  ),
  createdAt: z.iso.datetime(),
});
export type TaskSet = z.infer<typeof TaskSet>;

/** `PUT /v1/envs/archives/{sha256}`'s answer: the sandbox host holds the archive. */
export const StoredArchive = z.object({ sha256: ArchiveSha256, bytes: z.number().int() });

/**
 * A session's budgets. `turns`, `wallSeconds`, `sandboxSeconds` and `outputBytes` are the agent
 * task's and are held the same way; tokens are not metered (the client's model is not called
 * through the edge). `idleSeconds`: a session with no request for this long ends itself.
 */
export const SessionLimits = z.strictObject({
  ...TaskLimits.omit({ tokens: true }).shape,
  idleSeconds: z.number().int().min(10).max(86_400).default(600),
});
export type SessionLimits = z.infer<typeof SessionLimits>;

export const CreateSessionRequest = z.strictObject({
  taskset: z.string().min(1).max(64),
  /** The task: its index in the set (from 0) or its archive's SHA-256. */
  task: z.union([z.number().int().min(0), ArchiveSha256]),
  seed: z
    .number()
    .int()
    .min(0)
    .max(2 ** 53 - 1)
    .optional(),
  limits: SessionLimits.partial().default({}),
});
export type CreateSessionRequest = z.input<typeof CreateSessionRequest>;

export const ToolCall = z.strictObject({
  id: z.string().min(1).max(128),
  type: z.literal("function"),
  function: z.strictObject({ name: z.string().min(1).max(64), arguments: z.string().max(4 * 2 ** 20) }),
});

export const StepRequest = z.strictObject({
  /** The step's number: 1 for the first; the next is one past the last run. */
  index: z.number().int().min(1).max(100_000),
  tool_calls: z.array(ToolCall).max(64),
  /** The assistant's text beside its calls, kept in the session's conversation. */
  content: z.string().max(1_000_000).nullable().optional(),
});
export type StepRequest = z.input<typeof StepRequest>;

export const ToolMessage = z.object({ role: z.literal("tool"), tool_call_id: z.string(), content: z.string() });

export const SESSION_STATUSES = ["running", "finished", "failed", "cancelled"] as const;

export const SessionUsage = TaskUsage.omit({ tokens: true, promptTokens: true, completionTokens: true });

export const StepResponse = z.object({
  index: z.number().int(),
  results: z.array(ToolMessage),
  /** No step runs after this one: `finish` was called, a budget is spent, or the session ended. */
  done: z.boolean(),
  reason: z.string().nullable(),
  usage: SessionUsage,
});
export type StepResponse = z.infer<typeof StepResponse>;

export const VerifyResponse = z.object({
  reward: z.number(),
  /** Every named number the task's tests wrote (`reward.json`); empty for a bare `reward.txt`. */
  components: z.record(z.string(), z.number()),
  /** The tests' output, capped. */
  log: z.string(),
});
export type VerifyResponse = z.infer<typeof VerifyResponse>;

export const Session = z.object({
  id: z.string(),
  status: z.enum(SESSION_STATUSES),
  /** Whether a step may still run. */
  done: z.boolean(),
  reason: z.string().nullable(),
  taskset: z.string(),
  task: z.object({ index: z.number().int(), sha256: ArchiveSha256 }),
  /** Steps run so far (the next step's index is one more). */
  steps: z.number().int(),
  limits: SessionLimits,
  usage: SessionUsage,
  /** Set once verified. */
  reward: z.number().nullable(),
  components: z.record(z.string(), z.number()).nullable(),
  createdAt: z.iso.datetime(),
  endedAt: z.iso.datetime().nullable(),
});
export type Session = z.infer<typeof Session>;

/** `POST /v1/envs/sessions`' answer: the session, the production agent's tools, and its first observation. */
export const CreatedSession = Session.extend({
  tools: z.array(z.unknown()),
  observation: z.object({
    messages: z.array(z.object({ role: z.enum(["system", "user"]), content: z.string() })),
  }),
});
export type CreatedSession = z.infer<typeof CreatedSession>;
