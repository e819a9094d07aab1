/**
 * Log-probabilities and token ids as vLLM's chat endpoint returns them (vllm-project/vllm,
 * `vllm/entrypoints/openai/chat_completion/protocol.py` and `serving.py`), so that what captures them
 * for training can be tested with no model:
 *
 * - `logprobs: true` (with `top_logprobs: k`, at most 20) gives each choice
 *   `logprobs.content[]` entries `{ token, logprob, bytes, top_logprobs }`, in OpenAI's shape, streamed
 *   chunk by chunk (each chunk's entries are its own tokens) or whole;
 * - `return_tokens_as_token_ids: true` makes each `token` the string `token_id:<n>` (its `bytes`
 *   those of that string, as vLLM encodes them);
 * - `return_token_ids: true` gives each choice `token_ids` (a streamed chunk's own) and the answer
 *   `prompt_token_ids` (on a stream's first chunk only).
 *
 * SIMULATED: the "tokenizer" splits text into runs of letters, of digits, of whitespace and single
 * other characters, and every id and log-probability is a hash of the token's text. They are
 * deterministic from the text, the same streamed or whole, and mean nothing about any model; every
 * answer that carries them says so in `simulated`.
 */
import { z } from "zod";
import type { Format } from "./chat-format.js";

/** vLLM's default `max_logprobs` (and OpenAI's limit for `top_logprobs`). */
export const MAX_TOP_LOGPROBS = 20;
/** The size of the simulated vocabulary (ids are below it). */
const VOCAB = 151_000;

export const SIMULATED_NOTE = "logprobs and token ids are simulated: deterministic from the text, not a model's";

const Fields = z.looseObject({
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).nullish(),
  return_tokens_as_token_ids: z.boolean().nullish(),
  return_token_ids: z.boolean().nullish(),
});

export interface LogprobRequest {
  logprobs: boolean;
  top: number;
  asIds: boolean;
  returnIds: boolean;
}

/** What a chat request asks for, null when it asks for none, or why it is refused (as vLLM refuses it). */
export function logprobRequest(body: unknown): LogprobRequest | null | string {
  const r = Fields.safeParse(body);
  if (!r.success) return `${r.error.issues[0]!.path.join(".")}: ${r.error.issues[0]!.message}`;
  const { logprobs, top_logprobs, return_tokens_as_token_ids, return_token_ids } = r.data;
  if ((top_logprobs ?? 0) > 0 && !logprobs) return "when using `top_logprobs`, `logprobs` must be set to true.";
  if ((top_logprobs ?? 0) > MAX_TOP_LOGPROBS)
    return `Requested sample logprobs of ${top_logprobs}, which is greater than max allowed: ${MAX_TOP_LOGPROBS}`;
  if (!logprobs && !return_token_ids) return null;
  return {
    logprobs: !!logprobs,
    top: top_logprobs ?? 0,
    asIds: !!return_tokens_as_token_ids,
    returnIds: !!return_token_ids,
  };
}

/** The simulated tokens of `text`: runs of letters, of digits, of whitespace, and single other characters. */
export const simulatedTokens = (text: string): string[] => text.match(/[A-Za-z]+|\d+|\s+|[^\sA-Za-z\d]/gu) ?? [];

function fnv(text: string, seed: number): number {
  let h = seed >>> 0;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619) >>> 0;
  return h;
}

export const simulatedTokenId = (token: string) => fnv(token, 2166136261) % VOCAB;
/** In (-4, 0]: a hash of the token, with a little more weight near zero, as sampled tokens have. */
const logprobOf = (token: string) => -(((fnv(token, 374761393) % 4000) / 1000) ** 2) / 4;

const encoder = new TextEncoder();

function entry(token: string, id: number, logprob: number, asIds: boolean) {
  const shown = asIds ? `token_id:${id}` : token;
  return { token: shown, logprob, bytes: [...encoder.encode(shown)] };
}

function logprobEntry(token: string, req: LogprobRequest) {
  const id = simulatedTokenId(token);
  const logprob = logprobOf(token);
  const top = Array.from({ length: req.top }, (_, i) => {
    // The sampled token first, then made-up alternatives each less likely than the one before.
    if (i === 0) return entry(token, id, logprob, req.asIds);
    const alt = (id + i * 7919) % VOCAB;
    return entry(`<alt${alt}>`, alt, logprob - i * 0.75, true);
  });
  return { ...entry(token, id, logprob, req.asIds), top_logprobs: top };
}

/** The text a choice carries: its content, or its tool calls' arguments. */
function emitted(choice: Record<string, unknown>): string | null {
  const part = (choice.delta ?? choice.message) as
    | { content?: unknown; tool_calls?: { function?: { arguments?: unknown } }[] }
    | undefined;
  if (!part) return null;
  let text = typeof part.content === "string" ? part.content : "";
  for (const call of part.tool_calls ?? [])
    if (typeof call.function?.arguments === "string") text += call.function.arguments;
  return text.length ? text : null;
}

function annotate(choice: object, req: LogprobRequest): object {
  const text = emitted(choice as Record<string, unknown>);
  if (text === null) return choice;
  const tokens = simulatedTokens(text);
  return {
    ...choice,
    ...(req.logprobs ? { logprobs: { content: tokens.map((t) => logprobEntry(t, req)) } } : {}),
    ...(req.returnIds ? { token_ids: tokens.map(simulatedTokenId) } : {}),
  };
}

/** `format` with each choice's log-probabilities and token ids as `req` asks. */
export function withLogprobs(format: Format, req: LogprobRequest): Format {
  return {
    ...format,
    token: (text, first) => format.token(text, first).map((c) => annotate(c, req)),
    final: (finish) => format.final(finish).map((c) => annotate(c, req)),
    whole: (text, finish) => format.whole(text, finish).map((c) => annotate(c, req)),
  };
}

/**
 * The answer's own fields for `req`: the label, and `prompt_token_ids` (the simulated tokens of the
 * messages as a plain chat template lays them out) when token ids are asked for.
 */
export function answerFields(
  req: LogprobRequest,
  messages: readonly { role: string; content?: unknown }[],
): Record<string, unknown> {
  if (!req.returnIds) return { simulated: SIMULATED_NOTE };
  const prompt = messages
    .map((m) => `<|${m.role}|>\n${typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? "")}\n`)
    .join("");
  return { simulated: SIMULATED_NOTE, prompt_token_ids: simulatedTokens(prompt).map(simulatedTokenId) };
}
