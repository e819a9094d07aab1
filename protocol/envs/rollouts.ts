/**
 * Rollout runs (`/v1/envs/rollouts`): a policy (a gateway model or pool) plays each chosen task of a
 * task set `group_size` times with the production agent loop; each rollout is verified when it ends,
 * and each task's group gets GRPO's group-relative advantages (`advantages.ts`). The edge validates
 * requests with these schemas and the SDK validates answers with them.
 */
import { z } from "zod";
import { TaskLimits } from "../agents/task.js";
import { ArchiveSha256 } from "./api.js";

/** The most rollouts one run makes (tasks × group size). */
export const MAX_RUN_ROLLOUTS = 10_000;
/** Rollouts of a run in flight at once, unless the request says otherwise. */
export const DEFAULT_CONCURRENCY = 32;

export const Sampling = z.strictObject({
  temperature: z.number().min(0).max(2).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  /** Completion tokens per model call (the task's token budget can lower it further). */
  max_tokens: z.number().int().min(1).max(1_000_000).optional(),
  /** Member i of a group is sampled with `seed + i` (with `i` alone when no seed is given). */
  seed: z
    .number()
    .int()
    .min(0)
    .max(2 ** 31 - 1)
    .optional(),
});
export type Sampling = z.infer<typeof Sampling>;

export const Policy = z.strictObject({
  /** A model or pool the gateway serves (`GET /v1/models`). */
  model: z.string().trim().min(1).max(256),
  /** A label of the policy's weights, kept with each rollout (the lake's `checkpoint`). */
  checkpoint: z.string().trim().min(1).max(256).optional(),
});
export type Policy = z.infer<typeof Policy>;

/**
 * What plays a run's rollouts: `model`, the policy through the production loop; `oracle`, the task's
 * reference solution (`solution/solve.sh`) and no model; `noop`, nothing (the untouched tree is
 * verified). The last two check a task set: every task should score 1 solved and 0 untouched.
 */
export const ROLLOUT_AGENTS = ["model", "oracle", "noop"] as const;
export const RolloutAgent = z.enum(ROLLOUT_AGENTS);
export type RolloutAgent = z.infer<typeof RolloutAgent>;

export const CreateRolloutsRequest = z
  .strictObject({
    taskset: z.string().min(1).max(64),
    /** The tasks to play, by index (from 0) or archive SHA-256; every task of the set when absent. */
    tasks: z
      .array(z.union([z.number().int().min(0), ArchiveSha256]))
      .min(1)
      .max(MAX_RUN_ROLLOUTS)
      .optional(),
    agent: RolloutAgent.default("model"),
    /** Needed when `agent` is `model`; otherwise a label kept with the run (`{ model: agent }` when absent). */
    policy: Policy.optional(),
    group_size: z.number().int().min(1).max(256),
    sampling: Sampling.default({}),
    /** Each rollout's budgets, as an agent task's. */
    limits: TaskLimits.partial().default({}),
    /** Rollouts in flight at once. */
    concurrency: z.number().int().min(1).max(1024).default(DEFAULT_CONCURRENCY),
  })
  .refine(
    (r) => (r.tasks?.length ?? 1) * r.group_size <= MAX_RUN_ROLLOUTS,
    `a run makes at most ${MAX_RUN_ROLLOUTS} rollouts (tasks × group_size)`,
  )
  .refine((r) => r.agent !== "model" || r.policy !== undefined, {
    message: "policy is required when agent is model",
    path: ["policy"],
  });
export type CreateRolloutsRequest = z.input<typeof CreateRolloutsRequest>;

/** The seed member `i` of a group is sampled with. */
export const memberSeed = (sampling: Sampling, i: number) => (sampling.seed ?? 0) + i;

export const RunTask = z.object({ index: z.number().int(), sha256: ArchiveSha256 });
export type RunTask = z.infer<typeof RunTask>;

export const ROLLOUT_EVENT_TYPES = ["rollout.started", "rollout.ended", "group.ended", "summary"] as const;
export const RolloutEventType = z.enum(ROLLOUT_EVENT_TYPES);
export type RolloutEventType = z.infer<typeof RolloutEventType>;

/** `rollout.started`: a member's agent task was made and runs. */
export const RolloutStarted = z.object({
  member: z.number().int(),
  /** The member's place in its task's group (its seed is the sampling seed plus this). */
  groupIndex: z.number().int(),
  task: RunTask,
  seed: z.number().int(),
  /** The member's agent task. */
  rolloutId: z.string(),
});
export type RolloutStarted = z.infer<typeof RolloutStarted>;

/** `rollout.ended`: a member ended and was verified (or could not be: `reward` null, and why). */
export const RolloutEnded = RolloutStarted.extend({
  reward: z.number().nullable(),
  components: z.record(z.string(), z.number()),
  /** Why the member's loop ended (`finished`, a budget, `model_error`, …; `start_error` if it never ran). */
  outcome: z.string(),
  verifyError: z.string().optional(),
  turns: z.number().int(),
  tokens: z.number().int(),
  toolCalls: z.number().int(),
  sandboxSeconds: z.number(),
  startedAt: z.iso.datetime().nullable(),
  endedAt: z.iso.datetime().nullable(),
  durationMs: z.number().nullable(),
});
export type RolloutEnded = z.infer<typeof RolloutEnded>;

/**
 * `group.ended`: every member of a task's group ended. Advantages are over the members that have a
 * reward; a member with none (never started, or not verified) has a null advantage.
 */
export const GroupEnded = z.object({
  task: RunTask,
  /** The task's position in the run (groups are numbered in the order the run names them). */
  group: z.number().int(),
  members: z.array(z.number().int()),
  rewards: z.array(z.number().nullable()),
  advantages: z.array(z.number().nullable()),
  mean: z.number().nullable(),
  std: z.number().nullable(),
});
export type GroupEnded = z.infer<typeof GroupEnded>;

export const RUN_STATUSES = ["running", "ended"] as const;

export const RunSummary = z.object({
  rollouts: z.number().int(),
  ended: z.number().int(),
  /** Members that have a reward. */
  verified: z.number().int(),
  meanReward: z.number().nullable(),
  /** Members whose reward is 1 or more, over the verified ones. */
  solved: z.number().int(),
  groups: z.number().int(),
  outcomes: z.record(z.string(), z.number().int()),
  tokens: z.number().int(),
  turns: z.number().int(),
  durationMs: z.number().nullable(),
});
export type RunSummary = z.infer<typeof RunSummary>;

export const RolloutEvent = z.discriminatedUnion("type", [
  z.object({ id: z.number().int(), type: z.literal("rollout.started"), at: z.iso.datetime(), data: RolloutStarted }),
  z.object({ id: z.number().int(), type: z.literal("rollout.ended"), at: z.iso.datetime(), data: RolloutEnded }),
  z.object({ id: z.number().int(), type: z.literal("group.ended"), at: z.iso.datetime(), data: GroupEnded }),
  z.object({ id: z.number().int(), type: z.literal("summary"), at: z.iso.datetime(), data: RunSummary }),
]);
export type RolloutEvent = z.infer<typeof RolloutEvent>;

/** `GET /v1/envs/rollouts/{id}`: the run, its members so far, and its summary once it ended. */
export const RolloutRun = z.object({
  id: z.string(),
  status: z.enum(RUN_STATUSES),
  taskset: z.string(),
  tasks: z.array(RunTask),
  policy: Policy,
  groupSize: z.number().int(),
  sampling: Sampling,
  concurrency: z.number().int(),
  members: z.array(
    z.object({
      member: z.number().int(),
      group: z.number().int(),
      groupIndex: z.number().int(),
      seed: z.number().int(),
      state: z.enum(["pending", "running", "ended"]),
      rolloutId: z.string().nullable(),
      reward: z.number().nullable(),
      components: z.record(z.string(), z.number()).nullable(),
      outcome: z.string().nullable(),
      advantage: z.number().nullable(),
      turns: z.number().int().nullable(),
      tokens: z.number().int().nullable(),
    }),
  ),
  summary: RunSummary.nullable(),
  createdAt: z.iso.datetime(),
  endedAt: z.iso.datetime().nullable(),
  lastEventId: z.number().int(),
});
export type RolloutRun = z.infer<typeof RolloutRun>;
