/**
 * The eval API's bodies (`/v1/evals/runs`): an eval run plays every chosen task of a task set
 * `attempts` times through a rollout run (`../envs/rollouts.ts`, with `group_size = attempts`) and
 * reports, task by task, which attempts passed and why the others failed. The edge validates
 * requests with these schemas and the SDK validates answers with them.
 */
import { z } from "zod";
import { TaskLimits } from "../agents/task.js";
import { ArchiveSha256 } from "../envs/api.js";
import { TokenPrice } from "../gateway.js";
import { MAX_RUN_ROLLOUTS, Sampling } from "../envs/rollouts.js";

/** Attempts per task, at most. */
export const MAX_ATTEMPTS = 100;
/** Attempts in flight at once, unless the request says otherwise. */
export const DEFAULT_EVAL_CONCURRENCY = 8;

/**
 * Who plays each attempt: `model` (a gateway model or pool through the production agent loop),
 * `oracle` (the task's reference solution, `solution/solve.sh`) or `noop` (nothing: the untouched
 * tree is verified). The last two need no model; they check the task set, which should score 1 and
 * 0 on every task.
 */
export const EVAL_AGENTS = ["model", "oracle", "noop"] as const;
export const EvalAgent = z.enum(EVAL_AGENTS);
export type EvalAgent = z.infer<typeof EvalAgent>;

/** An eval run's id: `eval_` and 20 lower-case letters and digits. */
export const EvalRunId = z.string().regex(/^eval_[0-9a-z]{20}$/, "an eval run id (eval_…)");

export const CreateEvalRunRequest = z
  .strictObject({
    taskset: z.string().min(1).max(64),
    /** The tasks to play, by index (from 0) or archive SHA-256; every task of the set when absent. */
    tasks: z
      .array(z.union([z.number().int().min(0), ArchiveSha256]))
      .min(1)
      .max(MAX_RUN_ROLLOUTS)
      .optional(),
    agent: EvalAgent.default("model"),
    /** A model or pool the gateway serves (`GET /v1/models`); given when `agent` is `model`, and only then. */
    model: z.string().trim().min(1).max(256).optional(),
    /** A label of the model's weights, kept with each attempt. */
    checkpoint: z.string().trim().min(1).max(256).optional(),
    attempts: z.number().int().min(1).max(MAX_ATTEMPTS).default(1),
    concurrency: z.number().int().min(1).max(1024).default(DEFAULT_EVAL_CONCURRENCY),
    sampling: Sampling.default({}),
    /** Each attempt's budgets, as an agent task's. */
    limits: TaskLimits.partial().default({}),
  })
  .refine((r) => (r.agent === "model") === (r.model !== undefined), {
    message: '`model` is given with `agent: "model"` (the default), and only then',
    path: ["model"],
  })
  .refine((r) => (r.tasks?.length ?? 1) * r.attempts <= MAX_RUN_ROLLOUTS, {
    message: `a run makes at most ${MAX_RUN_ROLLOUTS} attempts (tasks × attempts)`,
    path: ["attempts"],
  });
export type CreateEvalRunRequest = z.input<typeof CreateEvalRunRequest>;

/** USD per million tokens, as the gateway pool that serves the model is priced. */
export { TokenPrice };

export const EVAL_STATUSES = ["running", "ended"] as const;

/** An eval run's manifest: its settings and where it stands (`POST`'s answer, and `GET /v1/evals/runs`' items). */
export const EvalRun = z.object({
  id: z.string(),
  status: z.enum(EVAL_STATUSES),
  taskset: z.string(),
  agent: EvalAgent,
  model: z.string().nullable(),
  checkpoint: z.string().nullable(),
  attempts: z.number().int(),
  concurrency: z.number().int(),
  /** The model's price when the run was made; null when the gateway names none (then costs are null). */
  price: TokenPrice.nullable(),
  /** The rollout run that plays the attempts (`/v1/envs/rollouts/{id}`). */
  rolloutRun: z.string(),
  createdAt: z.iso.datetime(),
  endedAt: z.iso.datetime().nullable(),
});
export type EvalRun = z.infer<typeof EvalRun>;

export const EvalRunList = z.object({ runs: z.array(EvalRun) });
export type EvalRunList = z.infer<typeof EvalRunList>;

/**
 * Why an attempt did not pass: `tests` (it ran to its end and the verifier gave less than 1),
 * `budget` (it ran out of turns, tokens, wall time, sandbox time or output), `quota` (the org's
 * agent quota refused it), `error` (the model, the sandbox or the verifier failed). Null when it passed.
 */
export const FAILURE_KINDS = ["tests", "budget", "error", "quota"] as const;
export const FailureKind = z.enum(FAILURE_KINDS);
export type FailureKind = z.infer<typeof FailureKind>;

/** One ended attempt of a task. */
export const EvalAttempt = z.object({
  /** Its place among the task's attempts, from 0. */
  attempt: z.number().int(),
  /** Its member number in the rollout run. */
  member: z.number().int(),
  /** The verifier's reward; null when it could not be verified. */
  reward: z.number().nullable(),
  /** Reward 1 or more. */
  passed: z.boolean(),
  /** Why its loop ended (`finished`, a budget, `model_error`, `start_error`, …). */
  outcome: z.string(),
  failureKind: FailureKind.nullable(),
  tokens: z.number().int(),
  promptTokens: z.number().int().nullable(),
  completionTokens: z.number().int().nullable(),
  /** Null when the run has no price or the backend did not count prompt and completion apart. */
  costUsd: z.number().nullable(),
  durationMs: z.number().nullable(),
  turns: z.number().int(),
});
export type EvalAttempt = z.infer<typeof EvalAttempt>;

/**
 * What the latest ended oracle and noop runs of the same task set scored on a task, when either
 * shows it broken (oracle below 1, or noop above 0); null when neither does. A field is null when
 * that run had no reward for the task, and absent when there is no such run or it did not play it.
 */
export const BrokenTask = z.object({
  oracle: z.number().nullable().optional(),
  noop: z.number().nullable().optional(),
});
export type BrokenTask = z.infer<typeof BrokenTask>;

export const EvalTaskReport = z.object({
  /** The task's index in its task set. */
  index: z.number().int(),
  sha256: ArchiveSha256,
  broken: BrokenTask.nullable(),
  /** Its ended attempts, by `attempt`. */
  attempts: z.array(EvalAttempt),
});
export type EvalTaskReport = z.infer<typeof EvalTaskReport>;

/** Attempts that did not pass, by why. */
export const FailureCounts = z.object({
  tests: z.number().int(),
  budget: z.number().int(),
  error: z.number().int(),
  quota: z.number().int(),
});
export type FailureCounts = z.infer<typeof FailureCounts>;

/**
 * A run's figures (`stats.ts`'s `summarize`) over the tasks that are not broken (`counted`) and
 * their ended attempts. pass@1 and pass@k are the unbiased estimator averaged over the counted
 * tasks: null while a counted task has fewer ended attempts than 1 (or k), and when none counts.
 */
export const EvalSummary = z.object({
  /** Every task of the run, broken ones included. */
  tasks: z.number().int(),
  /** Tasks not broken. */
  counted: z.number().int(),
  /** Ended attempts of the counted tasks. */
  attempts: z.number().int(),
  passed: z.number().int(),
  passAt1: z.number().nullable(),
  /** k is the run's attempts per task. */
  passAtK: z.object({ k: z.number().int(), value: z.number().nullable() }),
  /** An attempt that could not be verified scores 0 here. */
  meanReward: z.number().nullable(),
  tokens: z.number().int(),
  /** Null when any counted attempt's cost is unknown. */
  costUsd: z.number().nullable(),
  /** The counted attempts' durations added up: the time attempts took, which concurrency does not shorten. */
  wallMs: z.number(),
  /** The counted attempts that did not pass, by why. */
  failures: FailureCounts,
});
export type EvalSummary = z.infer<typeof EvalSummary>;

/** `GET /v1/evals/runs/{id}`: the run, every task's attempts so far, and the summary over them. */
export const EvalReport = EvalRun.extend({
  tasks: z.array(EvalTaskReport),
  summary: EvalSummary,
});
export type EvalReport = z.infer<typeof EvalReport>;
