import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { LONDON, VIRGINIA, sleep, startGateway, until, type GatewayFixture } from "../support/gateway.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

const ANTHROPIC_SECRET = "sk-ant-pool-secret";
const OPENAI_SECRET = "sk-openai-pool-secret";

/**
 * A chat pool on Anthropic's Messages API (the simulator's stand-in for it) behind the real local
 * edge, driven by the unchanged `openai` SDK, and a pool that falls back from it to an
 * OpenAI-compatible endpoint.
 */
describe("Anthropic endpoints behind the OpenAI-compatible edge", () => {
  let gw: GatewayFixture;

  beforeAll(async () => {
    gw = await startGateway(
      [
        { id: "claude", kind: "anthropic", models: ["sim-claude"], apiKey: ANTHROPIC_SECRET, tokensPerSecond: 200 },
        { id: "gpt", kind: "openai", models: ["sim-gpt"], apiKey: OPENAI_SECRET, tokensPerSecond: 200 },
      ],
      (urls) => {
        const claude = {
          id: "claude-east",
          region: "us-east",
          ...VIRGINIA,
          url: urls.claude!,
          model: "sim-claude",
          kind: "anthropic" as const,
          capacity: 16,
          secret: "ANTHROPIC_KEY",
        };
        const gpt = {
          id: "gpt-west",
          region: "eu-west",
          ...LONDON,
          url: urls.gpt!,
          model: "sim-gpt",
          kind: "openai" as const,
          capacity: 16,
          secret: "OPENAI_KEY",
        };
        return {
          pools: {
            claude: { role: "chat", models: ["claude"], endpoints: [claude] },
            assistant: { role: "chat", models: ["assistant"], endpoints: [claude, gpt] },
            // The same backend without prompt caching.
            "apply-claude": {
              role: "apply",
              models: ["apply-claude"],
              endpoints: [{ ...claude, id: "claude-uncached", promptCaching: false }],
            },
          },
          health: { probeIntervalMs: 500, snapshotMaxAgeMs: 200 },
        };
      },
      { ANTHROPIC_KEY: ANTHROPIC_SECRET, OPENAI_KEY: OPENAI_SECRET },
    );
  });
  afterAll(async () => gw?.stop());
  beforeEach(async () => {
    for (const b of gw.sim.backends) {
      await b.configure({ fault: { type: "none" }, tokensPerSecond: 200 });
      b.clear();
    }
  });

  /** The text of a streamed chat completion of `model`. */
  const streamedText = async (model: string, max_tokens: number) => {
    const stream = await gw.openai().chat.completions.create({
      model,
      messages: [{ role: "user", content: "Hello" }],
      max_tokens,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    return text;
  };

  const generations = (backend: string) =>
    gw.sim
      .backend(backend)
      .records()
      .filter((r) => r.method === "POST");

  it("streams a chat completion from the Messages API, with the pool's key, the system prompt and usage", async () => {
    const stream = await gw.openai().chat.completions.create({
      model: "claude",
      messages: [
        { role: "system", content: "Answer in French." },
        { role: "user", content: "Say something." },
      ],
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let finish: string | null | undefined;
    let usage: OpenAI.CompletionUsage | null | undefined;
    let role: string | undefined;
    for await (const chunk of stream) {
      expect(chunk.model).toBe("claude");
      expect(chunk.object).toBe("chat.completion.chunk");
      text += chunk.choices[0]?.delta.content ?? "";
      role ??= chunk.choices[0]?.delta.role;
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe("sim0 sim1 sim2 sim3 sim4 sim5 sim6 sim7 ");
    expect(role).toBe("assistant");
    expect(finish).toBe("length");
    expect(usage).toEqual({
      prompt_tokens: Math.ceil("Answer in French.Say something.".length / 4),
      completion_tokens: 8,
      total_tokens: Math.ceil("Answer in French.Say something.".length / 4) + 8,
      prompt_tokens_details: { cached_tokens: 0 },
    });
    const [record] = generations("claude");
    expect(record!.path).toBe("/v1/messages");
    expect(record!.headers["x-api-key"]).toBe(ANTHROPIC_SECRET);
    expect(record!.headers["anthropic-version"]).toBe("2023-06-01");
    expect(record!.authorization).toBeNull();
    expect(JSON.stringify(record!.headers)).not.toContain(gw.apiKey);
    // Prompt caching is on by default: the ends of the system prompt and of the conversation are marked.
    const ephemeral = { type: "ephemeral" };
    expect(record!.body).toEqual({
      model: "sim-claude",
      system: [{ type: "text", text: "Answer in French.", cache_control: ephemeral }],
      messages: [{ role: "user", content: [{ type: "text", text: "Say something.", cache_control: ephemeral }] }],
      max_tokens: 8,
      stream: true,
    });
  });

  it("answers a whole chat completion, asking for the default limit when the client set none", async () => {
    const completion = await gw.openai().chat.completions.create({
      model: "claude",
      messages: [{ role: "user", content: "Hello" }],
    });
    expect(completion.object).toBe("chat.completion");
    expect(completion.model).toBe("claude");
    expect(completion.choices[0]!.message).toMatchObject({
      role: "assistant",
      content: expect.stringMatching(/^sim0 /),
    });
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    expect(completion.usage).toMatchObject({ prompt_tokens: 2, completion_tokens: 16, total_tokens: 18 });
    expect((generations("claude")[0]!.body as { max_tokens: number }).max_tokens).toBe(4096);
  });

  it("carries tools across both ways: the SDK gets the call streamed as tool call deltas, and whole", async () => {
    const tools: OpenAI.ChatCompletionTool[] = [
      {
        type: "function",
        function: { name: "lookup", description: "Looks a symbol up", parameters: { type: "object", properties: {} } },
      },
    ];
    const stream = await gw.openai().chat.completions.create({
      model: "claude",
      messages: [{ role: "user", content: "Where is parseConfig defined?" }],
      tools,
      tool_choice: "required",
      max_tokens: 3,
      stream: true,
    });
    const call = { id: "", name: "", arguments: "" };
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
        expect(delta.index).toBe(0);
        call.id += delta.id ?? "";
        call.name += delta.function?.name ?? "";
        call.arguments += delta.function?.arguments ?? "";
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(call).toEqual({
      id: expect.stringMatching(/^toolu_sim_/),
      name: "lookup",
      arguments: '{"text":"sim0 sim1 sim2 "}',
    });
    expect(finish).toBe("tool_calls");
    const body = generations("claude")[0]!.body as Record<string, unknown>;
    expect(body.tools).toEqual([
      { name: "lookup", description: "Looks a symbol up", input_schema: { type: "object", properties: {} } },
    ]);
    expect(body.tool_choice).toEqual({ type: "any" });

    const whole = await gw.openai().chat.completions.create({
      model: "claude",
      messages: [
        { role: "user", content: "Where is parseConfig defined?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: call.id, type: "function", function: { name: "lookup", arguments: call.arguments } }],
        },
        { role: "tool", tool_call_id: call.id, content: "src/config.ts:12" },
      ],
      tools,
      tool_choice: { type: "function", function: { name: "lookup" } },
      max_tokens: 2,
    });
    expect(whole.choices[0]!.finish_reason).toBe("tool_calls");
    const [made] = whole.choices[0]!.message.tool_calls!;
    expect(made!.type === "function" && JSON.parse(made!.function.arguments)).toEqual({ text: "sim0 sim1 " });
    const second = generations("claude")[1]!.body as { messages: unknown };
    expect(second.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Where is parseConfig defined?" }] },
      {
        role: "assistant",
        content: [{ type: "tool_use", id: call.id, name: "lookup", input: { text: "sim0 sim1 sim2 " } }],
      },
      {
        role: "user",
        content: [
          {
            type: "tool_result",
            tool_use_id: call.id,
            content: "src/config.ts:12",
            cache_control: { type: "ephemeral" },
          },
        ],
      },
    ]);
  });

  it("asks for extended thinking for a reasoning effort and streams it back as reasoning", async () => {
    const stream = await gw.openai().chat.completions.create({
      model: "claude",
      messages: [{ role: "user", content: "Why?" }],
      reasoning_effort: "low",
      max_completion_tokens: 2000,
      stream: true,
    });
    let reasoning = "";
    let text = "";
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as
        | { content?: string | null; reasoning?: string; reasoning_content?: string }
        | undefined;
      expect(delta?.reasoning_content).toBe(delta?.reasoning);
      reasoning += delta?.reasoning ?? "";
      text += delta?.content ?? "";
    }
    expect(reasoning).toBe("Thinking (simulated).");
    expect(text).toMatch(/^sim0 /);
    expect(generations("claude")[0]!.body).toMatchObject({
      max_tokens: 2000,
      thinking: { type: "enabled", budget_tokens: 1024 },
    });
  });

  it("marks prompts so that a chat's next turn reads its earlier turns from Anthropic's cache", async () => {
    await gw.sim.backend("claude").configure({ cacheMinTokens: 5 });
    try {
      const system = { role: "system" as const, content: "You review TypeScript. ".repeat(4) };
      const question = { role: "user" as const, content: "Is this safe: eval(input)?" };
      const turn = (model: string, messages: OpenAI.ChatCompletionMessageParam[]) =>
        gw.openai().chat.completions.create({ model, messages, max_tokens: 2 });
      const first = await turn("claude", [system, question]);
      expect(first.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
      const next = [
        system,
        question,
        { role: "assistant" as const, content: "No." },
        { role: "user" as const, content: "Why?" },
      ];
      const second = await turn("claude", next);
      // The whole first turn (system prompt and question) came from the cache.
      const firstTurnTokens = first.usage!.prompt_tokens;
      expect(second.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(firstTurnTokens - 1);
      expect(second.usage?.prompt_tokens_details?.cached_tokens).toBeLessThan(second.usage!.prompt_tokens);
      // The same backend without prompt caching: no marks, nothing read.
      await turn("apply-claude", [system, question]);
      const uncached = await turn("apply-claude", next);
      expect(uncached.usage?.prompt_tokens_details?.cached_tokens).toBe(0);
    } finally {
      await gw.sim.backend("claude").configure({ cacheMinTokens: 1024 });
    }
  });

  it("folds apply's prediction into the conversation for the Messages API", async () => {
    await gw.openai().chat.completions.create({
      model: "apply-claude",
      messages: [{ role: "user", content: "Rename x to y." }],
      prediction: { type: "content", content: "const x = 1;" },
    });
    const body = generations("claude")[0]!.body as { messages: unknown; prediction?: unknown };
    expect(body).not.toHaveProperty("prediction");
    expect(JSON.stringify(body.messages)).toContain("const x = 1;");
    expect(JSON.stringify(body)).not.toContain("cache_control");
  });

  it("fails over from an overloaded (529) Anthropic endpoint to the OpenAI-compatible one before the first token", async () => {
    await gw.sim.backend("claude").configure({ fault: { type: "status", status: 529 } });
    expect(await streamedText("assistant", 3)).toBe("sim0 sim1 sim2 ");
    expect(generations("claude").map((r) => r.status)).toEqual([529]);
    expect(generations("gpt")).toHaveLength(1);
    expect(generations("gpt")[0]!.authorization).toBe(`Bearer ${OPENAI_SECRET}`);
    // A backend that said it is full gets nothing from this isolate for a second: let that pass.
    await sleep(1_100);
  });

  it("sends what the Messages API cannot take to the pool's other endpoint, and refuses it with 400 where it is the only one", async () => {
    const served = await gw.openai().chat.completions.create({
      model: "assistant",
      messages: [{ role: "user", content: "Hello" }],
      max_tokens: 2,
      logprobs: true,
    });
    expect(served.choices[0]!.message.content).toBe("sim0 sim1 ");
    expect(generations("claude")).toHaveLength(0);
    expect(generations("gpt")).toHaveLength(1);

    const refused = await gw
      .openai()
      .chat.completions.create({ model: "claude", messages: [{ role: "user", content: "Hello" }], logprobs: true })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    const error = refused as InstanceType<typeof OpenAI.APIError>;
    expect(error.headers?.get("content-type")).toBe("application/problem+json");
    expect(error.message).toContain("cannot take logprobs");
    expect(generations("claude")).toHaveLength(0);
  });

  it("ends a Messages API stream that broke mid-way with one explicit error event, never a silent truncation", async () => {
    await gw.sim.backend("claude").configure({ fault: { type: "malformedSse", afterTokens: 2 } });
    const raw = await gw.post("/chat/completions", {
      model: "claude",
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 5,
      stream: true,
    });
    expect(raw.status).toBe(200);
    const text = await raw.text();
    expect(text).toContain('"content":"sim1 "');
    const errors = text.split("\n\n").filter((event) => event.startsWith("event: error\n"));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain("upstream_failure");
    expect(text).not.toContain("data: [DONE]");
  });

  it("counts an overloaded error event as full, not broken: three in a row do not eject the endpoint", async () => {
    const claude = gw.sim.backend("claude");
    await claude.configure({ fault: { type: "errorEvent", afterTokens: 0, overloaded: true } });
    for (let i = 0; i < 3; i++) {
      // Each one fails over to the OpenAI-compatible endpoint, after Anthropic's stream said it is overloaded.
      expect(await streamedText("assistant", 2)).toBe("sim0 sim1 ");
      // A full backend is passed over for a second; after it, the next request tries it again.
      await sleep(1_100);
    }
    expect(generations("claude").map((r) => r.fault)).toEqual(["errorEvent", "errorEvent", "errorEvent"]);
    await claude.configure({ fault: { type: "none" } });
    claude.clear();
    // Three failures in a row would have ejected it for 10 s; overloaded, it is back at once.
    await streamedText("assistant", 2);
    expect(generations("claude")).toHaveLength(1);
  });

  it("ends a Messages API stream with the edge's error event when Anthropic reports an error after the first token", async () => {
    await gw.sim.backend("claude").configure({ fault: { type: "errorEvent", afterTokens: 2, overloaded: true } });
    const stream = await gw.openai().chat.completions.create({
      model: "claude",
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 5,
      stream: true,
    });
    let text = "";
    const error = await (async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    })().catch((err: unknown) => err);
    expect(text).toBe("sim0 sim1 ");
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(String(error)).toContain("Overloaded (simulated)");
    await sleep(1_100);
  });

  it("cancels the Messages API request when the SDK aborts the stream", async () => {
    await gw.sim.backend("claude").configure({ tokensPerSecond: 5 });
    const controller = new AbortController();
    const stream = await gw
      .openai()
      .chat.completions.create(
        { model: "claude", messages: [{ role: "user", content: "long" }], max_tokens: 100, stream: true },
        { signal: controller.signal },
      );
    for await (const _ of stream) {
      controller.abort();
      break;
    }
    const record = await until("the upstream abort", () => generations("claude").find((r) => r.outcome === "aborted"));
    expect(record.abortedAt).toBeGreaterThanOrEqual(record.receivedAt);
  });

  it("keeps no prompt, completion or Anthropic key in storage or logs", async () => {
    const code = "function settleAnthropicLedgerAcrossShards(ledger) { return ledger.entries; }";
    const stream = await gw.openai().chat.completions.create({
      model: "claude",
      messages: [
        { role: "system", content: code },
        { role: "user", content: `Explain:\n${code}` },
      ],
      max_tokens: 4,
      stream: true,
    });
    for await (const _ of stream) void _;
    await sleep(500);
    const needles = ["settleAnthropicLedgerAcrossShards", ANTHROPIC_SECRET, gw.apiKey];
    expect(await scanDirectoryFor(gw.edge.persistTo, needles)).toEqual([]);
    for (const needle of needles) expect(gw.edge.output()).not.toContain(needle);
  });

  it("probes the Anthropic endpoint's health at its models list, with its key", async () => {
    const probe = await until("a health probe", () =>
      gw.sim
        .backend("claude")
        .records()
        .find((r) => r.method === "GET"),
    );
    expect(probe.path).toBe("/v1/models");
    expect(probe.status).toBe(200);
    expect(probe.headers["x-api-key"]).toBe(ANTHROPIC_SECRET);
    expect(probe.headers["anthropic-version"]).toBe("2023-06-01");
  });
});
