/**
 * A chat completion answer as a rollout's captured model call: the assistant's message, and the
 * log-probabilities and token ids the backend returned (OpenAI's `logprobs.content`, vLLM's
 * `token_ids` and `prompt_token_ids`, or ids read from `token_id:<n>` tokens). Read by the gateway as
 * it captures a call and by the rollout's own object, which keeps each call for its end rows.
 */
import type { CaptureTag } from "./capture.js";
import type { CapturedCall, Message, TokenLogprob } from "./rollout-rows.js";

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
  tag: Pick<CaptureTag, "turn">,
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
