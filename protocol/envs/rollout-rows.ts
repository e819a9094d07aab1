/**
 * A rollout as lake rows (`rollouts`, `rollout_steps`, protocol/lake.ts): ids, numbers, outcomes and
 * timings in the clear, and everything the rollout said or saw sealed to its org's public key
 * (`seal.ts`), bound to its row.
 *
 * Each row's identity is fixed by the rollout (`<rollout>.m<turn>` for a model call,
 * `<rollout>.t<turn>.<i>` for a tool result) and its `at` is the rollout's start, so whoever sends a
 * row (the gateway as the call is answered, the rollout's objects when it ends) and however often,
 * the lake keeps one of each: the first to arrive. The gateway's capture of a model call (with
 * log-probabilities and token ids) is sent as the call is answered, so it normally arrives first; the
 * row the rollout sends at its end for the same call, from its own record, stands in where the
 * capture never arrived.
 */
import type { LakeRow } from "../lake.js";
import { sealJson } from "./seal.js";

/** An org's registered sealing key (`PUT /v1/envs/keys`). */
export interface OrgSealKey {
  keyId: string;
  /** Raw X25519 public key, 32 bytes. */
  publicKey: Uint8Array;
}

/** Which rollout a row belongs to: the same for every row of it, whoever sends it. */
export interface RolloutRef {
  orgId: string;
  rolloutId: string;
  runId: string | null;
  /** The rollout's start (ms): every row's `at`, so its rows share one partition. */
  startedAt: number;
}

export type Message =
  | { role: "system" | "user"; content: string }
  | {
      role: "assistant";
      content: string | null;
      tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
    }
  | { role: "tool"; tool_call_id: string; content: string };

/** One entry of an OpenAI/vLLM chat answer's `choices[0].logprobs.content`. */
export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs?: { token: string; logprob: number; bytes: number[] | null }[];
}

/** A model call of a rollout as the gateway saw it answered. */
export interface CapturedCall {
  turn: number;
  /** When the answer came (ms). */
  at: number;
  model: string;
  message: Message & { role: "assistant" };
  finishReason: string | null;
  promptTokens: number | null;
  completionTokens: number | null;
  latencyMs: number | null;
  logprobs?: TokenLogprob[] | null;
  /** The answer's token ids (vLLM `return_token_ids`, or parsed from `token_id:<n>` tokens). */
  tokenIds?: number[] | null;
  promptTokenIds?: number[] | null;
}

/** A finished rollout's outcome and accounting: the `rollouts` row's clear columns. */
export interface RolloutSummary extends RolloutRef {
  member?: number | null;
  groupIndex?: number | null;
  task: { sha256: string; index: number } | null;
  seed: number | null;
  policy: string;
  checkpoint: string | null;
  reward: number | null;
  components: Record<string, number>;
  advantage: number | null;
  outcome: string;
  turns: number;
  toolCalls: number;
  promptTokens: number | null;
  completionTokens: number | null;
  endedAt: number | null;
}

/** A sealed cell's plaintext stays under this, so that one row fits one queue message (128 KB) sealed. */
export const MAX_CONTENT_BYTES = 64 * 1024;

const encoder = new TextEncoder();
const size = (value: unknown) => encoder.encode(JSON.stringify(value)).byteLength;

export const modelStepId = (rolloutId: string, turn: number) => `${rolloutId}.m${turn}`;
export const toolStepId = (rolloutId: string, turn: number, index: number) => `${rolloutId}.t${turn}.${index}`;
/** Steps in conversation order: a turn's model call, then its tool results. */
const seqOf = (turn: number, index: number | null) => turn * 1024 + (index === null ? 0 : index + 1);

/**
 * A step's content under `MAX_CONTENT_BYTES`: what is dropped first is what can be recomputed or
 * lived without (prompt token ids, the alternatives of each token, then the log-probabilities), and
 * the content says what it lost.
 */
function bounded(content: Record<string, unknown>): Record<string, unknown> {
  const dropped: string[] = [];
  let current = content;
  const steps: [string, (c: Record<string, unknown>) => Record<string, unknown>][] = [
    ["prompt_token_ids", ({ prompt_token_ids: _p, ...rest }) => rest],
    [
      "top_logprobs",
      (c) => ({
        ...c,
        logprobs: Array.isArray(c.logprobs)
          ? (c.logprobs as TokenLogprob[]).map(({ top_logprobs: _t, ...e }) => e)
          : c.logprobs,
      }),
    ],
    ["logprobs", ({ logprobs: _l, ...rest }) => rest],
    ["token_ids", ({ token_ids: _t, ...rest }) => rest],
  ];
  for (const [name, drop] of steps) {
    if (size(current) <= MAX_CONTENT_BYTES) break;
    if (!((name === "top_logprobs" ? "logprobs" : name) in current)) continue;
    current = drop(current);
    dropped.push(name);
  }
  if (size(current) > MAX_CONTENT_BYTES)
    return { omitted: "too large for a lake row", bytes: size(content), turn: content.turn };
  return dropped.length ? { ...current, dropped } : current;
}

async function sealed(
  key: OrgSealKey,
  ref: RolloutRef,
  table: string,
  rowId: string,
  content: unknown,
): Promise<{ content_key_id: string; content: string }> {
  return {
    content_key_id: key.keyId,
    content: await sealJson(key.publicKey, content, { orgId: ref.orgId, table, rowId, keyId: key.keyId }),
  };
}

const clear = (ref: RolloutRef) => ({
  rollout_id: ref.rolloutId,
  run_id: ref.runId,
  org_id: ref.orgId,
  at: ref.startedAt,
});

/** The `rollout_steps` row of a model call: the answer, its log-probabilities and token ids. */
export async function modelStepRow(ref: RolloutRef, call: CapturedCall, key: OrgSealKey): Promise<LakeRow> {
  const id = modelStepId(ref.rolloutId, call.turn);
  const content = bounded({
    turn: call.turn,
    message: call.message,
    ...(call.logprobs ? { logprobs: call.logprobs } : {}),
    ...(call.tokenIds ? { token_ids: call.tokenIds } : {}),
    ...(call.promptTokenIds ? { prompt_token_ids: call.promptTokenIds } : {}),
  });
  return {
    step_id: id,
    ...clear(ref),
    step_at: call.at,
    seq: seqOf(call.turn, null),
    turn: call.turn,
    kind: "model",
    model: call.model,
    prompt_tokens: call.promptTokens,
    completion_tokens: call.completionTokens,
    finish_reason: call.finishReason,
    has_logprobs: Array.isArray(content.logprobs),
    latency_ms: call.latencyMs,
    ...(await sealed(key, ref, "rollout_steps", id, content)),
  };
}

/** The `rollout_steps` row of one tool result. */
export async function toolStepRow(
  ref: RolloutRef,
  step: { turn: number; index: number; at: number; tool: string | null; message: Message & { role: "tool" } },
  key: OrgSealKey,
): Promise<LakeRow> {
  const id = toolStepId(ref.rolloutId, step.turn, step.index);
  return {
    step_id: id,
    ...clear(ref),
    step_at: step.at,
    seq: seqOf(step.turn, step.index),
    turn: step.turn,
    kind: "tool",
    tool: step.tool,
    ...(await sealed(key, ref, "rollout_steps", id, bounded({ turn: step.turn, message: step.message }))),
  };
}

/** A rollout's opening messages (system prompt, instruction) sealed as its `rollouts` row's content. */
export type SealedOpening = { content_key_id: string; content: string };

/**
 * The opening sealed by whoever holds it (the rollout's own object), for whoever writes the
 * `rollouts` row once the advantage is known (the run's object), which never sees the text.
 */
export const sealOpening = (ref: RolloutRef, opening: Message[], key: OrgSealKey): Promise<SealedOpening> =>
  sealed(key, ref, "rollouts", ref.rolloutId, bounded({ messages: opening }));

/** The `rollouts` row: outcome and accounting in the clear, the opening messages sealed (`sealOpening`). */
export function rolloutRow(summary: RolloutSummary, opening: SealedOpening): LakeRow {
  return {
    ...clear(summary),
    member: summary.member ?? null,
    group_index: summary.groupIndex ?? null,
    task_sha256: summary.task?.sha256 ?? null,
    task_index: summary.task?.index ?? null,
    seed: summary.seed,
    policy: summary.policy,
    checkpoint: summary.checkpoint,
    reward: summary.reward,
    components: JSON.stringify(summary.components),
    advantage: summary.advantage,
    turns: summary.turns,
    tool_calls: summary.toolCalls,
    prompt_tokens: summary.promptTokens,
    completion_tokens: summary.completionTokens,
    outcome: summary.outcome,
    started_at: summary.startedAt,
    ended_at: summary.endedAt,
    duration_ms: summary.endedAt === null ? null : Math.max(0, summary.endedAt - summary.startedAt),
    content_key_id: opening.content_key_id,
    content: opening.content,
  };
}

export interface RolloutRows {
  rollouts: LakeRow[];
  rollout_steps: LakeRow[];
}

/**
 * A finished rollout as its rows: the `rollouts` row and a step per model answer and per tool result
 * of `conversation` (the whole conversation, opening messages first). `calls` are the model calls as
 * captured (by turn): a call's log-probabilities and token ids go into its step when its answer is
 * the one the conversation kept. Send them with `sendRows` (durable-objects/lake/send.ts), each
 * table's rows apart; sending again is safe.
 */
export async function rolloutRows(input: {
  summary: RolloutSummary;
  conversation: Message[];
  calls?: CapturedCall[];
  /** Each turn's time (ms), where known; else the rollout's end (or start). */
  turnTimes?: Record<number, number>;
  key: OrgSealKey;
}): Promise<RolloutRows> {
  const { summary, conversation, key } = input;
  const firstAnswer = conversation.findIndex((m) => m.role === "assistant");
  const opening = firstAnswer < 0 ? conversation : conversation.slice(0, firstAnswer);
  const captured = new Map((input.calls ?? []).map((c) => [c.turn, c]));
  const fallbackAt = summary.endedAt ?? summary.startedAt;
  const steps: Promise<LakeRow>[] = [];
  let turn = 0;
  let index = 0;
  let names = new Map<string, string>();
  for (const message of conversation.slice(opening.length)) {
    const at = input.turnTimes?.[turn] ?? fallbackAt;
    if (message.role === "assistant") {
      turn += 1;
      index = 0;
      names = new Map((message.tool_calls ?? []).map((c) => [c.id, c.function.name]));
      const call = captured.get(turn);
      const kept = call && JSON.stringify(call.message) === JSON.stringify(message) ? call : undefined;
      steps.push(
        modelStepRow(
          summary,
          kept ?? {
            turn,
            at: input.turnTimes?.[turn] ?? fallbackAt,
            model: summary.policy,
            message,
            finishReason: message.tool_calls?.length ? "tool_calls" : "stop",
            promptTokens: null,
            completionTokens: null,
            latencyMs: null,
          },
          key,
        ),
      );
    } else if (message.role === "tool") {
      steps.push(
        toolStepRow(summary, { turn, index, at, tool: names.get(message.tool_call_id) ?? null, message }, key),
      );
      index += 1;
    }
  }
  return {
    rollouts: [rolloutRow(summary, await sealOpening(summary, opening, key))],
    rollout_steps: await Promise.all(steps),
  };
}
