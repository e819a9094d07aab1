/**
 * The gateway's capture of a rollout's model call: the answer, with the log-probabilities and token
 * ids the backend returned, sealed to the org's key and sent as the call's `rollout_steps` row,
 * after the caller has its answer (`waitUntil`). The prompt is not stored again per call: it is the
 * rollout's opening messages and the steps before, and `prompt_token_ids` when the backend gave them.
 */
import type { AgentCaller } from "../../protocol/agents/gateway.js";
import type { CaptureTag } from "../../protocol/envs/capture.js";
import { modelStepRow, type CapturedCall, type Message, type TokenLogprob } from "../../protocol/envs/rollout-rows.js";
import { sendRows } from "../../durable-objects/lake/send.js";
import { orgSealKey } from "./keys.js";

type Answer = {
  model?: unknown;
  prompt_token_ids?: unknown;
  usage?: { prompt_tokens?: unknown; completion_tokens?: unknown };
  choices?: {
    message?: { content?: unknown; tool_calls?: unknown };
    finish_reason?: unknown;
    logprobs?: { content?: unknown } | null;
    token_ids?: unknown;
  }[];
};

const ints = (v: unknown): number[] | null =>
  Array.isArray(v) && v.every((n) => Number.isInteger(n)) ? (v as number[]) : null;
const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : null);

/** The captured call of a chat completion answer, or null when it is not one. */
export function capturedCall(
  tag: CaptureTag,
  request: Record<string, unknown>,
  body: unknown,
  started: number,
  ended: number,
): CapturedCall | null {
  const answer = body as Answer;
  const choice = answer?.choices?.[0];
  if (!choice?.message) return null;
  const message: Message & { role: "assistant" } = {
    role: "assistant",
    content: typeof choice.message.content === "string" ? choice.message.content : null,
    ...(Array.isArray(choice.message.tool_calls) && choice.message.tool_calls.length
      ? { tool_calls: choice.message.tool_calls as NonNullable<Extract<Message, { role: "assistant" }>["tool_calls"]> }
      : {}),
  };
  const logprobs = Array.isArray(choice.logprobs?.content) ? (choice.logprobs.content as TokenLogprob[]) : null;
  // Tokens as `token_id:<n>` (vLLM's return_tokens_as_token_ids) are the ids when no token_ids came.
  const fromTokens = logprobs?.every((e) => /^token_id:\d+$/.test(e.token))
    ? logprobs.map((e) => Number(e.token.slice("token_id:".length)))
    : null;
  return {
    turn: tag.turn,
    at: ended,
    model: typeof answer.model === "string" ? answer.model : String(request.model ?? ""),
    message,
    finishReason: typeof choice.finish_reason === "string" ? choice.finish_reason : null,
    promptTokens: num(answer.usage?.prompt_tokens),
    completionTokens: num(answer.usage?.completion_tokens),
    latencyMs: Math.max(0, Math.round(ended - started)),
    logprobs,
    tokenIds: ints(choice.token_ids) ?? fromTokens,
    promptTokenIds: ints(answer.prompt_token_ids),
  };
}

/** Seals and sends the call's row; never throws (a failure is logged, and the rollout's end rows stand in). */
export async function captureCall(
  env: Env,
  caller: AgentCaller & { capture: CaptureTag },
  request: Record<string, unknown>,
  body: unknown,
  started: number,
  ended: number,
): Promise<void> {
  const tag = caller.capture;
  try {
    const call = capturedCall(tag, request, body, started, ended);
    if (!call) return;
    const key = await orgSealKey(env.DB, caller.orgId);
    if (!key) {
      console.log(
        JSON.stringify({
          level: "info",
          message: "rollout call not captured: the org has no sealing key",
          rollout: tag.rolloutId,
        }),
      );
      return;
    }
    const row = await modelStepRow(
      { orgId: caller.orgId, rolloutId: tag.rolloutId, runId: tag.runId, startedAt: tag.startedAt },
      call,
      key,
    );
    await sendRows(env.RECORDS, "rollout_steps", [row]);
  } catch (err) {
    console.error(
      JSON.stringify({
        level: "warn",
        message: "rollout call capture failed",
        rollout: tag.rolloutId,
        turn: tag.turn,
        error: String(err),
      }),
    );
  }
}
