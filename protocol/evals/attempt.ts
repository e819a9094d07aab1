/**
 * One attempt of an eval run, as the report and the lake's `eval_attempts` row both tell it: whether
 * it passed, why not, and what it cost. The run's object writes the row and the edge builds the
 * report from the same member record, so the two never disagree.
 */
import type { TokenPrice } from "../gateway.js";
import type { LakeRow } from "../lake.js";
import type { EvalAgent, EvalAttempt, FailureKind } from "./api.js";

/** Loop ends that mean a budget ran out (`TaskLimits`), as opposed to a failure of the model or sandbox. */
const BUDGET_OUTCOMES = new Set(["turns", "tokens", "wall_time", "sandbox_time", "output_bytes"]);

/** An ended member of the run, as its object records it. */
export interface EndedMember {
  member: number;
  /** Its place among its task's attempts. */
  attempt: number;
  task: { index: number; sha256: string };
  reward: number | null;
  outcome: string;
  turns: number;
  tokens: number;
  toolCalls: number;
  sandboxSeconds: number;
  startedAt: string | null;
  endedAt: string | null;
  promptTokens: number | null;
  completionTokens: number | null;
}

export const passed = (reward: number | null) => reward !== null && reward >= 1;

/**
 * Why an attempt did not pass (null when it did): a budget that ran out, the org's quota, the tests
 * (its loop ended on its own and the verifier scored it below 1), else an error (the model, the
 * sandbox, its start, or a verification that gave no reward).
 */
export function failureKind(m: Pick<EndedMember, "reward" | "outcome">): FailureKind | null {
  if (passed(m.reward)) return null;
  if (m.outcome === "quota") return "quota";
  if (BUDGET_OUTCOMES.has(m.outcome)) return "budget";
  if (m.reward !== null && m.outcome === "finished") return "tests";
  return "error";
}

/** USD, from prompt and completion tokens at a price per million; null when either is unknown. */
export function costUsd(price: TokenPrice | null, promptTokens: number | null, completionTokens: number | null) {
  if (!price || promptTokens === null || completionTokens === null) return null;
  return (promptTokens * price.input + completionTokens * price.output) / 1e6;
}

const durationMs = (m: EndedMember) =>
  m.startedAt && m.endedAt ? Math.max(0, Date.parse(m.endedAt) - Date.parse(m.startedAt)) : null;

export function evalAttempt(m: EndedMember, price: TokenPrice | null): EvalAttempt {
  return {
    attempt: m.attempt,
    member: m.member,
    reward: m.reward,
    passed: passed(m.reward),
    outcome: m.outcome,
    failureKind: failureKind(m),
    tokens: m.tokens,
    promptTokens: m.promptTokens,
    completionTokens: m.completionTokens,
    costUsd: costUsd(price, m.promptTokens, m.completionTokens),
    durationMs: durationMs(m),
    turns: m.turns,
  };
}

/** An eval run as its attempts' rows name it. */
export interface EvalRef {
  evalId: string;
  runId: string;
  orgId: string;
  taskset: string;
  agent: EvalAgent;
  model: string | null;
  checkpoint: string | null;
  price: TokenPrice | null;
  /** The eval run's creation (ms): every row's `at`. */
  createdAt: number;
}

export const attemptRowId = (evalId: string, member: number) => `${evalId}.${member}`;

/** The attempt's `eval_attempts` row; `verifierLog` is the verifier's output sealed to the org's key, if any. */
export function evalAttemptRow(
  ref: EvalRef,
  m: EndedMember,
  verifierLog: { content_key_id: string; content: string } | null,
): LakeRow {
  const a = evalAttempt(m, ref.price);
  return {
    attempt_id: attemptRowId(ref.evalId, m.member),
    eval_id: ref.evalId,
    run_id: ref.runId,
    org_id: ref.orgId,
    at: ref.createdAt,
    taskset: ref.taskset,
    task_index: m.task.index,
    task_sha256: m.task.sha256,
    attempt: m.attempt,
    member: m.member,
    agent: ref.agent,
    model: ref.model,
    checkpoint: ref.checkpoint,
    reward: m.reward,
    passed: a.passed,
    outcome: m.outcome,
    failure_kind: a.failureKind,
    tokens: m.tokens,
    prompt_tokens: m.promptTokens,
    completion_tokens: m.completionTokens,
    cost_usd: a.costUsd,
    turns: m.turns,
    tool_calls: m.toolCalls,
    sandbox_seconds: m.sandboxSeconds,
    duration_ms: a.durationMs,
    started_at: m.startedAt ? Date.parse(m.startedAt) : null,
    ended_at: m.endedAt ? Date.parse(m.endedAt) : null,
    content_key_id: verifierLog?.content_key_id ?? null,
    verifier_log: verifierLog?.content ?? null,
  };
}
