import { describe, expect, it } from "vitest";
import { runConcurrently, type PlannedCall } from "../../durable-objects/agent-task/schedule.js";
import type { TaskState } from "../../durable-objects/agent-task/store.js";
import {
  budgetStop,
  chatRequest,
  checkCall,
  MIN_COMMAND_SECONDS,
  MIN_COMPLETION_TOKENS,
  modelErrorMessage,
  parseAnswer,
  promptTokens,
  turnCall,
  type ChatMessage,
} from "../../durable-objects/agent-task/turn.js";
import { TaskLimits } from "../../protocol/agents/task.js";
import { AGENT_TOOL_NAMES } from "../../protocol/agents/tools.js";

/** Runs `calls` with each one held open until the test releases it, recording which ran together. */
function harness(calls: PlannedCall[]) {
  const started: number[] = [];
  const release = new Map<number, () => void>();
  const done = runConcurrently(calls, (_, i) => {
    started.push(i);
    return new Promise<number>((resolve) => release.set(i, () => resolve(i)));
  });
  const settle = () => new Promise((r) => setTimeout(r, 0));
  return {
    started,
    done,
    async finish(i: number) {
      release.get(i)!();
      await settle();
      await settle();
    },
    settle,
  };
}

const read = (path: string): PlannedCall => ({ tool: "read_file", args: { path } });
const edit = (path: string): PlannedCall => ({ tool: "edit_file", args: { path, oldText: "a", newText: "b" } });

describe("running a turn's tool calls", () => {
  it("runs reads together", async () => {
    const h = harness([read("a"), read("b"), { tool: "grep", args: { pattern: "x" } }, { tool: "list_dir", args: {} }]);
    await h.settle();
    expect(h.started).toEqual([0, 1, 2, 3]);
    for (const i of [0, 1, 2, 3]) await h.finish(i);
    expect((await h.done).map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "fulfilled", "fulfilled"]);
  });

  it("holds a write until earlier calls on its file are done, and writes to other files do not wait", async () => {
    const h = harness([read("a"), edit("a"), edit("b"), read("a")]);
    await h.settle();
    expect(h.started).toEqual([0, 2]);
    await h.finish(0);
    expect(h.started).toEqual([0, 2, 1]);
    await h.finish(1);
    expect(h.started).toEqual([0, 2, 1, 3]);
    await h.finish(2);
    await h.finish(3);
    await h.done;
  });

  it("holds a scan of the tree until earlier writes are done", async () => {
    const h = harness([edit("a"), { tool: "grep", args: { pattern: "x" } }]);
    await h.settle();
    expect(h.started).toEqual([0]);
    await h.finish(0);
    expect(h.started).toEqual([0, 1]);
    await h.finish(1);
    await h.done;
  });

  it("runs a command alone, after everything before it and before everything after it", async () => {
    const h = harness([
      read("a"),
      { tool: "run_terminal", args: { command: "ls" } },
      read("b"),
      { tool: "finish", args: {} },
    ]);
    await h.settle();
    expect(h.started).toEqual([0]);
    await h.finish(0);
    expect(h.started).toEqual([0, 1]);
    await h.finish(1);
    expect(h.started).toEqual([0, 1, 2]);
    await h.finish(2);
    expect(h.started).toEqual([0, 1, 2, 3]);
    await h.finish(3);
    await h.done;
  });

  it("lets one call's failure leave the others running", async () => {
    const results = await runConcurrently([read("a"), read("b")], async (_, i) => {
      if (i === 0) throw new Error("boom");
      return i;
    });
    expect(results.map((r) => r.status)).toEqual(["rejected", "fulfilled"]);
  });
});

const state = (over: Partial<TaskState> = {}): TaskState => ({
  id: "task_x",
  orgId: "org_x",
  userId: "usr_x",
  keyId: "key_x",
  model: "chat-simulated",
  status: "running",
  limits: TaskLimits.parse({}),
  usage: { turns: 0, tokens: 0, toolCalls: 0, sandboxSeconds: 0, outputBytes: 0 },
  endReason: null,
  createdAt: new Date(0).toISOString(),
  startedAt: new Date(1_000_000).toISOString(),
  endedAt: null,
  retries: 0,
  ...over,
});

describe("budgets before a turn", () => {
  const now = 1_000_000 + 1000;
  it("lets a task within every budget go on", () => {
    expect(budgetStop(state(), now, 0, 1000)).toBeNull();
  });
  it("stops at each budget", () => {
    const limits = TaskLimits.parse({ turns: 2, tokens: 10_000, wallSeconds: 5, sandboxSeconds: 3, outputBytes: 2048 });
    const base = { limits };
    expect(budgetStop(state({ ...base, usage: { ...state().usage, turns: 2 } }), now, 0, 100)).toBe("turns");
    expect(budgetStop(state(base), 1_000_000 + 5000, 0, 100)).toBe("wall_time");
    expect(budgetStop(state(base), now, 3, 100)).toBe("sandbox_time");
    // Too little command time left for a command to be worth running.
    expect(budgetStop(state(base), now, 3 - MIN_COMMAND_SECONDS + 0.01, 100)).toBe("sandbox_time");
    expect(budgetStop(state(base), now, 3 - MIN_COMMAND_SECONDS - 0.01, 100)).toBeNull();
    expect(budgetStop(state({ ...base, usage: { ...state().usage, outputBytes: 2048 } }), now, 0, 100)).toBe(
      "output_bytes",
    );
    // A turn must have room for its prompt and the fewest completion tokens.
    expect(budgetStop(state(base), now, 0, 10_000 - MIN_COMPLETION_TOKENS + 1)).toBe("tokens");
    expect(budgetStop(state(base), now, 0, 10_000 - MIN_COMPLETION_TOKENS)).toBeNull();
  });
  it("reserves no more completion tokens than the budget has left", () => {
    const s = state({ limits: TaskLimits.parse({ tokens: 5000 }), usage: { ...state().usage, tokens: 1000 } });
    const request = chatRequest(s, [{ role: "user", content: "hi" }], 3000);
    expect(request.max_tokens).toBe(1000);
    expect(request.tools.map((t) => t.function.name)).toEqual(AGENT_TOOL_NAMES.filter((n) => n !== "codebase_search"));
    expect(request.messages[0]!.role).toBe("system");
  });
  it("counts a conversation's characters as JSON, measuring each message once", () => {
    const messages: ChatMessage[] = [];
    const exact = (m: ChatMessage[]) => Math.ceil(JSON.stringify(m).length / 3) + 2000;
    expect(promptTokens(messages)).toBe(exact(messages));
    for (let i = 0; i < 5; i++) {
      messages.push({ role: "user", content: `step ${i} ${"é".repeat(i)}` });
      messages.push({ role: "tool", tool_call_id: `c${i}`, content: JSON.stringify({ text: "a\n".repeat(i) }) });
      expect(promptTokens(messages)).toBe(exact(messages));
    }
  });
  it("offers codebase_search only to a task that came with an index", () => {
    const names = (s: TaskState) => chatRequest(s, [], 3000).tools.map((t) => t.function.name);
    expect(names(state())).not.toContain("codebase_search");
    expect(names(state({ workspaceId: "ws_00000000000000000000" }))).toEqual(AGENT_TOOL_NAMES);
    const search = chatRequest(state({ workspaceId: "ws_00000000000000000000" }), [], 3000).tools.find(
      (t) => t.function.name === "codebase_search",
    )!;
    // The same arguments as `sextant mcp`'s codebase_search: query, topK and path.
    expect(Object.keys((search.function.parameters as { properties: object }).properties).sort()).toEqual([
      "path",
      "query",
      "topK",
    ]);
  });
});

describe("a turn's gateway call", () => {
  const env = { taskSetId: "tset_x", taskIndex: 2, sha256: "a".repeat(64), idleSeconds: 600, lastSeenAt: 0 };
  const captureFields = ["logprobs", "return_tokens_as_token_ids", "return_token_ids"];
  it("never asks an agent task's backend for log-probabilities or token ids, nor tags it for capture", () => {
    const call = turnCall(state(), [{ role: "user", content: "hi" }], 3000, 1);
    expect(call.capture).toBeUndefined();
    for (const field of captureFields) expect(call.request).not.toHaveProperty(field);
    // A session's turns are its client's: never called through the gateway, never captured here.
    expect(turnCall(state({ kind: "env", env }), [], 3000, 1).capture).toBeUndefined();
  });
  it("asks a rollout's backend for them and tags the call with the rollout, its run, the turn and its start", () => {
    const rollout = state({ kind: "rollout", env: { ...env, parent: { runId: "run_x", member: 3 } } });
    const call = turnCall(rollout, [{ role: "user", content: "hi" }], 3000, 4);
    expect(call.capture).toEqual({ rolloutId: "task_x", runId: "run_x", turn: 4, startedAt: 1_000_000 });
    for (const field of captureFields) expect(call.request[field]).toBe(true);
    expect(call.request.messages).toEqual(chatRequest(rollout, [{ role: "user", content: "hi" }], 3000).messages);
  });
});

describe("reading the model's answer", () => {
  it("takes the message, its tool calls and the tokens, prompt and completion apart", () => {
    const parsed = parseAnswer({
      choices: [
        {
          message: {
            content: "Reading.",
            tool_calls: [
              { id: "c1", type: "function", function: { name: "read_file", arguments: '{"path":"a"}' } },
              {},
            ],
          },
        },
      ],
      usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42 },
    });
    expect(parsed).toEqual({
      content: "Reading.",
      toolCalls: [{ id: "c1", type: "function", function: { name: "read_file", arguments: '{"path":"a"}' } }],
      tokens: 42,
      promptTokens: 30,
      completionTokens: 12,
    });
    // An answer without usage counts nothing, in each of its counts.
    expect(parseAnswer({ choices: [{ message: { content: "Done." } }] })).toMatchObject({
      tokens: 0,
      promptTokens: 0,
      completionTokens: 0,
    });
    expect(parseAnswer({ error: "x" })).toBeNull();
  });

  it("gives a refused turn's reason in the error's own words, as a problem or as an OpenAI error", () => {
    expect(modelErrorMessage(400, { code: "invalid_request", detail: "The backend refused the request: no." })).toBe(
      "The model answered 400: The backend refused the request: no.",
    );
    expect(modelErrorMessage(400, { error: { message: "No script.", type: "invalid_request_error" } })).toBe(
      "The model answered 400: No script.",
    );
    expect(modelErrorMessage(404, null)).toBe("The model answered 404: no message");
    expect(modelErrorMessage(422, { error: "flat" })).toBe("The model answered 422: no message");
  });

  it("checks each call against its tool's schema, with an error the model can act on", () => {
    expect(checkCall("read_file", '{"path":"src/a.js"}')).toEqual({ ok: true, args: { path: "src/a.js" } });
    expect(checkCall("rm_rf", "{}")).toMatchObject({ ok: false, code: "unknown_tool" });
    expect(checkCall("read_file", "{not json")).toMatchObject({ ok: false, code: "invalid_arguments" });
    for (const path of ["../x", "/etc/passwd", "a/../../b", "a\\b", ""])
      expect(checkCall("read_file", JSON.stringify({ path })), path).toMatchObject({
        ok: false,
        code: "invalid_arguments",
      });
    expect(checkCall("run_terminal", '{"command":"ls"}')).toEqual({
      ok: true,
      args: { command: "ls", timeoutMs: 60_000 },
    });
  });
});
