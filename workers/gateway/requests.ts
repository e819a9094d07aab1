/**
 * The OpenAI-compatible request bodies the gateway takes, and a quick check for tab's: the schemas
 * are the rule, and `quickCompletionRequest` passes a body that plainly keeps to it without the
 * schema's walk (which costs tab's hot path about as much as a stream's event on the Workers
 * runtime, where zod cannot compile its checks); anything else goes to the schema, which answers
 * the same or says what is wrong.
 */
import { z } from "zod";

const model = z.string().trim().min(1).max(256);
const streamOptions = z.object({ include_usage: z.boolean().optional() }).loose().nullish();
const maxTokens = z.number().int().min(1).max(1_000_000).nullish();

/** The most choices (`n`) one chat completion may ask for: each costs a whole answer's tokens. */
const MAX_CHOICES = 8;

export const CompletionRequest = z
  .object({
    model,
    prompt: z.union([z.string(), z.array(z.string()).length(1, "send one prompt per request")]),
    suffix: z.string().nullish(),
    stream: z.boolean().nullish(),
    stream_options: streamOptions,
    max_tokens: maxTokens,
    n: z.literal(1).nullish(),
  })
  .loose();

export const ChatRequest = z
  .object({
    model,
    messages: z
      .array(z.object({ role: z.string().min(1).max(64) }).loose())
      .min(1)
      .max(4096),
    stream: z.boolean().nullish(),
    stream_options: streamOptions,
    max_tokens: maxTokens,
    max_completion_tokens: maxTokens,
    n: z.number().int().min(1).max(MAX_CHOICES).nullish(),
    prediction: z
      .object({
        type: z.literal("content"),
        content: z.union([z.string(), z.array(z.object({ type: z.literal("text"), text: z.string() }).loose())]),
      })
      .nullish(),
  })
  .loose();

export const EmbeddingRequest = z
  .object({
    model,
    input: z.union([
      z.string(),
      z.array(z.string()).min(1).max(2048),
      z.array(z.number().int()).min(1),
      z.array(z.array(z.number().int()).min(1)).min(1).max(2048),
    ]),
  })
  .loose();

const MAX_TOKENS = 1_000_000;
const optional = (v: unknown) => v === undefined || v === null;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * `body` as `CompletionRequest` parses it, when it plainly keeps to it: a model name with no
 * surrounding space, one prompt, and the optional fields of their types; undefined otherwise, when
 * the schema must decide.
 */
export function quickCompletionRequest(body: unknown): z.output<typeof CompletionRequest> | undefined {
  if (!isObject(body)) return undefined;
  const { model, prompt, suffix, stream, stream_options: options, max_tokens: maxTokens, n } = body;
  if (typeof model !== "string" || model.length < 1 || model.length > 256 || model.trim() !== model) return undefined;
  if (typeof prompt !== "string" && !(Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === "string"))
    return undefined;
  if (!optional(suffix) && typeof suffix !== "string") return undefined;
  if (!optional(stream) && typeof stream !== "boolean") return undefined;
  if (
    !optional(options) &&
    !(isObject(options) && (options.include_usage === undefined || typeof options.include_usage === "boolean"))
  )
    return undefined;
  if (
    !optional(maxTokens) &&
    !(Number.isInteger(maxTokens) && (maxTokens as number) >= 1 && (maxTokens as number) <= MAX_TOKENS)
  )
    return undefined;
  if (!optional(n) && n !== 1) return undefined;
  return body as z.output<typeof CompletionRequest>;
}
