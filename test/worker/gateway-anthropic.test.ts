import { describe, expect, it } from "vitest";
import { GatewayConfig } from "../../protocol/gateway.js";
import {
  ANTHROPIC_DEFAULT_MAX_TOKENS,
  anthropicCannotServe,
  anthropicStream,
  fromAnthropicMessage,
  toAnthropicRequest,
} from "../../workers/gateway/anthropic.js";
import { SseReader } from "../../workers/gateway/sse.js";

const user = (content: unknown) => ({ role: "user", content });

describe("chat requests as Messages API requests", () => {
  it("moves system and developer messages to `system` and merges turns of the same role", () => {
    const out = toAnthropicRequest(
      {
        model: "public",
        messages: [
          { role: "system", content: "Be brief." },
          { role: "developer", content: [{ type: "text", text: "Use TypeScript." }] },
          user("Hello"),
          user([
            { type: "text", text: "" },
            { type: "text", text: "again" },
          ]),
          { role: "assistant", content: "Hi." },
        ],
      },
      "claude-x",
      true,
    );
    expect(out).toEqual({
      model: "claude-x",
      system: [
        { type: "text", text: "Be brief." },
        { type: "text", text: "Use TypeScript." },
      ],
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "Hello" },
            { type: "text", text: "again" },
          ],
        },
        { role: "assistant", content: [{ type: "text", text: "Hi." }] },
      ],
      max_tokens: ANTHROPIC_DEFAULT_MAX_TOKENS,
      stream: true,
    });
  });

  it("marks the end of the system prompt and of the conversation for the prompt cache when asked", () => {
    const body = {
      messages: [
        { role: "system", content: "Be brief." },
        { role: "system", content: "Use TypeScript." },
        user("Hello"),
        { role: "assistant", content: "Hi." },
        user([
          { type: "text", text: "Explain" },
          { type: "text", text: "this" },
        ]),
      ],
    };
    const cached = toAnthropicRequest(body, "m", false, true);
    const ephemeral = { type: "ephemeral" };
    expect(cached.system).toEqual([
      { type: "text", text: "Be brief." },
      { type: "text", text: "Use TypeScript.", cache_control: ephemeral },
    ]);
    expect(cached.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Hello" }] },
      { role: "assistant", content: [{ type: "text", text: "Hi." }] },
      {
        role: "user",
        content: [
          { type: "text", text: "Explain" },
          { type: "text", text: "this", cache_control: ephemeral },
        ],
      },
    ]);
    expect(JSON.stringify(toAnthropicRequest(body, "m", false, false))).not.toContain("cache_control");
    expect(toAnthropicRequest({ messages: [user("x")] }, "m", false, true)).toEqual({
      model: "m",
      messages: [{ role: "user", content: [{ type: "text", text: "x", cache_control: ephemeral }] }],
      max_tokens: ANTHROPIC_DEFAULT_MAX_TOKENS,
    });
  });

  it("maps limits, sampling, stops and the user, clamping the temperature to the API's range", () => {
    const out = toAnthropicRequest(
      {
        messages: [user("x")],
        max_tokens: 50,
        max_completion_tokens: 70,
        temperature: 1.6,
        top_p: 0.9,
        stop: "\n\n",
        user: "u-1",
        presence_penalty: 1,
      },
      "m",
      false,
    );
    expect(out).toEqual({
      model: "m",
      messages: [{ role: "user", content: [{ type: "text", text: "x" }] }],
      max_tokens: 70,
      temperature: 1,
      top_p: 0.9,
      stop_sequences: ["\n\n"],
      metadata: { user_id: "u-1" },
    });
  });

  it("asks for extended thinking for a reasoning effort, within the client's limit, without sampling settings", () => {
    const ask = (extra: object, messages: object[] = [user("x")]) =>
      toAnthropicRequest({ messages, temperature: 0.2, top_p: 0.5, ...extra }, "m", true);
    expect(ask({ reasoning_effort: "high", max_completion_tokens: 20_000 })).toMatchObject({
      max_tokens: 20_000,
      thinking: { type: "enabled", budget_tokens: 16_384 },
    });
    const low = ask({ reasoning_effort: "low" });
    expect(low).toMatchObject({ max_tokens: 1024 + ANTHROPIC_DEFAULT_MAX_TOKENS, thinking: { budget_tokens: 1024 } });
    expect(low).not.toHaveProperty("temperature");
    expect(low).not.toHaveProperty("top_p");
    expect(ask({ reasoning_effort: "medium", max_tokens: 2000 })).toMatchObject({
      max_tokens: 2000,
      thinking: { budget_tokens: 1999 },
    });
    // No thinking: too small a limit, no effort or the minimal one, a forced tool call, tool results to carry.
    const none = [
      ask({ reasoning_effort: "high", max_tokens: 1000 }),
      ask({}),
      ask({ reasoning_effort: "minimal" }),
      ask({ reasoning_effort: "low", tools: [{ type: "function", function: { name: "f" } }], tool_choice: "required" }),
      ask({ reasoning_effort: "low" }, [
        user("x"),
        { role: "assistant", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "c", content: "done" },
      ]),
    ];
    for (const out of none) {
      expect(out).not.toHaveProperty("thinking");
      expect(out.temperature).toBe(0.2);
    }
  });

  it("turns image parts into base64 or URL image blocks", () => {
    const out = toAnthropicRequest(
      {
        messages: [
          user([
            { type: "text", text: "What is this?" },
            { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
            { type: "image_url", image_url: { url: "https://example.com/a.jpg", detail: "low" } },
          ]),
        ],
      },
      "m",
      false,
    );
    expect((out.messages as { content: unknown[] }[])[0]!.content).toEqual([
      { type: "text", text: "What is this?" },
      { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
      { type: "image", source: { type: "url", url: "https://example.com/a.jpg" } },
    ]);
  });

  it("carries tools, the tool choice, calls and their results across", () => {
    const out = toAnthropicRequest(
      {
        messages: [
          user("Weather in Paris?"),
          {
            role: "assistant",
            content: null,
            tool_calls: [
              { id: "call_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } },
            ],
          },
          { role: "tool", tool_call_id: "call_1", content: "18°C" },
          user("Thanks"),
        ],
        tools: [
          {
            type: "function",
            function: {
              name: "weather",
              description: "Current weather",
              parameters: { type: "object", properties: { city: { type: "string" } } },
            },
          },
        ],
        tool_choice: "required",
        parallel_tool_calls: false,
      },
      "m",
      false,
    );
    expect(out.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Weather in Paris?" }] },
      { role: "assistant", content: [{ type: "tool_use", id: "call_1", name: "weather", input: { city: "Paris" } }] },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "call_1", content: "18°C" },
          { type: "text", text: "Thanks" },
        ],
      },
    ]);
    expect(out.tools).toEqual([
      {
        name: "weather",
        description: "Current weather",
        input_schema: { type: "object", properties: { city: { type: "string" } } },
      },
    ]);
    expect(out.tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true });
    const named = toAnthropicRequest(
      {
        messages: [user("x")],
        tools: out.tools && [{ type: "function", function: { name: "weather" } }],
        tool_choice: { type: "function", function: { name: "weather" } },
      },
      "m",
      false,
    );
    expect(named.tool_choice).toEqual({ type: "tool", name: "weather" });
    expect(named.tools).toEqual([{ name: "weather", input_schema: { type: "object", properties: {} } }]);
  });

  it("says what it cannot carry, and nothing for what it can", () => {
    const base = { model: "m", messages: [user("x")] };
    expect(anthropicCannotServe(base)).toBeUndefined();
    expect(anthropicCannotServe({ ...base, response_format: { type: "text" }, tools: [] })).toBeUndefined();
    expect(anthropicCannotServe({ ...base, logprobs: true })).toBe("logprobs");
    expect(anthropicCannotServe({ ...base, n: 1 })).toBeUndefined();
    expect(anthropicCannotServe({ ...base, n: 2 })).toMatch(/^`n` above 1/);
    expect(anthropicCannotServe({ ...base, response_format: { type: "json_schema" } })).toBe("response_format");
    expect(anthropicCannotServe({ ...base, modalities: ["text", "audio"] })).toBe("audio");
    expect(anthropicCannotServe({ ...base, functions: [] })).toMatch(/functions/);
    expect(anthropicCannotServe({ ...base, messages: [{ role: "function", content: "x" }] })).toMatch(
      /role "function"/,
    );
    expect(anthropicCannotServe({ ...base, messages: [user([{ type: "input_audio" }])] })).toMatch(
      /"input_audio" content/,
    );
    const call = (args: string) => ({
      ...base,
      messages: [
        { role: "assistant", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: args } }] },
      ],
    });
    expect(anthropicCannotServe(call('{"a":1}'))).toBeUndefined();
    expect(anthropicCannotServe(call("[1]"))).toMatch(/not a JSON object/);
    expect(anthropicCannotServe({ ...base, tools: [{ type: "custom", custom: {} }] })).toMatch(
      /tools other than functions/,
    );
  });
});

describe("Messages API answers as chat completions", () => {
  it("joins text blocks, lists tool uses as tool calls and counts cached prompt tokens", () => {
    const out = fromAnthropicMessage({
      id: "msg_1",
      type: "message",
      model: "claude-x",
      content: [
        { type: "text", text: "Let me check. " },
        { type: "tool_use", id: "toolu_1", name: "weather", input: { city: "Paris" } },
      ],
      stop_reason: "tool_use",
      usage: { input_tokens: 10, cache_read_input_tokens: 90, cache_creation_input_tokens: 5, output_tokens: 7 },
    });
    expect(out).toMatchObject({
      id: "msg_1",
      object: "chat.completion",
      model: "claude-x",
      choices: [
        {
          index: 0,
          message: {
            role: "assistant",
            content: "Let me check. ",
            tool_calls: [
              { id: "toolu_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } },
            ],
          },
          finish_reason: "tool_calls",
        },
      ],
      usage: {
        prompt_tokens: 105,
        completion_tokens: 7,
        total_tokens: 112,
        prompt_tokens_details: { cached_tokens: 90 },
      },
    });
  });

  it("returns thinking as reasoning and reasoning_content", () => {
    const out = fromAnthropicMessage({
      content: [
        { type: "thinking", thinking: "Let me see.", signature: "sig" },
        { type: "text", text: "Yes." },
      ],
      stop_reason: "end_turn",
      usage: {},
    });
    expect((out.choices as { message: unknown }[])[0]!.message).toEqual({
      role: "assistant",
      content: "Yes.",
      reasoning: "Let me see.",
      reasoning_content: "Let me see.",
      refusal: null,
    });
  });

  it("maps every stop reason", () => {
    const finish = (stop_reason: unknown) =>
      (fromAnthropicMessage({ content: [], stop_reason, usage: {} }).choices as { finish_reason: unknown }[])[0]!
        .finish_reason;
    expect(finish("end_turn")).toBe("stop");
    expect(finish("stop_sequence")).toBe("stop");
    expect(finish("max_tokens")).toBe("length");
    expect(finish("tool_use")).toBe("tool_calls");
    expect(finish("refusal")).toBe("content_filter");
    expect(finish(null)).toBeNull();
  });
});

/** A Messages API stream as a backend sends it. */
function sse(events: [string, object | string][]): ReadableStream<Uint8Array> {
  const text = events
    .map(
      ([type, data]) =>
        `event: ${type}\ndata: ${typeof data === "string" ? data : JSON.stringify({ type, ...data })}\n\n`,
    )
    .join("");
  return new Response(text).body!;
}

async function read(reader: SseReader): Promise<Record<string, unknown>[]> {
  const out: Record<string, unknown>[] = [];
  for (;;) {
    const item = await reader.next(1_000);
    if (item.type !== "event") {
      out.push({ end: item });
      return out;
    }
    out.push(JSON.parse(item.data) as Record<string, unknown>);
  }
}

describe("Messages API streams as chat completion chunks", () => {
  it("sends nothing before the first text, then content, tool call deltas, the finish and the usage, and ends", async () => {
    const reader = new SseReader(
      sse([
        [
          "message_start",
          {
            message: {
              id: "msg_9",
              model: "claude-x",
              usage: { input_tokens: 12, cache_read_input_tokens: 3, output_tokens: 1 },
            },
          },
        ],
        ["content_block_start", { index: 0, content_block: { type: "text", text: "" } }],
        ["ping", {}],
        ["content_block_delta", { index: 0, delta: { type: "text_delta", text: "Hel" } }],
        ["content_block_delta", { index: 0, delta: { type: "text_delta", text: "lo" } }],
        ["content_block_stop", { index: 0 }],
        [
          "content_block_start",
          { index: 1, content_block: { type: "tool_use", id: "toolu_1", name: "weather", input: {} } },
        ],
        ["content_block_delta", { index: 1, delta: { type: "input_json_delta", partial_json: '{"city":' } }],
        ["content_block_delta", { index: 1, delta: { type: "input_json_delta", partial_json: '"Paris"}' } }],
        ["content_block_stop", { index: 1 }],
        ["message_delta", { delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 9 } }],
        ["message_stop", {}],
      ]),
      anthropicStream(),
    );
    const chunks = await read(reader);
    const choice = (i: number) => (chunks[i]!.choices as Record<string, unknown>[])[0];
    expect(chunks).toHaveLength(8);
    expect(chunks[0]).toMatchObject({ id: "msg_9", object: "chat.completion.chunk", model: "claude-x" });
    expect(choice(0)).toEqual({
      index: 0,
      delta: { role: "assistant", content: "Hel" },
      logprobs: null,
      finish_reason: null,
    });
    expect(choice(1)!.delta).toEqual({ content: "lo" });
    expect(choice(2)!.delta).toEqual({
      content: null,
      tool_calls: [{ index: 0, id: "toolu_1", type: "function", function: { name: "weather", arguments: "" } }],
    });
    expect(choice(3)!.delta).toEqual({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] });
    expect(choice(4)!.delta).toEqual({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] });
    expect(choice(5)).toMatchObject({ delta: {}, finish_reason: "tool_calls" });
    expect(chunks[6]).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 15, completion_tokens: 9, total_tokens: 24 },
    });
    expect(chunks[7]).toEqual({ end: { type: "end", done: true } });
  });

  it("streams thinking as reasoning deltas before the answer, leaving signatures out", async () => {
    const reader = new SseReader(
      sse([
        ["message_start", { message: { id: "m", model: "x", usage: { input_tokens: 1, output_tokens: 1 } } }],
        ["content_block_start", { index: 0, content_block: { type: "thinking", thinking: "" } }],
        ["content_block_delta", { index: 0, delta: { type: "thinking_delta", thinking: "Hmm." } }],
        ["content_block_delta", { index: 0, delta: { type: "signature_delta", signature: "c2ln" } }],
        ["content_block_stop", { index: 0 }],
        ["content_block_start", { index: 1, content_block: { type: "text", text: "" } }],
        ["content_block_delta", { index: 1, delta: { type: "text_delta", text: "Yes." } }],
      ]),
      anthropicStream(),
    );
    const deltas = (await read(reader)).slice(0, -1).map((c) => (c.choices as { delta: unknown }[])[0]!.delta);
    expect(deltas).toEqual([{ role: "assistant", reasoning: "Hmm.", reasoning_content: "Hmm." }, { content: "Yes." }]);
  });

  it("marks the answer whole at message_stop, so the edge ends the stream with [DONE]", async () => {
    const reader = new SseReader(
      sse([
        ["message_start", { message: { id: "m", model: "x", usage: { input_tokens: 1, output_tokens: 1 } } }],
        ["content_block_delta", { index: 0, delta: { type: "text_delta", text: "a" } }],
        ["message_delta", { delta: { stop_reason: "end_turn" }, usage: { output_tokens: 1 } }],
        ["message_stop", {}],
      ]),
      anthropicStream(),
    );
    await reader.next(1_000);
    await reader.next(1_000);
    await reader.next(1_000);
    expect(reader.drainedToDone).toBe(true);
    expect(await reader.next(1_000)).toEqual({ type: "end", done: true });
  });

  it("turns an error event into the error the edge reports, and passes a malformed event on as it is", async () => {
    const reader = new SseReader(
      sse([
        ["content_block_delta", { index: 0, delta: { type: "text_delta", text: "a" } }],
        ["error", { error: { type: "overloaded_error", message: "Overloaded" } }],
        ["content_block_delta", '{"type": "content_block_delta",'],
      ]),
      anthropicStream(),
    );
    expect(await reader.next(1_000)).toMatchObject({ type: "event" });
    const error = await reader.next(1_000);
    expect(error.type === "event" && JSON.parse(error.data)).toEqual({
      error: { message: "Overloaded", type: "overloaded_error" },
    });
    expect(await reader.next(1_000)).toEqual({ type: "event", data: '{"type": "content_block_delta",' });
  });

  it("ends without [DONE] when the stream stops before message_stop", async () => {
    const reader = new SseReader(
      sse([["content_block_delta", { index: 0, delta: { type: "text_delta", text: "a" } }]]),
      anthropicStream(),
    );
    await reader.next(1_000);
    expect(await reader.next(1_000)).toEqual({ type: "end", done: false });
  });
});

describe("configuration", () => {
  const endpoint = (kind: string) => ({
    id: `e-${kind}`,
    region: "us-east",
    latitude: 39,
    longitude: -77,
    url: "https://api.anthropic.com/v1",
    kind,
    capacity: 10,
  });
  it("takes promptCaching on Anthropic endpoints only", () => {
    const pool = (e: object) => ({ pools: { p: { role: "chat", models: ["m"], endpoints: [e] } } });
    expect(GatewayConfig.safeParse(pool({ ...endpoint("anthropic"), promptCaching: false })).success).toBe(true);
    const parsed = GatewayConfig.safeParse(pool({ ...endpoint("openai"), promptCaching: true }));
    expect(parsed.success).toBe(false);
    expect(parsed.error!.issues[0]!.message).toMatch(/only Anthropic endpoints take promptCaching/);
  });

  it("takes Anthropic endpoints in chat and apply pools only", () => {
    for (const role of ["chat", "apply"])
      expect(
        GatewayConfig.safeParse({ pools: { p: { role, models: ["m"], endpoints: [endpoint("anthropic")] } } }).success,
      ).toBe(true);
    for (const role of ["tab", "embed"]) {
      const parsed = GatewayConfig.safeParse({
        pools: { p: { role, models: ["m"], endpoints: [endpoint("anthropic")] } },
      });
      expect(parsed.success).toBe(false);
      expect(parsed.error!.issues.map((i) => i.message).join()).toMatch(/chat and apply pools only/);
    }
  });
});
