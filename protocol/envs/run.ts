/**
 * What a rollout's task object tells the run that made it once the rollout has ended and been
 * verified: an RPC on the run's object (`ENV_RUN`, by the run's id), made until it is answered, so
 * the run hears of each member's end at least once (a member's report is idempotent by its
 * `member` and `taskId`).
 */
import type { EndReason, TaskUsage } from "../agents/task.js";
import type { SealedOpening } from "./rollout-rows.js";
import type { SealedVerifierLog } from "./verifier-log.js";

export interface RolloutEnded {
  runId: string;
  member: number;
  /** The rollout's AgentTask id. */
  taskId: string;
  /** Null when the rollout could not be verified (its sandbox was gone, or verification failed). */
  reward: number | null;
  components: Record<string, number>;
  /** Why the rollout's loop ended (`finished`, a budget, `model_error`, ...). */
  outcome: EndReason;
  /** Why it has no reward, when it has none. */
  verifyError?: string;
  usage: TaskUsage;
  startedAt: string | null;
  endedAt: string | null;
  /**
   * The rollout's opening messages sealed to its org's key, for the run's `rollouts` row (which the
   * run writes once the group's advantages are known, without seeing the text). Absent when the
   * rollout was not captured (its org has no sealing key, or its conversation could not be read).
   */
  sealedOpening?: SealedOpening;
  /**
   * Prompt and completion tokens over its model calls, as the backend counted them (its usage's; 0
   * for a rollout played without a model). Null: not known (the rollout began before they were counted).
   */
  promptTokens?: number | null;
  completionTokens?: number | null;
  /**
   * The verifier's log (its last 64 KiB) sealed to the org's key (`verifier-log.ts`), for the run to
   * keep as it came. Absent when the org has no sealing key or the rollout was not verified.
   */
  sealedVerifierLog?: SealedVerifierLog;
}

/** The part of the run's object a rollout calls. */
export interface EnvRunCallback {
  rolloutEnded(ended: RolloutEnded): Promise<unknown>;
}

/** The binding a rollout reaches its run through (typed loosely: the run's class is not the task's to know). */
export interface EnvRunNamespace<Id = unknown> {
  idFromName(name: string): Id;
  get(id: Id): EnvRunCallback;
}
