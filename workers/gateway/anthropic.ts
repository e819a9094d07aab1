/**
 * Anthropic's Messages API behind the OpenAI-compatible surface. A chat completion request is
 * rewritten into `POST /v1/messages`, and the answer (whole, or its stream of typed events) back
 * into chat completion objects and chunks, so that an Anthropic endpoint can sit in a chat or
 * apply pool beside OpenAI-compatible ones and take over when they fail. Text, images, tools,
 * `reasoning_effort` (as extended thinking, returned as `reasoning`) and usage are carried
 * across; what has no counterpart there is listed by `anthropicCannotServe`, and such requests go
 * to the pool's other endpoints instead.
 */

/** The `anthropic-version` header: the Messages API's only stable version. */
export const ANTHROPIC_VERSION = "2023-06-01";

/** The Messages API requires `max_tokens`; this is sent when the client set no limit. */
export const ANTHROPIC_DEFAULT_MAX_TOKENS = 4096;

/**
 * Extended thinking's token budget for each of OpenAI's `reasoning_effort` values (`minimal` and
 * `none` ask for none). The API's smallest budget is 1,024.
 */
export const THINKING_BUDGETS: Record<string, number> = { low: 1024, medium: 4096, high: 16384 };
const MIN_THINKING_BUDGET = 1024;

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

const CONTENT_PARTS = new Set(["text", "image_url"]);
const ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);

function parsesAsObject(text: unknown): boolean {
  if (typeof text !== "string") return false;
  if (text.trim() === "") return true;
  try {
    return isObject(JSON.parse(text));
  } catch {
    return false;
  }
}

/**
 * What in this chat request the Messages API cannot take, or undefined when it can take all of it.
 * The body has passed the route's validation.
 */
export function anthropicCannotServe(body: Json): string | undefined {
  if (typeof body.n === "number" && body.n > 1) return "`n` above 1 (it answers with one choice only)";
  if (body.logprobs === true || body.top_logprobs != null) return "logprobs";
  if (isObject(body.response_format) && body.response_format.type !== "text") return "response_format";
  if (body.audio != null || (Array.isArray(body.modalities) && body.modalities.includes("audio"))) return "audio";
  if (body.functions != null || body.function_call != null) return "the legacy `functions` parameter";
  for (const message of body.messages as Json[]) {
    if (!ROLES.has(String(message.role))) return `messages with the role ${JSON.stringify(message.role)}`;
    if (Array.isArray(message.content))
      for (const part of message.content as unknown[]) {
        const type = isObject(part) ? part.type : undefined;
        if (!CONTENT_PARTS.has(String(type))) return `${JSON.stringify(type)} content parts`;
      }
    if (Array.isArray(message.tool_calls))
      for (const call of message.tool_calls as unknown[]) {
        const fn = isObject(call) && isObject(call.function) ? call.function : undefined;
        if (!fn || typeof fn.name !== "string") return "tool calls other than functions";
        if (!parsesAsObject(fn.arguments)) return "tool call arguments that are not a JSON object";
      }
  }
  if (Array.isArray(body.tools))
    for (const tool of body.tools as unknown[])
      if (!isObject(tool) || tool.type !== "function" || !isObject(tool.function)) return "tools other than functions";
  return undefined;
}

/** The text of a message's content: a string, or its text parts joined. */
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part) => (isObject(part) && part.type === "text" && typeof part.text === "string" ? part.text : ""))
    .join("");
}

const text = (value: string): Json[] => (value ? [{ type: "text", text: value }] : []);

const DATA_URL = /^data:(image\/[\w.+-]+);base64,(.*)$/s;

/** A user message's content as Messages API blocks (empty text is dropped: the API refuses it). */
function blocks(content: unknown): Json[] {
  if (!Array.isArray(content)) return text(textOf(content));
  return content.flatMap((part: Json): Json[] => {
    if (part.type === "text") return text(typeof part.text === "string" ? part.text : "");
    const url = isObject(part.image_url) ? String(part.image_url.url ?? "") : "";
    const data = DATA_URL.exec(url);
    return [
      {
        type: "image",
        source: data ? { type: "base64", media_type: data[1], data: data[2] } : { type: "url", url },
      },
    ];
  });
}

function toolUses(calls: unknown): Json[] {
  if (!Array.isArray(calls)) return [];
  return calls.map((call: { id?: unknown; function: { name: string; arguments?: string } }) => ({
    type: "tool_use",
    id: String(call.id ?? ""),
    name: call.function.name,
    input: call.function.arguments?.trim() ? JSON.parse(call.function.arguments) : {},
  }));
}

function toolChoice(choice: unknown, parallel: unknown): Json | undefined {
  let out: Json | undefined;
  if (choice === "none") return { type: "none" };
  if (choice === "auto") out = { type: "auto" };
  else if (choice === "required") out = { type: "any" };
  else if (isObject(choice) && isObject(choice.function)) out = { type: "tool", name: choice.function.name };
  if (parallel === false) out = { ...(out ?? { type: "auto" }), disable_parallel_tool_use: true };
  return out;
}

/**
 * The Messages API request for an OpenAI chat completion request (one `anthropicCannotServe`
 * passed). System and developer messages become `system`; tool results become user turns; turns of
 * the same role in a row are merged, as the API expects them to alternate. The temperature is
 * clamped to the API's range of 0 to 1.
 *
 * With `cache`, the end of the system prompt and the end of the conversation are marked for
 * Anthropic's prompt cache (OpenAI caches prompt prefixes by itself; Anthropic only where asked):
 * the next turn of the same chat, which repeats all of it, reads the prefix from the cache. Prompts
 * shorter than the model's minimum are not cached, and cost nothing more.
 */
export function toAnthropicRequest(body: Json, model: string, stream: boolean, cache = false): Json {
  const system: Json[] = [];
  const messages: { role: "user" | "assistant"; content: Json[] }[] = [];
  const turn = (role: "user" | "assistant", content: Json[]) => {
    if (content.length === 0) return;
    const last = messages.at(-1);
    if (last?.role === role) last.content.push(...content);
    else messages.push({ role, content });
  };
  for (const message of body.messages as Json[]) {
    if (message.role === "system" || message.role === "developer") system.push(...text(textOf(message.content)));
    else if (message.role === "user") turn("user", blocks(message.content));
    else if (message.role === "assistant")
      turn("assistant", [...text(textOf(message.content)), ...toolUses(message.tool_calls)]);
    else if (message.role === "tool")
      turn("user", [
        { type: "tool_result", tool_use_id: String(message.tool_call_id ?? ""), content: textOf(message.content) },
      ]);
  }
  if (cache) {
    const last = (blocks: Json[] | undefined) => blocks?.at(-1);
    for (const block of [last(system), last(messages.at(-1)?.content)])
      if (block) block.cache_control = { type: "ephemeral" };
  }
  const limit = body.max_completion_tokens ?? body.max_tokens;
  const thinking = thinkingBudget(body, typeof limit === "number" ? limit : undefined);
  const out: Json = {
    model,
    messages,
    // Like OpenAI's limit for reasoning models, Anthropic's counts the thinking too.
    max_tokens: typeof limit === "number" ? limit : (thinking ?? 0) + ANTHROPIC_DEFAULT_MAX_TOKENS,
  };
  if (system.length > 0) out.system = system;
  if (stream) out.stream = true;
  if (thinking !== undefined) out.thinking = { type: "enabled", budget_tokens: thinking };
  // Thinking takes neither a temperature nor top_p.
  else {
    if (typeof body.temperature === "number") out.temperature = Math.min(1, Math.max(0, body.temperature));
    if (typeof body.top_p === "number") out.top_p = body.top_p;
  }
  const stop = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? body.stop : [];
  if (stop.length > 0) out.stop_sequences = stop;
  if (typeof body.user === "string" && body.user) out.metadata = { user_id: body.user };
  if (Array.isArray(body.tools) && body.tools.length > 0)
    out.tools = (body.tools as { function: Json }[]).map(({ function: fn }) => ({
      name: fn.name,
      ...(typeof fn.description === "string" ? { description: fn.description } : {}),
      input_schema: isObject(fn.parameters) ? fn.parameters : { type: "object", properties: {} },
    }));
  const choice = toolChoice(body.tool_choice, body.parallel_tool_calls);
  if (choice && out.tools) out.tool_choice = choice;
  return out;
}

/**
 * Extended thinking's budget for this request, or undefined when it asks for none or cannot have it:
 * a forced tool call, a conversation that carries tool results (the API then needs the thinking
 * blocks of the turn that called the tool, which OpenAI's format cannot send back), or a limit too
 * small for the smallest budget.
 */
function thinkingBudget(body: Json, limit: number | undefined): number | undefined {
  const budget = THINKING_BUDGETS[String(body.reasoning_effort)];
  if (budget === undefined) return undefined;
  if (body.tool_choice === "required" || isObject(body.tool_choice)) return undefined;
  if ((body.messages as Json[]).some((m) => m.role === "tool")) return undefined;
  const fits = limit === undefined ? budget : Math.min(budget, limit - 1);
  return fits >= MIN_THINKING_BUDGET ? fits : undefined;
}

const FINISH: Record<string, string> = {
  end_turn: "stop",
  stop_sequence: "stop",
  pause_turn: "stop",
  max_tokens: "length",
  tool_use: "tool_calls",
  refusal: "content_filter",
};

const finishReason = (stop: unknown): string | null => (typeof stop === "string" ? (FINISH[stop] ?? "stop") : null);

const count = (value: unknown) => (typeof value === "number" ? value : 0);

/** Prompt tokens as OpenAI counts them: cache reads and writes are part of the prompt. */
const promptTokens = (usage: Json) =>
  count(usage.input_tokens) + count(usage.cache_creation_input_tokens) + count(usage.cache_read_input_tokens);

/** OpenAI's usage object; tokens read from the prompt cache are its `cached_tokens`. */
function openAiUsage(prompt: number, completion: number, cached: number): Json {
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached },
  };
}

/**
 * Thinking, under both names OpenAI-compatible servers give it: `reasoning` (vLLM's) and
 * `reasoning_content` (DeepSeek's, and vLLM's before), so clients written for either read it.
 */
const reasoning = (text: string) => ({ reasoning: text, reasoning_content: text });

/** A whole Messages API answer as an OpenAI chat completion. */
export function fromAnthropicMessage(message: Json): Json {
  const content = Array.isArray(message.content) ? (message.content as Json[]) : [];
  const answer = content.map((block) => (block.type === "text" ? String(block.text ?? "") : "")).join("");
  const thought = content.map((block) => (block.type === "thinking" ? String(block.thinking ?? "") : "")).join("");
  const calls = content
    .filter((block) => block.type === "tool_use")
    .map((block) => ({
      id: block.id,
      type: "function",
      function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) },
    }));
  const usage = isObject(message.usage) ? message.usage : {};
  return {
    id: message.id,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: message.model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: calls.length > 0 && !answer ? null : answer,
          ...(thought ? reasoning(thought) : {}),
          ...(calls.length > 0 ? { tool_calls: calls } : {}),
          refusal: null,
        },
        logprobs: null,
        finish_reason: finishReason(message.stop_reason),
      },
    ],
    usage: openAiUsage(promptTokens(usage), count(usage.output_tokens), count(usage.cache_read_input_tokens)),
  };
}

/** What one server-sent event of the Messages API becomes: chat completion chunks, and whether the answer is whole. */
export interface Translated {
  events: string[];
  done: boolean;
}

/**
 * Turns a Messages API stream into chat completion chunks, one event at a time. Nothing is sent
 * for `message_start`: the first chunk is the first text or tool call, so that the edge counts
 * the first token as the first token, and can still fail over before it. `message_stop` ends
 * the answer with a usage chunk (the edge keeps it only when the client asked for usage). An
 * `error` event becomes `{"error": …}`, which the edge reports as the backend failing mid-stream.
 */
export function anthropicStream(): (event: string | undefined, data: string) => Translated {
  let id = "";
  let model = "";
  const created = Math.floor(Date.now() / 1000);
  let prompt = 0;
  let completion = 0;
  let cached = 0;
  let spoke = false;
  /** Content block index → tool call index, for the blocks that are tool calls. */
  const tools = new Map<number, number>();
  const envelope = (fields: Json) => JSON.stringify({ id, object: "chat.completion.chunk", created, model, ...fields });
  const chunk = (delta: Json, finish: string | null = null) => {
    if (!spoke && finish === null) {
      spoke = true;
      delta = { role: "assistant", ...delta };
    }
    return envelope({ choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] });
  };
  const none: Translated = { events: [], done: false };
  return (event, data) => {
    let value: Json;
    try {
      const parsed = JSON.parse(data) as unknown;
      if (!isObject(parsed)) throw new Error("not an object");
      value = parsed;
    } catch {
      // Passed on as it is: the edge reports it as a malformed event.
      return { events: [data], done: false };
    }
    switch (event ?? value.type) {
      case "message_start": {
        const message = isObject(value.message) ? value.message : {};
        id = String(message.id ?? "");
        model = String(message.model ?? "");
        const usage = isObject(message.usage) ? message.usage : {};
        prompt = promptTokens(usage);
        cached = count(usage.cache_read_input_tokens);
        completion = count(usage.output_tokens);
        return none;
      }
      case "content_block_start": {
        const block = isObject(value.content_block) ? value.content_block : {};
        if (block.type === "tool_use") {
          const index = tools.size;
          tools.set(count(value.index), index);
          const call = { index, id: block.id, type: "function", function: { name: block.name, arguments: "" } };
          return { events: [chunk({ content: null, tool_calls: [call] })], done: false };
        }
        if (block.type === "text" && typeof block.text === "string" && block.text)
          return { events: [chunk({ content: block.text })], done: false };
        return none;
      }
      case "content_block_delta": {
        const delta = isObject(value.delta) ? value.delta : {};
        if (delta.type === "text_delta" && typeof delta.text === "string")
          return { events: [chunk({ content: delta.text })], done: false };
        if (delta.type === "thinking_delta" && typeof delta.thinking === "string")
          return { events: [chunk(reasoning(delta.thinking))], done: false };
        const index = tools.get(count(value.index));
        if (delta.type === "input_json_delta" && index !== undefined)
          return {
            events: [chunk({ tool_calls: [{ index, function: { arguments: String(delta.partial_json ?? "") } }] })],
            done: false,
          };
        return none;
      }
      case "message_delta": {
        const usage = isObject(value.usage) ? value.usage : {};
        // Counts here are cumulative; a later API version also repeats the prompt's.
        if (typeof usage.output_tokens === "number") completion = usage.output_tokens;
        if (typeof usage.input_tokens === "number") {
          prompt = promptTokens(usage);
          cached = count(usage.cache_read_input_tokens);
        }
        const stop = isObject(value.delta) ? finishReason(value.delta.stop_reason) : null;
        return stop ? { events: [chunk({}, stop)], done: false } : none;
      }
      case "message_stop":
        return { events: [envelope({ choices: [], usage: openAiUsage(prompt, completion, cached) })], done: true };
      case "error": {
        const error = isObject(value.error) ? value.error : {};
        const message = typeof error.message === "string" ? error.message : "the backend reported an error";
        return { events: [JSON.stringify({ error: { message, type: error.type ?? "error" } })], done: false };
      }
      default:
        // `ping`, `content_block_stop`, and event types added later.
        return none;
    }
  };
}
