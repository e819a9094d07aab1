/**
 * The simulator's scripted agent model: a stand-in for a real coding model that answers an agent's
 * conversation with tool calls from a script, so agent tasks run end to end with no model. A script
 * answers a conversation whose first user message contains its `match`, and the turn it plays is the
 * number of assistant messages already in the conversation: the answer is a function of the
 * conversation alone, so a conversation resumed or replayed after a crash gets the same answer.
 * Nothing here is a model's output; every answer carries the simulator's labels.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import type { Format } from "./chat-format.js";

const ScriptedCall = z.strictObject({ name: z.string().min(1), arguments: z.record(z.string(), z.unknown()) });

export const AgentScript = z.strictObject({
  name: z.string().min(1).max(128),
  /** The script answers a conversation whose first user message contains this text. */
  match: z.string().min(1),
  turns: z
    .array(
      z
        .strictObject({ content: z.string().optional(), toolCalls: z.array(ScriptedCall).optional() })
        .refine((t) => t.content !== undefined || (t.toolCalls?.length ?? 0) > 0, "a turn needs content or tool calls"),
    )
    .min(1),
});
export type AgentScript = z.infer<typeof AgentScript>;

export interface ScriptedTurn {
  script: string;
  turn: number;
  content: string | null;
  toolCalls: { id: string; name: string; arguments: string }[];
}

interface Message {
  role: string;
  content?: unknown;
}

const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
      ? content
          .map((p) => (typeof (p as { text?: unknown })?.text === "string" ? (p as { text: string }).text : ""))
          .join("")
      : "";

/** The scripted answer to this conversation, or undefined when no script matches it. */
export function scriptedTurn(scripts: readonly AgentScript[], messages: readonly Message[]): ScriptedTurn | undefined {
  const first = messages.find((m) => m.role === "user");
  if (!first) return undefined;
  const text = textOf(first.content);
  const script = scripts.find((s) => text.includes(s.match));
  if (!script) return undefined;
  const turn = messages.filter((m) => m.role === "assistant").length;
  const step = script.turns[turn];
  if (!step)
    return {
      script: script.name,
      turn,
      content: `(simulated agent: script ${script.name} has no turn ${turn})`,
      toolCalls: [],
    };
  const safe = `${script.name}_${turn}`.replace(/[^A-Za-z0-9_-]/g, "_");
  return {
    script: script.name,
    turn,
    content: step.content ?? null,
    toolCalls: (step.toolCalls ?? []).map((c, i) => ({
      id: `call_${safe}_${i}`,
      name: c.name,
      arguments: JSON.stringify(c.arguments),
    })),
  };
}

/** Every `*.json` script in a directory, in name order; a file that is not a script throws, naming it. */
export function loadAgentScripts(dir: string): AgentScript[] {
  return readdirSync(dir)
    .filter((name) => name.endsWith(".json"))
    .sort()
    .map((name) => {
      const path = join(dir, name);
      let json: unknown;
      try {
        json = JSON.parse(readFileSync(path, "utf8"));
      } catch (err) {
        throw new Error(`${path} is not JSON: ${(err as Error).message}`);
      }
      const parsed = AgentScript.safeParse(json);
      if (!parsed.success)
        throw new Error(
          `${path} is not an agent script: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
        );
      return parsed.data;
    });
}

/** Characters of a turn's content and arguments ÷ 4, rounded up: its completion tokens. */
export const scriptedTokens = (turn: ScriptedTurn) =>
  Math.max(
    1,
    Math.ceil(((turn.content ?? "").length + turn.toolCalls.reduce((s, c) => s + c.arguments.length, 0)) / 4),
  );

/**
 * The chat completion's shape for a scripted turn: whole, one message with the turn's content and
 * tool calls; streamed, the content and every call (each with its index, id and name, and its
 * arguments whole) in the first chunk, empty deltas for the rest, and the finish reason last.
 */
export function scriptedFormat(turn: ScriptedTurn): Format {
  const finish = turn.toolCalls.length > 0 ? "tool_calls" : "stop";
  const calls = turn.toolCalls.map((c) => ({
    id: c.id,
    type: "function",
    function: { name: c.name, arguments: c.arguments },
  }));
  const opening = {
    role: "assistant",
    content: turn.content,
    ...(calls.length ? { tool_calls: calls.map((c, index) => ({ index, ...c })) } : {}),
  };
  let started = false;
  return {
    idPrefix: "chatcmpl-sim-",
    object: "chat.completion",
    chunkObject: "chat.completion.chunk",
    n: 1,
    token: (_, first) => {
      started = true;
      return [{ index: 0, delta: first ? opening : {}, logprobs: null, finish_reason: null }];
    },
    // A turn streamed with no tokens at all still says everything, in its last chunk.
    final: () => [{ index: 0, delta: started ? {} : opening, logprobs: null, finish_reason: finish }],
    whole: () => [
      {
        index: 0,
        message: { role: "assistant", content: turn.content, ...(calls.length ? { tool_calls: calls } : {}) },
        logprobs: null,
        finish_reason: finish,
      },
    ],
  };
}
