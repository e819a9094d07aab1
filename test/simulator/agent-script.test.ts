import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI, { APIError } from "openai";
import type { ChatCompletionChunk, ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DEFAULT_UNSCRIPTED_ADVICE,
  AgentScript,
  loadAgentScripts,
  scriptedTurn,
} from "../../gpu-backends/simulator/agent-script.js";
import { startSimulator, type Simulator } from "../../gpu-backends/simulator/simulator.js";

const SCRIPT: AgentScript = {
  name: "fix it",
  match: "(script: fix-it)",
  turns: [
    {
      content: "Reading.",
      toolCalls: [
        { name: "read_file", arguments: { path: "a.js" } },
        { name: "grep", arguments: { pattern: "TODO" } },
      ],
    },
    { toolCalls: [{ name: "finish", arguments: { summary: "done" } }] },
  ],
};
const TOOLS = ["read_file", "grep", "finish"].map((name) => ({
  type: "function" as const,
  function: { name, parameters: { type: "object", properties: { path: { type: "string" } } } },
}));
/** The first turn's completion tokens: characters of its content and arguments ÷ 4, rounded up. */
const FIRST_TURN_TOKENS = Math.ceil(("Reading.".length + '{"path":"a.js"}'.length + '{"pattern":"TODO"}'.length) / 4);

let sim: Simulator;
let client: OpenAI;
let faulty: OpenAI;
beforeAll(async () => {
  sim = await startSimulator({
    backends: [
      { id: "a", kind: "openai", models: ["m"], agentScripts: [SCRIPT], ttftMs: 1, tokensPerSecond: 2000 },
      { id: "faulty", models: ["m"], agentScripts: [SCRIPT], ttftMs: 1, tokensPerSecond: 2000 },
      {
        id: "claude",
        kind: "anthropic",
        models: ["c"],
        apiKey: null,
        agentScripts: [SCRIPT],
        ttftMs: 1,
        tokensPerSecond: 2000,
      },
    ],
    control: true,
  });
  client = new OpenAI({ baseURL: sim.backend("a").url, apiKey: "unused", maxRetries: 0 });
  faulty = new OpenAI({ baseURL: sim.backend("faulty").url, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => sim?.stop());

const user = (content: string) => ({ role: "user" as const, content });
const FIRST: ChatCompletionMessageParam[] = [
  { role: "system", content: "be an agent" },
  user("Please fix it (script: fix-it)"),
];
const AFTER_FIRST_TURN: ChatCompletionMessageParam[] = [
  user("Please fix it (script: fix-it)"),
  {
    role: "assistant",
    content: "Reading.",
    tool_calls: [{ id: "x", type: "function", function: { name: "read_file", arguments: "{}" } }],
  },
  { role: "tool", tool_call_id: "x", content: "{}" },
];
const PAST_THE_END: ChatCompletionMessageParam[] = [
  ...AFTER_FIRST_TURN,
  { role: "assistant", content: "x" },
  user("and now?"),
];

const calls = (message: OpenAI.Chat.ChatCompletionMessage) =>
  (message.tool_calls ?? []).map((c) => (c.type === "function" ? [c.id, c.function.name, c.function.arguments] : []));

describe("the scripted agent model", () => {
  it("answers a matching conversation's first turn with the script's calls, whole, with the simulator's labels", async () => {
    const { data: answer, response } = await client.chat.completions
      .create({ model: "m", messages: FIRST, tools: TOOLS })
      .withResponse();
    expect(response.headers.get("x-simulator")).toBe("sextant");
    expect(answer.system_fingerprint).toBe("sextant-simulator");
    expect(answer.model).toBe("m");
    expect(answer.choices[0]!.finish_reason).toBe("tool_calls");
    expect(answer.choices[0]!.message.content).toBe("Reading.");
    expect(calls(answer.choices[0]!.message)).toEqual([
      ["call_fix_it_0_0", "read_file", '{"path":"a.js"}'],
      ["call_fix_it_0_1", "grep", '{"pattern":"TODO"}'],
    ]);
    expect(answer.usage).toMatchObject({ completion_tokens: FIRST_TURN_TOKENS });
    expect(answer.usage!.prompt_tokens).toBe(
      Math.ceil(("be an agent".length + "Please fix it (script: fix-it)".length) / 4),
    );
  });

  it("streams the same turn as OpenAI does, which the SDK's stream helper assembles into the same message", async () => {
    const whole = await client.chat.completions.create({ model: "m", messages: FIRST, tools: TOOLS });
    const stream = client.chat.completions.stream({
      model: "m",
      messages: FIRST,
      tools: TOOLS,
      stream_options: { include_usage: true },
    });
    const answer = await stream.finalChatCompletion();
    expect(answer.system_fingerprint).toBe("sextant-simulator");
    expect(answer.choices[0]!.finish_reason).toBe("tool_calls");
    expect(answer.choices[0]!.message.content).toBe("Reading.");
    expect(calls(answer.choices[0]!.message)).toEqual(calls(whole.choices[0]!.message));
    expect(answer.usage).toEqual(whole.usage);
  });

  it("streams the content in one delta, then each call's head with empty arguments, then its arguments", async () => {
    const stream = await client.chat.completions.create({
      model: "m",
      messages: FIRST,
      tools: TOOLS,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    const deltas = chunks.flatMap((c) => c.choices.map((choice) => choice.delta));
    expect(deltas[0]).toEqual({ role: "assistant", content: "Reading." });
    const heads = deltas.flatMap((d) => (d.tool_calls ?? []).filter((t) => t.id !== undefined));
    expect(heads).toEqual([
      { index: 0, id: "call_fix_it_0_0", type: "function", function: { name: "read_file", arguments: "" } },
      { index: 1, id: "call_fix_it_0_1", type: "function", function: { name: "grep", arguments: "" } },
    ]);
    const argumentsOf = (index: number) =>
      deltas
        .flatMap((d) => d.tool_calls ?? [])
        .filter((t) => t.index === index)
        .map((t) => t.function?.arguments ?? "");
    expect(argumentsOf(0).length).toBeGreaterThan(2);
    expect(argumentsOf(0).join("")).toBe('{"path":"a.js"}');
    expect(argumentsOf(1).join("")).toBe('{"pattern":"TODO"}');
    expect(chunks.at(-2)!.choices[0]).toMatchObject({ delta: {}, finish_reason: "tool_calls" });
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { completion_tokens: FIRST_TURN_TOKENS } });
  });

  it("plays the turn numbered by the assistant messages already in the conversation", async () => {
    const answer = await client.chat.completions.create({ model: "m", messages: AFTER_FIRST_TURN, tools: TOOLS });
    expect(answer.choices[0]!.finish_reason).toBe("tool_calls");
    expect(answer.choices[0]!.message.content).toBeNull();
    expect(calls(answer.choices[0]!.message)).toEqual([["call_fix_it_1_0", "finish", '{"summary":"done"}']]);
  });

  it("gives the same conversation the same answer every time", async () => {
    const ask = () => client.chat.completions.create({ model: "m", messages: AFTER_FIRST_TURN, tools: TOOLS });
    const [a, b] = await Promise.all([ask(), ask()]);
    const c = await ask();
    expect(b.choices).toEqual(a.choices);
    expect(c.choices).toEqual(a.choices);
    expect(c.usage).toEqual(a.usage);
  });

  it("matches the first user message's text parts too", () => {
    const turn = scriptedTurn(
      [SCRIPT],
      [
        {
          role: "user",
          content: [
            { type: "text", text: "Please (script: " },
            { type: "text", text: "fix-it)" },
          ],
        },
        { role: "user", content: "(script: other)" },
      ],
    );
    expect(turn).toMatchObject({ script: "fix it", turn: 0, content: "Reading." });
    expect(scriptedTurn([SCRIPT], [{ role: "user", content: "nothing" }, user("(script: fix-it)")])).toBeUndefined();
    expect(scriptedTurn([SCRIPT], [null, 7, { role: "system", content: "(script: fix-it)" }])).toBeUndefined();
  });

  it("says in text, with no tool calls, when the script has no more turns", async () => {
    const answer = await client.chat.completions.create({ model: "m", messages: PAST_THE_END, tools: TOOLS });
    expect(answer.choices[0]!.finish_reason).toBe("stop");
    expect(answer.choices[0]!.message.content).toBe("(simulated agent: script fix it has no turn 2)");
    expect(answer.choices[0]!.message.tool_calls ?? []).toEqual([]);
    const streamed = await client.chat.completions
      .stream({ model: "m", messages: PAST_THE_END, tools: TOOLS })
      .finalChatCompletion();
    expect(streamed.choices[0]!.message.content).toBe("(simulated agent: script fix it has no turn 2)");
  });

  it("answers plain chat (no tools) that no script matches as the ordinary simulator", async () => {
    const other = await client.chat.completions.create({ model: "m", messages: [user("something else")] });
    expect(other.choices[0]!.message.content).toMatch(/^sim0 sim1 /);
  });

  it("refuses an agent conversation (tools offered) that no script matches with 400, saying why and how to run a real model", async () => {
    const unscripted: ChatCompletionMessageParam[] = [
      { role: "system", content: "be an agent" },
      user("write a haiku"),
    ];
    const refused = (request: Promise<unknown>) =>
      request.then(
        () => expect.fail("answered an unscripted conversation"),
        (err: unknown) => err as APIError,
      );
    const whole = await refused(client.chat.completions.create({ model: "m", messages: unscripted, tools: TOOLS }));
    expect(whole).toBeInstanceOf(APIError);
    expect(whole.status).toBe(400);
    expect(whole.message).toContain("The simulator's scripted agent model has no script for this prompt");
    expect(whole.message).toContain("gpu-backends/simulator/agent-scripts/");
    expect(whole.message).toContain(DEFAULT_UNSCRIPTED_ADVICE);
    // Streamed, the refusal comes before any event, as a server's refusal of a bad request does.
    const streamed = await refused(
      client.chat.completions.create({ model: "m", messages: unscripted, tools: TOOLS, stream: true }),
    );
    expect([streamed.status, streamed.message]).toEqual([400, whole.message]);
    // The backend's own advice, as `npm start` gives it, ends the refusal.
    await sim.backend("a").configure({ unscriptedAdvice: "Run INFERENCE_UPSTREAM=http://x/v1 npm start." });
    try {
      const advised = await refused(client.chat.completions.create({ model: "m", messages: unscripted, tools: TOOLS }));
      expect(advised.message).toMatch(
        /makes up no answer for any other\. Run INFERENCE_UPSTREAM=http:\/\/x\/v1 npm start\.$/,
      );
    } finally {
      await sim.backend("a").configure({ unscriptedAdvice: DEFAULT_UNSCRIPTED_ADVICE });
    }
    // An unknown model is still the model's 404, not the refusal.
    expect(
      await refused(client.chat.completions.create({ model: "x", messages: unscripted, tools: TOOLS })),
    ).toMatchObject({
      status: 404,
    });
    // Without scripts a backend is no agent model: offered tools, it calls one as its fixed rule says.
    await sim.backend("a").configure({ agentScripts: [] });
    try {
      const generic = await client.chat.completions.create({ model: "m", messages: unscripted, tools: TOOLS });
      expect(generic.choices[0]!.message.tool_calls![0]!.id).toMatch(/^call_sim_/);
    } finally {
      await sim.backend("a").configure({ agentScripts: [SCRIPT] });
    }
  });

  it("refuses, as Anthropic's Messages API, an agent conversation (tools offered) that no script matches with 400 in Anthropic's envelope", async () => {
    const claude = new Anthropic({
      baseURL: sim.backend("claude").url.replace(/\/v1$/, ""),
      apiKey: "unused",
      maxRetries: 0,
    });
    const tools = TOOLS.map(({ function: f }) => ({ name: f.name, input_schema: { type: "object" as const } }));
    const ask = (prompt: string) => ({
      model: "c",
      max_tokens: 8,
      system: "be an agent",
      messages: [{ role: "user" as const, content: [{ type: "text" as const, text: prompt }] }],
    });
    const refused = (request: Promise<unknown>) =>
      request.then(
        () => expect.fail("answered an unscripted conversation"),
        (err: unknown) => err as InstanceType<typeof Anthropic.APIError>,
      );
    const whole = await refused(claude.messages.create({ ...ask("write a haiku"), tools }));
    expect(whole).toBeInstanceOf(Anthropic.BadRequestError);
    expect(whole.error).toEqual({
      type: "error",
      error: {
        type: "invalid_request_error",
        message: expect.stringContaining("The simulator's scripted agent model has no script for this prompt"),
      },
    });
    const message = (whole.error as { error: { message: string } }).error.message;
    expect(message).toContain("gpu-backends/simulator/agent-scripts/");
    expect(message.endsWith(DEFAULT_UNSCRIPTED_ADVICE)).toBe(true);
    // Streamed, the refusal comes before any event.
    const streamed = await refused(claude.messages.create({ ...ask("write a haiku"), tools, stream: true }));
    expect([streamed.status, streamed.error]).toEqual([400, whole.error]);
    // A matching conversation, plain chat, and tool_choice none are answered as before.
    const scripted = await claude.messages.create({ ...ask("Please fix it (script: fix-it)"), tools });
    expect(scripted.stop_reason).toBe("max_tokens");
    const plain = await claude.messages.create(ask("write a haiku"));
    expect(plain.content).toEqual([{ type: "text", text: "sim0 sim1 sim2 sim3 sim4 sim5 sim6 sim7 " }]);
    const none = await claude.messages.create({ ...ask("write a haiku"), tools, tool_choice: { type: "none" } });
    expect(none.content).toEqual(plain.content);
    // Without scripts a backend is no agent model, and answers as Anthropic's stand-in always has.
    await sim.backend("claude").configure({ agentScripts: [] });
    try {
      const generic = await claude.messages.create({ ...ask("write a haiku"), tools });
      expect(generic.content).toEqual(plain.content);
    } finally {
      await sim.backend("claude").configure({ agentScripts: [SCRIPT] });
    }
  });

  it("calls no tool with tool_choice none", async () => {
    const none = await client.chat.completions.create({
      model: "m",
      messages: FIRST,
      tools: TOOLS,
      tool_choice: "none",
    });
    expect(none.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(none.choices[0]!.message.content).toMatch(/^sim0 /);
  });

  it("goes through the backend's faults like any answer", async () => {
    await sim.backend("faulty").configure({ fault: { type: "errorEvent", afterTokens: 2 } });
    try {
      const stream = faulty.chat.completions.stream({ model: "m", messages: FIRST, tools: TOOLS });
      await expect(stream.finalChatCompletion()).rejects.toThrow(/Internal error \(simulated\)/);
      await sim.backend("faulty").configure({ fault: { type: "status", status: 502 } });
      const whole = faulty.chat.completions.create({ model: "m", messages: FIRST, tools: TOOLS });
      await expect(whole).rejects.toBeInstanceOf(APIError);
      await expect(whole).rejects.toMatchObject({ status: 502 });
    } finally {
      await sim.backend("faulty").configure({ fault: { type: "none" } });
    }
  });

  it("loads a directory's *.json scripts, and names a file that is not one", () => {
    const dir = mkdtempSync(join(tmpdir(), "agent-scripts-"));
    writeFileSync(join(dir, "a.json"), JSON.stringify(SCRIPT));
    writeFileSync(join(dir, "notes.txt"), "not a script");
    expect(loadAgentScripts(dir)).toEqual([SCRIPT]);
    writeFileSync(join(dir, "b.json"), JSON.stringify({ name: "x", match: "y", turns: [{}] }));
    expect(() => loadAgentScripts(dir)).toThrow(/b\.json is not an agent script: turns\.0: a turn needs content/);
    writeFileSync(join(dir, "b.json"), "{");
    expect(() => loadAgentScripts(dir)).toThrow(/b\.json is not JSON/);
  });

  it("takes new scripts at run time through configure", async () => {
    await sim.backend("a").configure({ agentScripts: [{ ...SCRIPT, match: "(script: other)" }] });
    try {
      const answer = await client.chat.completions.create({
        model: "m",
        messages: [user("Please (script: other)")],
        tools: TOOLS,
      });
      expect(answer.choices[0]!.message.tool_calls![0]!.id).toBe("call_fix_it_0_0");
    } finally {
      await sim.backend("a").configure({ agentScripts: [SCRIPT] });
    }
  });

  it("replaces the scripts through PUT /backends/:id/agent-scripts, and refuses a bad one", async () => {
    const put = (id: string, body: string) =>
      fetch(`${sim.control}/backends/${id}/agent-scripts`, {
        method: "PUT",
        body,
        headers: { Authorization: `Bearer ${sim.controlToken}` },
      });
    const replacement: AgentScript = { name: "other", match: "(script: other)", turns: [{ content: "Hello." }] };
    try {
      const res = await put("a", JSON.stringify({ scripts: [replacement] }));
      expect(res.status).toBe(200);
      expect(((await res.json()) as { options: { agentScripts: unknown } }).options.agentScripts).toEqual([
        replacement,
      ]);
      const matched = await client.chat.completions.create({ model: "m", messages: [user("(script: other)")] });
      expect(matched.choices[0]!.message.content).toBe("Hello.");
      // The replaced script no longer plays: the conversation it matched is refused.
      const replaced = client.chat.completions.create({ model: "m", messages: FIRST, tools: TOOLS });
      await expect(replaced).rejects.toMatchObject({ status: 400, message: expect.stringMatching(/has no script/) });

      const bad = await put("a", JSON.stringify({ scripts: [{ name: "x", match: "y", turns: [] }] }));
      expect(bad.status).toBe(400);
      expect(await bad.json()).toMatchObject({ error: { message: expect.stringMatching(/^scripts\.0\.turns/) } });
      expect((await put("a", "{")).status).toBe(400);
      expect((await put("nobody", JSON.stringify({ scripts: [] }))).status).toBe(404);
      expect(sim.backend("a").options().agentScripts).toEqual([replacement]);
    } finally {
      await put("a", JSON.stringify({ scripts: [SCRIPT] }));
    }
  });

  it("ships scripts that all load", () => {
    expect(
      loadAgentScripts(join(import.meta.dirname, "../../gpu-backends/simulator/agent-scripts")).length,
    ).toBeGreaterThanOrEqual(11);
  });
});

describe("a script's variants", () => {
  const step = (content: string) => [{ content, toolCalls: [{ name: "finish", arguments: { summary: content } }] }];
  const VARIED: AgentScript = {
    name: "varied",
    match: "(script: varied)",
    turns: step("default"),
    variants: [step("v0"), step("v1"), step("v2")],
  };
  const ask = (seed?: number | null) => scriptedTurn([VARIED], [user("(script: varied)")], seed)?.content;

  it("plays the variant the seed picks, modulo their count", () => {
    expect([0, 1, 2, 3, 4, 5, 301].map(ask)).toEqual(["v0", "v1", "v2", "v0", "v1", "v2", "v1"]);
    expect([-1, -2, -3].map(ask)).toEqual(["v2", "v1", "v0"]);
  });

  it("plays `turns` without a seed, and for a script with no variants whatever the seed", () => {
    expect(ask()).toBe("default");
    expect(ask(null)).toBe("default");
    expect(ask(1.5)).toBe("default");
    expect(scriptedTurn([SCRIPT], [user("(script: fix-it)")], 2)?.content).toBe("Reading.");
  });

  it("numbers the turn within the variant: the next turn after one answer", () => {
    const twoTurns: AgentScript = {
      ...VARIED,
      variants: [
        [{ content: "a0" }, { content: "a1" }],
        [{ content: "b0" }, { content: "b1" }],
      ],
    };
    const after = [user("(script: varied)"), { role: "assistant", content: "b0" }];
    expect(scriptedTurn([twoTurns], after, 1)?.content).toBe("b1");
    expect(scriptedTurn([twoTurns], after, 4)?.content).toBe("a1");
  });

  it("refuses an empty variant list or an empty variant", () => {
    expect(AgentScript.safeParse({ ...VARIED, variants: [] }).success).toBe(false);
    expect(AgentScript.safeParse({ ...VARIED, variants: [[]] }).success).toBe(false);
    expect(AgentScript.safeParse(VARIED).success).toBe(true);
  });

  it("takes the seed from the chat request", async () => {
    const variedSim = await startSimulator({
      backends: [{ id: "v", models: ["m"], agentScripts: [VARIED], ttftMs: 1, tokensPerSecond: 2000 }],
    });
    try {
      const openai = new OpenAI({ baseURL: variedSim.backend("v").url, apiKey: "unused", maxRetries: 0 });
      const chat = (seed?: number) =>
        openai.chat.completions
          .create({
            model: "m",
            messages: [user("(script: varied)")],
            tools: TOOLS,
            ...(seed === undefined ? {} : { seed }),
          })
          .then((a) => a.choices[0]!.message.content);
      expect(await Promise.all([chat(), chat(0), chat(1), chat(2), chat(5)])).toEqual([
        "default",
        "v0",
        "v1",
        "v2",
        "v2",
      ]);
    } finally {
      await variedSim.stop();
    }
  });
});
