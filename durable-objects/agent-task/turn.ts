/**
 * One turn of a task's loop, as pure steps over the task's state: what the model is sent, what its
 * answer asks for, and whether a budget stops the task before the turn starts.
 */
import { openAiTools, toolNamed } from "../../protocol/agents/tools.js";
import type { EndReason } from "../../protocol/agents/task.js";
import { captureOptions, type CaptureTag } from "../../protocol/envs/capture.js";
import type { TaskState } from "./store.js";

export const SYSTEM_PROMPT = [
  "You are a coding agent working on a task in a sandboxed copy of a repository, at /workspace.",
  "Use the tools to read, search, edit and test the code; call several at once when they do not depend on each other.",
  "The sandbox has no network. Run the project's tests with run_terminal to check your work.",
  "When the task is done, call finish with a short summary of what you changed.",
].join("\n");

/** The fewest completion tokens a turn may be given: below this, the token budget ends the task. */
export const MIN_COMPLETION_TOKENS = 256;
/** The least command time worth a turn: below this, the sandbox time budget ends the task. */
export const MIN_COMMAND_SECONDS = 0.5;
/** The most completion tokens one turn asks for. */
export const MAX_COMPLETION_TOKENS = 8192;

export type ChatMessage =
  | { role: "system" | "user"; content: string }
  | { role: "assistant"; content: string | null; tool_calls?: ModelToolCall[] }
  | { role: "tool"; tool_call_id: string; content: string };

export interface ModelToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** Each message's length as JSON, measured once: a conversation only grows, and is counted every turn. */
const jsonLengths = new WeakMap<ChatMessage, number>();
const jsonLength = (message: ChatMessage) => {
  let length = jsonLengths.get(message);
  if (length === undefined) jsonLengths.set(message, (length = JSON.stringify(message).length));
  return length;
};

/**
 * A conservative count of a prompt's tokens: no tokenizer makes fewer than one per three characters
 * of code. The characters are those of the conversation as JSON (`[`, the messages, their commas, `]`).
 */
export const promptTokens = (messages: readonly ChatMessage[]) =>
  Math.ceil((messages.reduce((sum, m) => sum + jsonLength(m), 0) + Math.max(2, messages.length + 1)) / 3) + 2000;

/**
 * Why the next turn may not start, if a budget says so. `commandSeconds` is how long the sandbox's
 * commands have run; `prompt` is the next prompt's tokens, or null where tokens are not metered (an
 * environment session: its client's model is not called through the edge).
 */
export function budgetStop(
  state: TaskState,
  now: number,
  commandSeconds: number,
  prompt: number | null,
): EndReason | null {
  const { limits, usage } = state;
  if (usage.turns >= limits.turns) return "turns";
  if (state.startedAt && now - Date.parse(state.startedAt) >= limits.wallSeconds * 1000) return "wall_time";
  if (limits.sandboxSeconds - commandSeconds < MIN_COMMAND_SECONDS) return "sandbox_time";
  if (usage.outputBytes >= limits.outputBytes) return "output_bytes";
  if (prompt !== null && limits.tokens - usage.tokens < prompt + MIN_COMPLETION_TOKENS) return "tokens";
  return null;
}

/** The chat request of a turn: the conversation, the tools, and the completion tokens reserved for it. */
export function chatRequest(state: TaskState, messages: readonly ChatMessage[], prompt: number) {
  // A rollout's model is called with the run's sampling; an agent task's with the backend's defaults.
  const sampling = state.env?.sampling;
  return {
    model: state.model,
    messages: [{ role: "system", content: SYSTEM_PROMPT }, ...messages],
    tools: openAiTools({ searchable: state.workspaceId !== undefined }),
    tool_choice: "auto",
    parallel_tool_calls: true,
    max_tokens: Math.min(
      sampling?.max_tokens ?? MAX_COMPLETION_TOKENS,
      MAX_COMPLETION_TOKENS,
      state.limits.tokens - state.usage.tokens - prompt,
    ),
    ...(sampling?.temperature !== undefined ? { temperature: sampling.temperature } : {}),
    ...(sampling?.top_p !== undefined ? { top_p: sampling.top_p } : {}),
    ...(sampling?.seed !== undefined ? { seed: sampling.seed } : {}),
    stream: false,
  };
}

/**
 * A turn's gateway call: a rollout's is tagged for capture (its answer becomes its `rollout_steps`
 * row) and asks the backend for log-probabilities and token ids; an agent task's never asks for them.
 */
export function turnCall(
  state: TaskState,
  messages: readonly ChatMessage[],
  prompt: number,
  turn: number,
): { request: Record<string, unknown>; capture?: CaptureTag } {
  const request = chatRequest(state, messages, prompt);
  if (state.kind !== "rollout" || !state.startedAt) return { request };
  const capture = {
    rolloutId: state.id,
    runId: state.env?.parent?.runId ?? null,
    turn,
    startedAt: Date.parse(state.startedAt),
  };
  return { request: captureOptions(request), capture };
}

export interface ParsedAnswer {
  content: string | null;
  toolCalls: ModelToolCall[];
  tokens: number;
  promptTokens: number;
  completionTokens: number;
}

/** The assistant's message and usage from a chat completion, or null if the body is not one. */
export function parseAnswer(body: unknown): ParsedAnswer | null {
  const b = body as {
    choices?: { message?: { content?: unknown; tool_calls?: unknown } }[];
    usage?: { total_tokens?: unknown; prompt_tokens?: unknown; completion_tokens?: unknown };
  } | null;
  const message = b?.choices?.[0]?.message;
  if (!message) return null;
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls : [];
  const toolCalls: ModelToolCall[] = calls.flatMap((c: unknown) => {
    const call = c as { id?: unknown; function?: { name?: unknown; arguments?: unknown } };
    if (typeof call?.id !== "string" || typeof call.function?.name !== "string") return [];
    const args = typeof call.function.arguments === "string" ? call.function.arguments : "{}";
    return [{ id: call.id, type: "function" as const, function: { name: call.function.name, arguments: args } }];
  });
  const count = (n: unknown) => (typeof n === "number" ? n : 0);
  return {
    content: typeof message.content === "string" ? message.content : null,
    toolCalls,
    tokens: count(b?.usage?.total_tokens),
    promptTokens: count(b?.usage?.prompt_tokens),
    completionTokens: count(b?.usage?.completion_tokens),
  };
}

/**
 * Why a task ends on an answer that is not a chat completion: the status and the error's own words,
 * from a problem document's `detail` or an OpenAI error's `error.message`.
 */
export function modelErrorMessage(status: number, body: unknown): string {
  const b = body as { detail?: unknown; error?: { message?: unknown } } | null;
  const detail =
    typeof b?.detail === "string" ? b.detail : typeof b?.error?.message === "string" ? b.error.message : undefined;
  return `The model answered ${status}: ${detail ?? "no message"}`;
}

/** A call's arguments checked against its tool's schema: the parsed value, or the error the model reads. */
export function checkCall(
  name: string,
  rawArgs: string,
): { ok: true; args: unknown } | { ok: false; code: string; message: string } {
  const tool = toolNamed(name);
  if (!tool) return { ok: false, code: "unknown_tool", message: `There is no tool named ${name}.` };
  let json: unknown;
  try {
    json = JSON.parse(rawArgs || "{}");
  } catch {
    return { ok: false, code: "invalid_arguments", message: "The arguments are not JSON." };
  }
  const parsed = tool.args.safeParse(json);
  if (!parsed.success)
    return {
      ok: false,
      code: "invalid_arguments",
      message: parsed.error.issues.map((i) => `${i.path.join(".") || "arguments"}: ${i.message}`).join("; "),
    };
  return { ok: true, args: parsed.data };
}
