/**
 * The simulator's chat completion answers, as the OpenAI-compatible kinds give them: `n` choices
 * (each its own chunk when streamed, as vLLM and OpenAI send them), and tool calls. A simulator
 * does not decide, so the rule is fixed: offered tools, it calls one when made to (`required`, or a
 * named function) and, under `auto`, when the conversation's last message is the user's; after a
 * tool result it answers in text. The call's arguments give the tool's first string property (or
 * `text`) the tokens as its value, streamed as argument deltas of one token each.
 */
import { randomUUID } from "node:crypto";
import { z } from "zod";

/** How one endpoint shapes its choices; the generation loop in simulator.ts is shared. */
export interface Format {
  /** Anthropic's Messages API: its own stream events and answer object (the fields below go unused). */
  anthropic?: true;
  idPrefix: string;
  object: string;
  chunkObject: string;
  /** Choices per answer: usage counts the completion tokens of each. */
  n: number;
  /** The choices of one streamed token, each sent as its own chunk. */
  token(text: string, first: boolean): object[];
  /** The choices of the last streamed chunk, with the finish reason. */
  final(finish: string): object[];
  /** The choices of a whole answer. */
  whole(text: string, finish: string): object[];
}

const Tool = z.looseObject({
  type: z.literal("function"),
  function: z.looseObject({ name: z.string().min(1), parameters: z.looseObject({}).optional() }),
});

const ToolChoice = z.union([
  z.enum(["none", "auto", "required"]),
  z.looseObject({ type: z.literal("function"), function: z.looseObject({ name: z.string() }) }),
]);

/** The chat request's fields that shape its answer (validated with the rest of the body). */
export const ChatAnswerFields = {
  n: z.number().int().min(1).max(128).nullish(),
  tools: z.array(Tool).nullish(),
  tool_choice: ToolChoice.nullish(),
};

interface ChatAnswerRequest {
  messages: { role: string }[];
  n?: number | null;
  tools?: z.infer<typeof Tool>[] | null;
  tool_choice?: z.infer<typeof ToolChoice> | null;
}

/** The tool this request has the simulator call, and the argument its tokens go into; or undefined. */
function toolToCall(request: ChatAnswerRequest): { name: string; argument: string } | undefined {
  const tools = request.tools ?? [];
  const choice = request.tool_choice ?? "auto";
  if (tools.length === 0 || choice === "none") return undefined;
  if (choice === "auto" && request.messages.at(-1)?.role !== "user") return undefined;
  const tool = typeof choice === "object" ? tools.find((t) => t.function.name === choice.function.name) : tools[0];
  if (!tool) return undefined;
  const properties = (tool.function.parameters?.properties ?? {}) as Record<string, { type?: unknown }>;
  const argument = Object.keys(properties).find((name) => properties[name]?.type === "string") ?? "text";
  return { name: tool.function.name, argument };
}

/** An OpenAI chat completion's choices for this request: `n` of them, each a text or a tool call. */
export function chatFormat(request: ChatAnswerRequest): Format {
  const n = request.n ?? 1;
  const tool = toolToCall(request);
  const indexes = Array.from({ length: n }, (_, index) => index);
  const callIds = indexes.map(() => `call_sim_${randomUUID().replaceAll("-", "").slice(0, 24)}`);
  const opening = JSON.stringify({ [tool?.argument ?? "text"]: "" }).slice(0, -2);
  let started = false;
  /** A tool call's delta: its head (id, name) with the first piece of its arguments. */
  const callDelta = (index: number, args: string, first: boolean) => ({
    tool_calls: [
      first
        ? { index: 0, id: callIds[index], type: "function", function: { name: tool!.name, arguments: args } }
        : { index: 0, function: { arguments: args } },
    ],
  });
  const piece = (text: string) => JSON.stringify(text).slice(1, -1);
  return {
    idPrefix: "chatcmpl-sim-",
    object: "chat.completion",
    chunkObject: "chat.completion.chunk",
    n,
    token: (text, first) => {
      started = true;
      return indexes.map((index) => ({
        index,
        delta: tool
          ? {
              ...(first ? { role: "assistant", content: null } : {}),
              ...callDelta(index, (first ? opening : "") + piece(text), first),
            }
          : first
            ? { role: "assistant", content: text }
            : { content: text },
        logprobs: null,
        finish_reason: null,
      }));
    },
    final: (finish) =>
      indexes.map((index) => ({
        index,
        delta: tool
          ? {
              ...(started ? {} : { role: "assistant", content: null }),
              ...callDelta(index, (started ? "" : opening) + '"}', !started),
            }
          : {},
        logprobs: null,
        finish_reason: tool ? "tool_calls" : finish,
      })),
    whole: (text, finish) =>
      indexes.map((index) => ({
        index,
        message: tool
          ? {
              role: "assistant",
              content: null,
              tool_calls: [
                {
                  id: callIds[index],
                  type: "function",
                  function: { name: tool.name, arguments: JSON.stringify({ [tool.argument]: text }) },
                },
              ],
            }
          : { role: "assistant", content: text },
        logprobs: null,
        finish_reason: tool ? "tool_calls" : finish,
      })),
  };
}
