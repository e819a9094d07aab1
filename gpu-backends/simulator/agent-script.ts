/**
 * The simulator's scripted agent model: a stand-in for a real coding model that answers an agent's
 * conversation with tool calls from a script, so agent tasks run end to end with no model. A script
 * answers a conversation whose first user message contains its `match`, and the turn it plays is the
 * number of assistant messages already in the conversation: the answer is a function of the
 * conversation (and the request's `seed`, which picks among a script's variants) alone, so a
 * conversation resumed or replayed after a crash gets the same answer.
 * Nothing here is a model's output; every answer carries the simulator's labels.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import type { Format } from "./chat-format.js";

const ScriptedCall = z.strictObject({ name: z.string().min(1), arguments: z.record(z.string(), z.unknown()) });

const Turns = z
  .array(
    z
      .strictObject({ content: z.string().optional(), toolCalls: z.array(ScriptedCall).optional() })
      .refine((t) => t.content !== undefined || (t.toolCalls?.length ?? 0) > 0, "a turn needs content or tool calls"),
  )
  .min(1);

export const AgentScript = z.strictObject({
  name: z.string().min(1).max(128),
  /** The script answers a conversation whose first user message contains this text. */
  match: z.string().min(1),
  turns: Turns,
  /**
   * Other ways to play the same task, for a group of rollouts that should not all do the same: a
   * chat request's `seed`, modulo the number of variants, picks one (a negative seed counts from the
   * end). Without a seed, or without variants, the conversation gets `turns`.
   */
  variants: z.array(Turns).min(1).optional(),
});
export type AgentScript = z.infer<typeof AgentScript>;

/** The body of the control API's `PUT /backends/:id/agent-scripts`: the scripts that replace the backend's. */
export const AgentScriptsBody = z.strictObject({ scripts: z.array(AgentScript) });
export type AgentScriptsBody = z.infer<typeof AgentScriptsBody>;

export interface ScriptedTurn {
  script: string;
  turn: number;
  content: string | null;
  toolCalls: { id: string; name: string; arguments: string }[];
}

/** A chat message as far as choosing a turn goes; anything else in the conversation is ignored. */
const Message = z.looseObject({ role: z.string(), content: z.unknown().optional() });

const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
      ? content
          .map((p) => (typeof (p as { text?: unknown })?.text === "string" ? (p as { text: string }).text : ""))
          .join("")
      : "";

/**
 * The scripted answer to this conversation, or undefined when no script matches it. The turn is
 * the number of assistant messages already there, so the same conversation always gets the same answer.
 *
 * @example
 * ```ts
 * scriptedTurn([script], [{ role: "user", content: "Fix it (task 7)" }]); // script.turns[0], ids call_<name>_0_<i>
 * ```
 */
export function scriptedTurn(
  scripts: readonly AgentScript[],
  messages: readonly unknown[],
  seed?: number | null,
): ScriptedTurn | undefined {
  const conversation = messages.flatMap((m) => {
    const parsed = Message.safeParse(m);
    return parsed.success ? [parsed.data] : [];
  });
  const first = conversation.find((m) => m.role === "user");
  if (!first) return undefined;
  const text = textOf(first.content);
  const script = scripts.find((s) => text.includes(s.match));
  if (!script) return undefined;
  const turn = conversation.filter((m) => m.role === "assistant").length;
  const step = turnsFor(script, seed)[turn];
  if (!step)
    return {
      script: script.name,
      turn,
      content: `(simulated agent: script ${script.name} has no turn ${turn})`,
      toolCalls: [],
    };
  return {
    script: script.name,
    turn,
    content: step.content ?? null,
    toolCalls: (step.toolCalls ?? []).map((c, i) => ({
      id: `call_${script.name}_${turn}_${i}`.replace(/[^A-Za-z0-9_-]/g, "_"),
      name: c.name,
      arguments: JSON.stringify(c.arguments),
    })),
  };
}

/** The turns a request with this seed plays: a variant chosen by the seed, else the script's own turns. */
export function turnsFor(script: AgentScript, seed?: number | null): AgentScript["turns"] {
  if (!script.variants || typeof seed !== "number" || !Number.isSafeInteger(seed)) return script.turns;
  const count = script.variants.length;
  return script.variants[((seed % count) + count) % count]!;
}

/** What the refusal of an unscripted conversation ends with when the backend was given no advice of its own. */
export const DEFAULT_UNSCRIPTED_ADVICE =
  "To run a real model, point the gateway at an OpenAI-compatible server (INFERENCE_UPSTREAM) instead of the simulator.";

/**
 * Why the scripted agent model answers no turn to a conversation offered tools that no script
 * matches: tool calls made up for it would be run as a model's, and end the task "finished" having
 * done nothing. `advice` says how to run a real model instead.
 */
export function unscriptedRefusal(advice: string | undefined): string {
  return (
    "The simulator's scripted agent model has no script for this prompt: it plays only the conversations " +
    "whose first user message contains one of its scripts' match texts (the fixture tasks of " +
    "gpu-backends/simulator/agent-scripts/, and scripts set through its control API), and makes up " +
    `no answer for any other. ${advice ?? DEFAULT_UNSCRIPTED_ADVICE}`
  );
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
  Math.ceil(((turn.content ?? "").length + turn.toolCalls.reduce((s, c) => s + c.arguments.length, 0)) / 4);

/** Characters of arguments per streamed delta: one simulated token's worth. */
const ARGUMENT_PIECE = 4;

/** A turn's stream as OpenAI sends it: the content in one delta, then each call's head, then its arguments. */
function scriptedDeltas(turn: ScriptedTurn): object[] {
  const deltas: object[] = [];
  if (turn.content !== null) deltas.push({ role: "assistant", content: turn.content });
  turn.toolCalls.forEach((call, index) => {
    const role = deltas.length === 0 ? { role: "assistant", content: null } : {};
    const head = { index, id: call.id, type: "function", function: { name: call.name, arguments: "" } };
    deltas.push({ ...role, tool_calls: [head] });
    // Code points, not UTF-16 units, so that no piece splits a surrogate pair.
    const chars = Array.from(call.arguments);
    for (let at = 0; at < chars.length; at += ARGUMENT_PIECE)
      deltas.push({ tool_calls: [{ index, function: { arguments: chars.slice(at, at + ARGUMENT_PIECE).join("") } }] });
  });
  return deltas;
}

/**
 * The chat completion's shape for a scripted turn. Whole: one message with the turn's content and
 * tool calls. Streamed: the deltas of `scriptedDeltas`, spread evenly over the turn's tokens so that
 * the backend's pace, stalls and broken streams apply to them as to any answer (a stream cut after k
 * tokens has sent about k/tokens of them), and whatever is left with the finish reason.
 */
export function scriptedFormat(turn: ScriptedTurn): Format {
  const finish = turn.toolCalls.length > 0 ? "tool_calls" : "stop";
  const deltas = scriptedDeltas(turn);
  const tokens = scriptedTokens(turn);
  const choice = (delta: object) => ({ index: 0, delta, logprobs: null, finish_reason: null });
  let sent = 0;
  let emitted = 0;
  return {
    idPrefix: "chatcmpl-sim-",
    object: "chat.completion",
    chunkObject: "chat.completion.chunk",
    n: 1,
    token: () => {
      const upTo = Math.ceil((++emitted * deltas.length) / Math.max(1, tokens));
      const due = deltas.slice(sent, upTo);
      sent = Math.max(sent, upTo);
      return due.map(choice);
    },
    final: () => [...deltas.slice(sent).map(choice), { index: 0, delta: {}, logprobs: null, finish_reason: finish }],
    whole: () => [
      {
        index: 0,
        message: {
          role: "assistant",
          content: turn.content,
          ...(turn.toolCalls.length
            ? {
                tool_calls: turn.toolCalls.map((c) => ({
                  id: c.id,
                  type: "function",
                  function: { name: c.name, arguments: c.arguments },
                })),
              }
            : {}),
        },
        logprobs: null,
        finish_reason: finish,
      },
    ],
  };
}
