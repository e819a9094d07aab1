/**
 * OpenAI's Responses API (`POST /v1/responses`) on the chat pools: a request is rewritten into a
 * chat completion request, which takes the chat route's whole path (routing, failover, priorities,
 * limits, metering), and the chat answer back into a Response object (whole) or the Responses
 * stream's typed events (responses-stream.ts). The edge keeps no prompts or outputs at rest, so
 * nothing that points at a stored response or item can be followed: `previous_response_id`,
 * `conversation`, `background` and stored prompts are refused, `store` is answered as false, and
 * `item_reference` and `reasoning` input items (which the AI SDK and LangChain send back by id)
 * are left out, as a chat backend could not take them anyway.
 */
import { z } from "zod";
import { ApiError } from "../problem.js";

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

const Item = z.looseObject({ type: z.string().optional(), role: z.string().optional() });

export const REASONING_EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh"] as const;

export const ResponsesRequest = z
  .object({
    model: z.string().trim().min(1).max(256),
    input: z.union([z.string(), z.array(Item).max(4096)]),
    instructions: z.string().nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.looseObject({ include_obfuscation: z.boolean().optional() }).nullish(),
    max_output_tokens: z.number().int().min(1).max(1_000_000).nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    tools: z
      .array(z.looseObject({ type: z.string() }))
      .max(512)
      .nullish(),
    tool_choice: z.union([z.enum(["auto", "none", "required"]), z.looseObject({ type: z.string() })]).nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    reasoning: z.looseObject({ effort: z.enum(REASONING_EFFORTS).nullish(), summary: z.string().nullish() }).nullish(),
    text: z.looseObject({ format: z.looseObject({ type: z.string() }).nullish() }).nullish(),
    metadata: z.record(z.string(), z.string()).nullish(),
    user: z.string().max(512).nullish(),
    store: z.boolean().nullish(),
    previous_response_id: z.string().nullish(),
    background: z.boolean().nullish(),
    include: z.array(z.string()).nullish(),
    truncation: z.enum(["auto", "disabled"]).nullish(),
  })
  .loose();
export type ResponsesRequest = z.infer<typeof ResponsesRequest>;

/** A request field the edge cannot honour: 400, naming it. */
function refuse(path: string, message: string): never {
  throw new ApiError("invalid_request", `${path}: ${message}`, { errors: [{ path, message }] });
}

/** Parses one part of the request with `schema`, or refuses it with every offending field under `path`. */
function parsed<S extends z.ZodType>(schema: S, value: unknown, path: string): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const errors = result.error.issues.map((issue) => ({
    path: [path, ...issue.path.map(String)].join("."),
    message: issue.message,
  }));
  const summary = errors.map((e) => `${e.path}: ${e.message}`).join("; ");
  throw new ApiError("invalid_request", `The request body is invalid: ${summary}`, { errors });
}

/** Fields that point at state the edge would have had to keep, and why each is refused. */
const STATEFUL: [field: string, refused: (value: unknown) => boolean, message: string][] = [
  [
    "previous_response_id",
    (v) => v != null,
    "this edge stores no responses, so none can be continued; send the whole conversation as input items",
  ],
  ["conversation", (v) => v != null, "this edge stores no conversations; send the whole conversation as input items"],
  ["background", (v) => v === true, "background responses are not supported: this edge stores no responses to poll"],
  ["prompt", (v) => v != null, "stored prompts are not supported; send the instructions and input themselves"],
  ["top_logprobs", (v) => typeof v === "number" && v > 0, "log probabilities are not returned by /v1/responses"],
];

const Part = z.looseObject({ type: z.string() });
const Message = z.looseObject({
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.union([z.string(), z.array(Part)]),
});
const FunctionCall = z.looseObject({ call_id: z.string().min(1), name: z.string().min(1), arguments: z.string() });
const FunctionCallOutput = z.looseObject({ call_id: z.string().min(1), output: z.union([z.string(), z.array(Part)]) });
const FunctionTool = z.looseObject({
  name: z.string().min(1).max(256),
  description: z.string().nullish(),
  parameters: z.looseObject({}).nullish(),
  strict: z.boolean().nullish(),
});

/** The text of a content part, by type; parts that are not text are handled (or refused) by the caller. */
const TEXT_PARTS: Record<string, (part: Json) => unknown> = {
  input_text: (part) => part.text,
  output_text: (part) => part.text,
  refusal: (part) => part.refusal,
};

function partText(part: Json, path: string): string {
  const text = TEXT_PARTS[String(part.type)]?.(part);
  if (typeof text !== "string")
    refuse(`${path}.type`, `${JSON.stringify(part.type)} content parts are not supported here`);
  return text;
}

/** A user message's content parts as chat content parts: text and images (by URL or data URL). */
function userContent(content: string | Json[], path: string): string | Json[] {
  if (typeof content === "string") return content;
  return content.map((part, i) => {
    if (part.type !== "input_image") return { type: "text", text: partText(part, `${path}.${i}`) };
    if (typeof part.image_url !== "string")
      refuse(`${path}.${i}.image_url`, "images are taken by URL or data URL only (this edge keeps no files)");
    const detail = typeof part.detail === "string" ? { detail: part.detail } : {};
    return { type: "image_url", image_url: { url: part.image_url, ...detail } };
  });
}

const textOf = (content: string | Json[], path: string) =>
  typeof content === "string" ? content : content.map((part, i) => partText(part, `${path}.${i}`)).join("");

interface ChatMessage extends Json {
  role: string;
}

/**
 * What each input item becomes in the chat conversation, by its type. A model's turn is several
 * items (its text, then each function call), and in chat one assistant message: a function call
 * joins the assistant message before it.
 */
const ITEMS: Record<string, (item: Json, path: string, messages: ChatMessage[]) => void> = {
  message: (item, path, messages) => {
    const { role, content } = parsed(Message, item, path);
    if (role === "user") messages.push({ role, content: userContent(content, `${path}.content`) });
    // Chat templates know `system` everywhere; OpenAI takes it as `developer` for the models that use that.
    else if (role === "system" || role === "developer")
      messages.push({ role: "system", content: textOf(content, `${path}.content`) });
    else messages.push({ role, content: textOf(content, `${path}.content`) });
  },
  function_call: (item, path, messages) => {
    const call = parsed(FunctionCall, item, path);
    const made = { id: call.call_id, type: "function", function: { name: call.name, arguments: call.arguments } };
    const last = messages.at(-1);
    if (last?.role === "assistant") last.tool_calls = [...((last.tool_calls as Json[] | undefined) ?? []), made];
    else messages.push({ role: "assistant", content: null, tool_calls: [made] });
  },
  function_call_output: (item, path, messages) => {
    const { call_id, output } = parsed(FunctionCallOutput, item, path);
    messages.push({ role: "tool", tool_call_id: call_id, content: textOf(output, `${path}.output`) });
  },
  // Items by id, and reasoning: they name stored items (this edge keeps none), and a chat backend
  // takes no reasoning back.
  item_reference: () => {},
  reasoning: () => {},
};

function chatMessages(request: ResponsesRequest): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (request.instructions) messages.push({ role: "system", content: request.instructions });
  if (typeof request.input === "string") {
    messages.push({ role: "user", content: request.input });
    return messages;
  }
  request.input.forEach((item, i) => {
    const type = item.type ?? (item.role !== undefined ? "message" : undefined);
    const translate = type === undefined ? undefined : ITEMS[type];
    if (!translate)
      refuse(
        `input.${i}.type`,
        `${JSON.stringify(type ?? null)} items are not supported (messages, function_call and function_call_output are)`,
      );
    translate(item, `input.${i}`, messages);
  });
  if (!messages.some((m) => m.role !== "system")) refuse("input", "there is no message to answer");
  return messages;
}

function chatTools(tools: Json[]): Json[] {
  return tools.map((tool, i) => {
    if (tool.type !== "function")
      refuse(
        `tools.${i}.type`,
        `${JSON.stringify(tool.type)} tools are built into OpenAI's platform and not provided here; only function tools are supported`,
      );
    const fn = parsed(FunctionTool, tool, `tools.${i}`);
    return {
      type: "function",
      function: {
        name: fn.name,
        ...(fn.description != null ? { description: fn.description } : {}),
        ...(fn.parameters != null ? { parameters: fn.parameters } : {}),
        ...(fn.strict != null ? { strict: fn.strict } : {}),
      },
    };
  });
}

function chatToolChoice(choice: NonNullable<ResponsesRequest["tool_choice"]>): unknown {
  if (typeof choice === "string") return choice;
  if (choice.type === "function" && typeof choice.name === "string")
    return { type: "function", function: { name: choice.name } };
  return refuse(
    "tool_choice",
    `${JSON.stringify(choice.type)} is not supported; use auto, none, required or a function`,
  );
}

/** `text.format` as chat's `response_format`. */
function responseFormat(format: Json): Json | undefined {
  if (format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object" };
  if (format.type === "json_schema") {
    const { name, schema, description, strict } = parsed(
      z.looseObject({
        name: z.string().min(1),
        schema: z.looseObject({}),
        description: z.string().nullish(),
        strict: z.boolean().nullish(),
      }),
      format,
      "text.format",
    );
    const extra = { ...(description != null ? { description } : {}), ...(strict != null ? { strict } : {}) };
    return { type: "json_schema", json_schema: { name, schema, ...extra } };
  }
  return refuse(
    "text.format.type",
    `${JSON.stringify(format.type)} is not supported; use text, json_object or json_schema`,
  );
}

/**
 * The chat completion request for a Responses request, or a 400 naming what cannot be translated.
 * A stream always asks for usage, which the Response reports (and the edge meters).
 */
export function toChatRequest(request: ResponsesRequest): Json & { model: string } {
  for (const [field, refused, message] of STATEFUL) if (refused((request as Json)[field])) refuse(field, message);
  const chat: Json & { model: string } = { model: request.model, messages: chatMessages(request) };
  if (request.stream) {
    chat.stream = true;
    chat.stream_options = { include_usage: true };
  }
  if (request.max_output_tokens != null) chat.max_completion_tokens = request.max_output_tokens;
  if (request.temperature != null) chat.temperature = request.temperature;
  if (request.top_p != null) chat.top_p = request.top_p;
  if (request.tools?.length) chat.tools = chatTools(request.tools);
  if (request.tool_choice != null) chat.tool_choice = chatToolChoice(request.tool_choice);
  if (request.parallel_tool_calls != null) chat.parallel_tool_calls = request.parallel_tool_calls;
  if (request.reasoning?.effort != null) chat.reasoning_effort = request.reasoning.effort;
  const format = request.text?.format ? responseFormat(request.text.format) : undefined;
  if (format) chat.response_format = format;
  if (request.user) chat.user = request.user;
  return chat;
}

/** A fresh id with OpenAI's prefix for its kind (`resp`, `msg`, `fc`, `rs`). */
export const newId = (prefix: string) => `${prefix}_${crypto.randomUUID().replaceAll("-", "")}`;

/** The Responses API's usage, from a chat completion's. */
export function responsesUsage(usage: unknown): Json | null {
  if (!isObject(usage)) return null;
  const count = (value: unknown) => (typeof value === "number" ? value : 0);
  const input = count(usage.prompt_tokens);
  const output = count(usage.completion_tokens);
  const cached = isObject(usage.prompt_tokens_details) ? count(usage.prompt_tokens_details.cached_tokens) : 0;
  const reasoning = isObject(usage.completion_tokens_details)
    ? count(usage.completion_tokens_details.reasoning_tokens)
    : 0;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: cached },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: reasoning },
    total_tokens: input + output,
  };
}

/** Why an answer stopped short, as the Responses API says it, from chat's `finish_reason`. */
export const INCOMPLETE: Record<string, string> = { length: "max_output_tokens", content_filter: "content_filter" };

/** What a Response object says of itself and of the request it answers; `fields` fill in the rest. */
export function responseObject(id: string, createdAt: number, request: ResponsesRequest, fields: Json): Json {
  return {
    id,
    object: "response",
    created_at: createdAt,
    status: "in_progress",
    background: false,
    error: null,
    incomplete_details: null,
    instructions: request.instructions ?? null,
    max_output_tokens: request.max_output_tokens ?? null,
    model: request.model,
    output: [],
    parallel_tool_calls: request.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: { effort: request.reasoning?.effort ?? null, summary: null },
    store: false,
    temperature: request.temperature ?? 1,
    text: { format: request.text?.format ?? { type: "text" } },
    tool_choice: request.tool_choice ?? "auto",
    tools: request.tools ?? [],
    top_p: request.top_p ?? 1,
    truncation: "disabled",
    usage: null,
    user: request.user ?? null,
    metadata: request.metadata ?? {},
    ...fields,
  };
}

export const messageItem = (id: string, status: string, content: Json[]): Json => ({
  id,
  type: "message",
  status,
  role: "assistant",
  content,
});

export const textPart = (text: string): Json => ({ type: "output_text", text, annotations: [], logprobs: [] });

export const reasoningItem = (id: string, text: string | undefined): Json => ({
  id,
  type: "reasoning",
  summary: text === undefined ? [] : [{ type: "summary_text", text }],
});

export const functionCallItem = (id: string, status: string, call: { id: string; name: string; args: string }) => ({
  id,
  type: "function_call",
  status,
  call_id: call.id,
  name: call.name,
  arguments: call.args,
});

/** A whole chat completion as a Response object: its first choice's reasoning, text and function calls. */
export function fromChatCompletion(chat: Json, request: ResponsesRequest): Json {
  const choice = Array.isArray(chat.choices) && isObject(chat.choices[0]) ? chat.choices[0] : {};
  const message = isObject(choice.message) ? choice.message : {};
  const output: Json[] = [];
  const thought = [message.reasoning, message.reasoning_content].find((t) => typeof t === "string" && t !== "");
  if (typeof thought === "string") output.push(reasoningItem(newId("rs"), thought));
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObject) : [];
  const content: Json[] = [];
  if (typeof message.content === "string" && (message.content !== "" || calls.length === 0))
    content.push(textPart(message.content));
  if (typeof message.refusal === "string" && message.refusal)
    content.push({ type: "refusal", refusal: message.refusal });
  if (content.length > 0) output.push(messageItem(newId("msg"), "completed", content));
  for (const call of calls) {
    const fn = isObject(call.function) ? call.function : {};
    const made = {
      id: String(call.id ?? newId("call")),
      name: String(fn.name ?? ""),
      args: String(fn.arguments ?? ""),
    };
    output.push(functionCallItem(newId("fc"), "completed", made));
  }
  const reason = INCOMPLETE[String(choice.finish_reason)];
  return responseObject(newId("resp"), Math.floor(Date.now() / 1000), request, {
    status: reason ? "incomplete" : "completed",
    incomplete_details: reason ? { reason } : null,
    output,
    usage: responsesUsage(chat.usage),
  });
}
