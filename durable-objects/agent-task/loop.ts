/**
 * A task's loop, one turn per alarm: the model's answer and its calls are recorded before any call
 * runs; then the calls run (as concurrently as they allow, `schedule.ts`), each under an id the
 * sandbox host runs only once, and each result is recorded as it arrives. A turn cut short by an
 * eviction or a crash is run again from what was recorded: the model is asked again only if its
 * answer was not recorded, and the calls still pending are re-sent, never re-run.
 */
import type { AgentCaller, AgentModelGateway } from "../../protocol/agents/gateway.js";
import type { EndReason, EventType } from "../../protocol/agents/task.js";
import { NOT_INDEXED } from "../../protocol/agents/tools.js";
import { withDeadline } from "../../protocol/sleep.js";
import { keepCall } from "./capture.js";
import type { SandboxClient } from "./sandbox-client.js";
import { runConcurrently } from "./schedule.js";
import { seal, unseal } from "./seal.js";
import type { TaskState, TaskStore } from "./store.js";
import {
  budgetStop,
  checkCall,
  modelErrorMessage,
  parseAnswer,
  promptTokens,
  turnCall,
  type ChatMessage,
  type ParsedAnswer,
} from "./turn.js";
import { SandboxUnavailable } from "./sandbox-client.js";

/** What the loop needs of its task object. */
export interface LoopHost {
  store: TaskStore;
  storage: DurableObjectStorage;
  gateway: AgentModelGateway;
  sandbox(id: string): SandboxClient;
  dataKey(state: TaskState): Promise<CryptoKey | undefined>;
  event(type: EventType, data: Record<string, unknown>): Promise<void>;
  end(state: TaskState, reason: EndReason, data: Record<string, unknown>): Promise<void>;
  notify(): void;
  mustState(): TaskState;
  /** The conversation so far, unsealed (what this instance already unsealed is kept in memory). */
  conversation(key: CryptoKey): Promise<ChatMessage[]>;
}

export async function runTurn(host: LoopHost, initial: TaskState): Promise<void> {
  const key = await host.dataKey(initial);
  if (!key) throw new SandboxUnavailable("The task's sandbox is gone.", 404);
  let state = host.mustState();
  if (state.status !== "running") return;
  if (host.store.pendingCalls().length === 0) {
    const finished = await ask(host, state, key);
    state = host.mustState();
    if (finished || state.status !== "running") return;
  }
  const { finishSummary } = await runRecordedCalls(host, key);
  state = host.mustState();
  if (state.status !== "running") return;
  if (finishSummary !== undefined) {
    await host.end(state, "finished", { summary: finishSummary });
    return;
  }
  await host.storage.setAlarm(Date.now());
}

/**
 * Runs the recorded calls still pending (as concurrently as they allow, `schedule.ts`), each under
 * its call id, recording each result as it arrives: the part of a turn after its answer, shared by
 * the production loop (the answer came from the model) and an environment session's step (it came
 * from the step request). `finishSummary` is set when a call was `finish`.
 */
export async function runRecordedCalls(host: LoopHost, key: CryptoKey): Promise<{ finishSummary?: string }> {
  const state = host.mustState();
  const pending = host.store.pendingCalls();
  if (pending.length === 0) return {};
  const calls = await Promise.all(
    pending.map(async (c) => ({
      row: c,
      ...(await unseal<{ callId: string; name: string; args: string }>(key, c.sealed)),
    })),
  );
  const deadline = Date.parse(state.startedAt!) + state.limits.wallSeconds * 1000;
  // Command time this turn: commands run one at a time, each given no more than the budget has left.
  let commandSeconds = state.usage.sandboxSeconds;
  let finishSummary: string | undefined;
  await runConcurrently(
    calls.map((c) => ({ tool: c.name, args: safeJson(c.args) })),
    async (_, i) => {
      const call = calls[i]!;
      const checked = checkCall(call.name, call.args);
      let outcome: Outcome;
      if (!checked.ok) outcome = { ok: false, error: { code: checked.code, message: checked.message } };
      else if (call.name === "finish") {
        finishSummary = (checked.args as { summary: string }).summary;
        outcome = { ok: true, result: { finished: true } };
      } else if (call.name === "run_terminal" || call.name === "read_lints") {
        const args = checked.args as { timeoutMs?: number };
        const timeoutMs = Math.min(
          args.timeoutMs ?? 60_000,
          deadline - Date.now(),
          (state.limits.sandboxSeconds - commandSeconds) * 1000 - COMMAND_KILL_MARGIN_MS,
        );
        if (timeoutMs < 100)
          outcome = {
            ok: false,
            error: { code: "budget_spent", message: "The task's wall time or sandbox time budget is spent." },
          };
        else {
          outcome = await host.sandbox(state.id).call(call.row.id, call.name, { ...args, timeoutMs });
          // Charged as the sandbox charges it: at most the time the command was given.
          commandSeconds += Math.min(outcome.durationMs ?? timeoutMs, timeoutMs) / 1000;
        }
      } else if (call.name === "codebase_search")
        outcome = await codebaseSearch(host, state, call.row.id, checked.args);
      else outcome = await host.sandbox(state.id).call(call.row.id, call.name, checked.args);
      await recordResult(host, key, call.row.id, call.callId, call.name, outcome);
    },
  );
  const after = host.mustState();
  if (commandSeconds > after.usage.sandboxSeconds) {
    after.usage.sandboxSeconds = Math.round(commandSeconds * 1000) / 1000;
    host.store.saveState(after);
  }
  return finishSummary === undefined ? {} : { finishSummary };
}

/**
 * codebase_search in three steps: the sandbox (which holds the workspace secret) makes the edge's
 * search request, the edge's search route answers it as the task's principal, and the sandbox reads
 * the hits' lines from the tree. Only the last step is a recorded call; the first two only read.
 */
async function codebaseSearch(host: LoopHost, state: TaskState, callId: string, args: unknown): Promise<Outcome> {
  const sandbox = host.sandbox(state.id);
  if (state.workspaceId === undefined) return { ok: false, error: NOT_INDEXED };
  let prepared;
  try {
    prepared = await sandbox.prepareSearch(args);
  } catch (err) {
    if (err instanceof SandboxUnavailable && err.status === 400)
      return { ok: false, error: { code: "invalid_arguments", message: err.message } };
    throw err;
  }
  const answer = await host.gateway.search(
    { taskId: state.id, orgId: state.orgId, keyId: state.keyId },
    prepared.workspaceId,
    prepared.request,
    prepared.vectorKey,
  );
  if (answer.status === 429 || answer.status >= 500) throw new RetryLater(answer.retryAfter ?? 2);
  if (answer.status !== 200) {
    const detail = (answer.body as { detail?: string } | null)?.detail;
    return {
      ok: false,
      error: { code: "search_failed", message: `The index answered ${answer.status}: ${detail ?? "no message"}` },
    };
  }
  return sandbox.call(callId, "codebase_search", { ...(args as object), answer: answer.body });
}

/** What a call came back with, as the task records it. */
type Outcome = { ok: boolean; result?: unknown; error?: unknown; replayed?: boolean; durationMs?: number };

/**
 * A command is given the sandbox budget's remainder less this, and is charged at most what it was
 * given, however long its kill takes; so the budget is never passed, counts rounded to the
 * millisecond included.
 */
const COMMAND_KILL_MARGIN_MS = 250;

/**
 * Records a call's result: what the model will be sent, cut to what the output budget has left
 * (the budget is never passed; the next turn's check then ends the task).
 */
async function recordResult(
  host: LoopHost,
  key: CryptoKey,
  id: string,
  modelCallId: string,
  name: string,
  outcome: Outcome,
): Promise<void> {
  const before = host.mustState();
  const left = Math.max(0, before.limits.outputBytes - before.usage.outputBytes);
  let content = JSON.stringify(outcome.ok ? outcome.result : { error: outcome.error });
  if (utf8Bytes(content) > left)
    content = JSON.stringify({
      error: { code: "output_budget", message: "This result is larger than what is left of the task's output budget." },
    }).slice(0, left);
  const message = await seal(key, { role: "tool", tool_call_id: modelCallId, content } satisfies ChatMessage);
  const event = await seal(key, { callId: id, tool: name, ...outcome });
  host.storage.transactionSync(() => {
    const state = host.mustState();
    // A session answers a step it already ran from these, so it keeps each call's message.
    if (state.kind === "env") host.store.saveResult(id, message);
    if (state.status !== "running") {
      // The task ended (cancelled, or out of wall time) while the call ran: nothing follows its end.
      host.store.completeCall(id);
      return;
    }
    state.usage.toolCalls++;
    state.usage.outputBytes += utf8Bytes(content);
    host.store.saveState(state);
    host.store.appendMessage(message);
    host.store.appendEvent("tool.result", new Date().toISOString(), event);
    host.store.completeCall(id);
  });
  host.notify();
}

/** Asks the model for the next turn and records its answer and calls; true if the task ended. */
async function ask(host: LoopHost, initial: TaskState, key: CryptoKey): Promise<boolean> {
  const followUps = host.store.takeFollowUps();
  for (const sealed of followUps) host.store.appendMessage(new Uint8Array(sealed));
  const messages = await host.conversation(key);
  const prompt = promptTokens(messages);
  const info = await host.sandbox(initial.id).info();
  // A cancel may have ended the task while the sandbox answered: the state is read again after
  // every wait, since saving the copy from before it would undo the cancel.
  const state = host.mustState();
  if (state.status !== "running") return true;
  state.usage.sandboxSeconds = info.commandSeconds;
  const stop = budgetStop(state, Date.now(), info.commandSeconds, prompt);
  if (stop) {
    await host.end(state, stop, { message: `The task's ${stop.replace("_", " ")} budget is spent.` });
    return true;
  }
  const turn = state.usage.turns + 1;
  const startedAt = new Date().toISOString();
  host.store.saveState(state);
  const deadline = Date.parse(state.startedAt!) + state.limits.wallSeconds * 1000;
  const { request, capture } = turnCall(state, messages, prompt, turn);
  const caller: AgentCaller = {
    taskId: state.id,
    orgId: state.orgId,
    keyId: state.keyId,
    ...(capture ? { capture } : {}),
  };
  const asked = Date.now();
  const answer = await withDeadline(host.gateway.chat(caller, request), deadline);
  const current = host.mustState();
  if (current.status !== "running") return true;
  if (answer === "deadline") {
    await host.end(current, "wall_time", { message: "The task's wall time budget is spent." });
    return true;
  }
  if (answer.status === 429 || answer.status === 503 || answer.status >= 500)
    throw new RetryLater(answer.retryAfter ?? 2);
  const parsed = answer.status === 200 ? parseAnswer(answer.body) : null;
  if (!parsed) {
    await host.end(current, "model_error", { message: modelErrorMessage(answer.status, answer.body) });
    return true;
  }
  if (caller.capture) await keepCall(host, key, turn, request, answer.body, asked, assistantMessage(parsed));
  await recordTurn(host, current, key, turn, startedAt, parsed);
  if (parsed.toolCalls.length === 0) {
    // An answer without calls ends the task: the agent has nothing more to do until asked.
    await host.end(current, "finished", { summary: parsed.content ?? "" });
    return true;
  }
  return false;
}

/**
 * Records turn `turn`: its start, the assistant's answer and its calls, in one transaction, so a
 * turn cut short before it is recorded leaves no trace (and is asked again), and one recorded has
 * every call it asked for pending, each under the id the sandbox host runs only once.
 */
export async function recordTurn(
  host: LoopHost,
  current: TaskState,
  key: CryptoKey,
  turn: number,
  startedAt: string,
  parsed: ParsedAnswer,
): Promise<void> {
  const assistant = assistantMessage(parsed);
  const sealedMessage = await seal(key, assistant);
  const sealedEvent = await seal(key, {
    turn,
    content: parsed.content,
    toolCalls: parsed.toolCalls.length,
    tokens: parsed.tokens,
  });
  const calls = await Promise.all(
    parsed.toolCalls.map(async (c, idx) => {
      const id = `${current.id}.${turn}.${idx}`;
      const args = safeJson(c.function.arguments);
      return {
        id,
        idx,
        tool: c.function.name,
        sealedCall: await seal(key, { callId: c.id, name: c.function.name, args: c.function.arguments }),
        sealedEvent: await seal(key, { callId: id, tool: c.function.name, args }),
      };
    }),
  );
  const sealedStart = await seal(key, { turn });
  const at = new Date().toISOString();
  host.storage.transactionSync(() => {
    current.usage.turns = turn;
    current.usage.tokens += parsed.tokens;
    // A task begun before the split was counted keeps it unknown rather than counting only later turns.
    if (current.usage.promptTokens !== undefined) current.usage.promptTokens += parsed.promptTokens;
    if (current.usage.completionTokens !== undefined) current.usage.completionTokens += parsed.completionTokens;
    host.store.saveState(current);
    host.store.appendEvent("turn.started", startedAt, sealedStart);
    host.store.appendMessage(sealedMessage);
    host.store.appendEvent("assistant.message", at, sealedEvent);
    for (const c of calls) {
      host.store.addCall({ id: c.id, turn, idx: c.idx, tool: c.tool, sealed: c.sealedCall });
      host.store.appendEvent("tool.call", at, c.sealedEvent);
    }
  });
  host.notify();
}

/** The assistant's message of an answer, as the conversation records it. */
export const assistantMessage = (parsed: ParsedAnswer): ChatMessage & { role: "assistant" } => ({
  role: "assistant",
  content: parsed.content,
  ...(parsed.toolCalls.length ? { tool_calls: parsed.toolCalls } : {}),
});

export class RetryLater extends Error {
  constructor(readonly seconds: number) {
    super(`The gateway asked to retry in ${seconds} s.`);
  }
}

const utf8Bytes = (text: string) => new TextEncoder().encode(text).byteLength;

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
