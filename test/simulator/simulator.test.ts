import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { createInterface } from "node:readline";
import OpenAI, {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  AuthenticationError,
  BadRequestError,
  InternalServerError,
  NotFoundError,
} from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  simulatedEmbedding,
  startSimulator,
  type RequestRecord,
  type Simulator,
} from "../../gpu-backends/simulator/simulator.js";

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let sim: Simulator;

beforeAll(async () => {
  sim = await startSimulator({
    control: true,
    backends: [
      { id: "vllm", models: ["sim-model", "sim-coder"], ttftMs: 5, tokensPerSecond: 2000, completionTokens: 8 },
      { id: "openai", kind: "openai", ttftMs: 5, tokensPerSecond: 2000, completionTokens: 8 },
      { id: "keyed", apiKey: "sk-sim-secret", ttftMs: 1 },
      { id: "faulty", ttftMs: 5, tokensPerSecond: 1000, completionTokens: 8 },
      { id: "small", capacity: 2, maxConcurrency: 3, ttftMs: 150, tokensPerSecond: 100, completionTokens: 4 },
      { id: "wide", capacity: 400, ttftMs: 500, tokensPerSecond: 50, completionTokens: 16 },
      {
        id: "claude",
        kind: "anthropic",
        models: ["sim-claude"],
        apiKey: "sk-ant-sim",
        ttftMs: 5,
        tokensPerSecond: 2000,
        completionTokens: 6,
      },
    ],
  });
});
afterAll(() => sim?.stop());
beforeEach(async () => {
  for (const backend of sim.backends) {
    backend.clear();
    backend.resetPeak();
  }
  await sim.backend("faulty").configure({ fault: { type: "none" } });
});

function client(id: string, options: ConstructorParameters<typeof OpenAI>[0] = {}) {
  return new OpenAI({ baseURL: sim.backend(id).url, apiKey: "sk-unused", maxRetries: 0, ...options });
}

async function waitFor<T>(probe: () => T | undefined, ms = 2000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error("waitFor: timed out");
    await sleep(5);
  }
}

const settled = (id: string) =>
  waitFor(() =>
    sim
      .backend(id)
      .records()
      .find((r) => r.outcome !== "pending"),
  );

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => expect.fail("expected a rejection"),
    (err: unknown) => err,
  );
}

describe("the OpenAI protocol, through the openai SDK", () => {
  it("answers a whole completion with simulated tokens, finish reason and usage", async () => {
    const sdk = client("vllm");
    const short = await sdk.completions.create({ model: "sim-model", prompt: "12345678", max_tokens: 3 });
    expect(short.id).toMatch(/^cmpl-sim-/);
    expect(short.object).toBe("text_completion");
    expect(short.system_fingerprint).toBe("sextant-simulator");
    expect(short.choices[0]).toMatchObject({ index: 0, text: "sim0 sim1 sim2 ", finish_reason: "length" });
    expect(short.usage).toEqual({ prompt_tokens: 2, completion_tokens: 3, total_tokens: 5 });

    const full = await sdk.completions.create({ model: "sim-coder", prompt: ["123456789"] });
    expect(full.model).toBe("sim-coder");
    expect(full.choices[0]?.finish_reason).toBe("stop");
    expect(full.usage).toEqual({ prompt_tokens: 3, completion_tokens: 8, total_tokens: 11 });

    const [record] = sim.backend("vllm").records();
    expect(record).toMatchObject({
      seq: expect.any(Number),
      path: "/v1/completions",
      outcome: "completed",
      status: 200,
    });
    expect(record?.body).toMatchObject({ model: "sim-model", prompt: "12345678", max_tokens: 3 });
  });

  it("answers a whole chat completion, counting every message's characters", async () => {
    const chat = await client("vllm").chat.completions.create({
      model: "sim-model",
      messages: [
        { role: "system", content: "1234" },
        { role: "user", content: [{ type: "text", text: "12345" }] },
      ],
      max_completion_tokens: 2,
    });
    expect(chat.id).toMatch(/^chatcmpl-sim-/);
    expect(chat.object).toBe("chat.completion");
    expect(chat.choices[0]?.message).toMatchObject({ role: "assistant", content: "sim0 sim1 " });
    expect(chat.choices[0]?.finish_reason).toBe("length");
    expect(chat.usage).toEqual({ prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 });
  });

  it("streams chat one event per token, then the finish reason, the usage and [DONE]", async () => {
    const { data: stream, response } = await client("vllm")
      .chat.completions.create({
        model: "sim-model",
        messages: [{ role: "user", content: "hello" }],
        stream: true,
        stream_options: { include_usage: true },
      })
      .withResponse();
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(response.headers.get("x-simulator")).toBe("sextant");
    // The client sent none: the simulator mints one.
    expect(response.headers.get("x-request-id")).toMatch(
      /^sim-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
    );
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);

    expect(chunks).toHaveLength(8 + 2);
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0]?.id)).toBe(true);
    expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant");
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(text).toBe("sim0 sim1 sim2 sim3 sim4 sim5 sim6 sim7 ");
    expect(chunks[8]?.choices[0]).toMatchObject({ delta: {}, finish_reason: "stop" });
    expect(chunks[9]).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 2, completion_tokens: 8, total_tokens: 10 },
    });

    const record = await settled("vllm");
    expect(record.outcome).toBe("completed");
    expect(record.headersAt! - record.receivedAt).toBeLessThan(record.firstTokenAt! - record.receivedAt);
    // The first token waits for the time to first token (5 ms), counted from the request's arrival: a
    // stall of this process between the arrival and the headers must not read as an early token.
    expect(record.firstTokenAt! - record.receivedAt).toBeGreaterThanOrEqual(3);
  });

  it("streams a completion without a usage event unless asked", async () => {
    const stream = await client("vllm").completions.create({
      model: "sim-model",
      prompt: "x",
      max_tokens: 2,
      stream: true,
    });
    const chunks: OpenAI.Completion[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((c) => c.object)).toEqual(["text_completion", "text_completion", "text_completion"]);
    expect(chunks.map((c) => c.choices[0]?.text)).toEqual(["sim0 ", "sim1 ", ""]);
    expect(chunks[2]?.choices[0]?.finish_reason).toBe("length");
    expect(chunks.every((c) => c.usage === undefined)).toBe(true);
  });

  it("embeds deterministically as floats and as the SDK's default base64", async () => {
    const sdk = client("vllm");
    const floats = await sdk.embeddings.create({
      model: "sim-model",
      input: ["alpha", "beta"],
      encoding_format: "float",
    });
    const decoded = await sdk.embeddings.create({ model: "sim-model", input: ["alpha", "beta"] });
    expect(sim.backend("vllm").records()[1]?.body).toMatchObject({ encoding_format: "base64" });
    expect(floats.data.map((d) => d.index)).toEqual([0, 1]);
    expect(decoded.data.map((d) => d.embedding)).toEqual(floats.data.map((d) => d.embedding));
    const [alpha, beta] = floats.data.map((d) => d.embedding);
    expect(alpha).toHaveLength(16);
    expect(Math.hypot(...alpha!)).toBeCloseTo(1, 5);
    expect(alpha).toEqual(simulatedEmbedding("alpha", 16));
    expect(beta).not.toEqual(alpha);
    expect(floats.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
    expect(floats.model).toBe("sim-model");
  });

  it("lists the served models", async () => {
    const models = [];
    for await (const model of client("vllm").models.list()) models.push(model);
    expect(models.map((m) => [m.id, m.object, m.owned_by])).toEqual([
      ["sim-model", "model", "sextant-simulator"],
      ["sim-coder", "model", "sextant-simulator"],
    ]);
  });

  it("rejects a suffix with 400 like vLLM, and accepts it as OpenAI", async () => {
    const err = await rejection(client("vllm").completions.create({ model: "sim-model", prompt: "a", suffix: "b" }));
    expect(err).toBeInstanceOf(BadRequestError);
    expect((err as BadRequestError).message).toContain("suffix is not currently supported");
    const ok = await client("openai").completions.create({ model: "sim-model", prompt: "a", suffix: "b" });
    expect(ok.choices[0]?.text).toMatch(/^sim0 /);
  });

  it("answers 404 with vLLM's message for a model it does not serve", async () => {
    const err = await rejection(client("vllm").completions.create({ model: "gpt-4o", prompt: "a" }));
    expect(err).toBeInstanceOf(NotFoundError);
    expect((err as NotFoundError).error).toMatchObject({ message: "The model `gpt-4o` does not exist.", code: 404 });
  });

  it("answers 401 without the backend's key, and records the Authorization header", async () => {
    const err = await rejection(client("keyed", { apiKey: "sk-wrong" }).models.list());
    expect(err).toBeInstanceOf(AuthenticationError);
    const ok = await client("keyed", { apiKey: "sk-sim-secret" }).completions.create({
      model: "sim-model",
      prompt: "a",
    });
    expect(ok.usage?.completion_tokens).toBe(16);
    expect(
      sim
        .backend("keyed")
        .records()
        .map((r) => [r.authorization, r.outcome]),
    ).toEqual([
      ["Bearer sk-wrong", "error"],
      ["Bearer sk-sim-secret", "completed"],
    ]);
  });

  it("answers malformed JSON with 400 and unknown paths with 404, in the error envelope", async () => {
    const base = sim.backend("vllm").url;
    const bad = await fetch(`${base}/chat/completions`, {
      method: "POST",
      body: "{nope",
      headers: { "x-request-id": "r-1" },
    });
    expect(bad.status).toBe(400);
    expect(bad.headers.get("x-request-id")).toBe("r-1");
    expect(bad.headers.get("x-simulator")).toBe("sextant");
    expect(await bad.json()).toMatchObject({ error: { type: "BadRequestError", param: null, code: 400 } });
    const missing = await fetch(`${base}/responses`, { method: "POST", body: "{}" });
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ error: { code: 404 } });
    const root = await fetch(base.replace(/\/v1$/, "/nothing"));
    expect(root.status).toBe(404);
  });
});

describe("the Anthropic Messages API, through @anthropic-ai/sdk", () => {
  const claude = (apiKey = "sk-ant-sim") =>
    new Anthropic({ baseURL: sim.backend("claude").url.replace(/\/v1$/, ""), apiKey, maxRetries: 0 });
  const ask = { model: "sim-claude", max_tokens: 100, messages: [{ role: "user" as const, content: "Hello there" }] };

  it("answers a whole message with text blocks, a stop reason and usage", async () => {
    // The version the gateway sends, which is not the SDK's own: the simulator records what came.
    const message = await claude().messages.create(
      { ...ask, system: "Be brief." },
      { headers: { "anthropic-version": "2023-06-01" } },
    );
    expect(message.type).toBe("message");
    expect(message.role).toBe("assistant");
    expect(message.content).toEqual([{ type: "text", text: "sim0 sim1 sim2 sim3 sim4 sim5 " }]);
    expect(message.stop_reason).toBe("end_turn");
    expect(message.usage).toMatchObject({
      input_tokens: Math.ceil("Be brief.Hello there".length / 4),
      output_tokens: 6,
    });
    const [record] = sim.backend("claude").records();
    expect(record!.path).toBe("/v1/messages");
    expect(record!.authorization).toBe("Bearer sk-ant-sim");
    expect(record!.headers["anthropic-version"]).toBe("2023-06-01");
  });

  it("streams typed events that the SDK assembles into the same message, stopping at max_tokens", async () => {
    const stream = claude().messages.stream({ ...ask, max_tokens: 4 });
    const types: string[] = [];
    let text = "";
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "content_block_delta" && event.delta.type === "text_delta") text += event.delta.text;
    }
    const message = await stream.finalMessage();
    expect(text).toBe("sim0 sim1 sim2 sim3 ");
    expect(message.content).toEqual([{ type: "text", text }]);
    expect(message.stop_reason).toBe("max_tokens");
    expect(message.usage.output_tokens).toBe(4);
    expect(types[0]).toBe("message_start");
    expect(types.at(-1)).toBe("message_stop");
    expect(types.filter((t) => t === "content_block_delta")).toHaveLength(4);
  });

  it("calls the tool it is made to call, streaming its input as JSON deltas the SDK assembles", async () => {
    const tools = [
      { name: "lookup", description: "Looks up", input_schema: { type: "object" as const, properties: {} } },
    ];
    const stream = claude().messages.stream({ ...ask, max_tokens: 3, tools, tool_choice: { type: "any" } });
    const message = await stream.finalMessage();
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content).toEqual([
      {
        type: "tool_use",
        id: expect.stringMatching(/^toolu_sim_/),
        name: "lookup",
        input: { text: "sim0 sim1 sim2 " },
      },
    ]);
    const whole = await claude().messages.create({
      ...ask,
      max_tokens: 2,
      tools,
      tool_choice: { type: "tool", name: "lookup" },
    });
    expect(whole.content).toMatchObject([{ type: "tool_use", name: "lookup", input: { text: "sim0 sim1 " } }]);
    const free = await claude().messages.create({ ...ask, max_tokens: 2, tools });
    expect(free.content).toEqual([{ type: "text", text: "sim0 sim1 " }]);
  });

  it("thinks first when asked to, in a thinking block the SDK assembles with its signature", async () => {
    const thinking = { type: "enabled" as const, budget_tokens: 1024 };
    const message = await claude()
      .messages.stream({ ...ask, max_tokens: 2000, thinking })
      .finalMessage();
    expect(message.content).toEqual([
      { type: "thinking", thinking: "Thinking (simulated).", signature: "sim" },
      { type: "text", text: "sim0 sim1 sim2 sim3 sim4 sim5 " },
    ]);
    await expect(claude().messages.create({ ...ask, max_tokens: 1024, thinking })).rejects.toBeInstanceOf(
      Anthropic.BadRequestError,
    );
  });

  it("caches marked prompt prefixes: a later prompt that repeats one reads it, counted apart in the usage", async () => {
    const backend = sim.backend("claude");
    await backend.configure({ cacheMinTokens: 5 });
    try {
      const system = [
        { type: "text" as const, text: "You review code. ".repeat(4), cache_control: { type: "ephemeral" as const } },
      ];
      const first = await claude().messages.create({ ...ask, system });
      expect(first.usage).toMatchObject({ cache_read_input_tokens: 0, cache_creation_input_tokens: 17 });
      const second = await claude().messages.create({
        ...ask,
        system,
        messages: [{ role: "user", content: "Another question" }],
      });
      expect(second.usage).toMatchObject({ cache_read_input_tokens: 17, cache_creation_input_tokens: 0 });
      expect(second.usage.input_tokens).toBe(
        Math.ceil(("You review code. ".repeat(4) + "Another question").length / 4) - 17,
      );
      // Unmarked, or under the minimum: nothing is cached.
      const plain = await claude().messages.create({ ...ask, system: "You review code. ".repeat(4) });
      expect(plain.usage).toMatchObject({ cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
      await backend.configure({ cacheMinTokens: 1024 });
      const small = await claude().messages.create({ ...ask, system: [{ ...system[0]!, text: "Other. ".repeat(9) }] });
      expect(small.usage).toMatchObject({ cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
    } finally {
      await backend.configure({ cacheMinTokens: 1024 });
    }
  });

  it("lists its models in Anthropic's shape", async () => {
    const models = await claude().models.list();
    expect(models.data.map((m) => m.id)).toEqual(["sim-claude"]);
  });

  it("refuses a wrong key with 401, a bad body with 400 and OpenAI's paths with 404, in Anthropic's envelope", async () => {
    await expect(claude("sk-wrong").messages.create(ask)).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    const noLimit = { model: "sim-claude", messages: ask.messages } as unknown as typeof ask;
    await expect(claude().messages.create(noLimit)).rejects.toBeInstanceOf(Anthropic.BadRequestError);
    const response = await fetch(`${sim.backend("claude").url}/chat/completions`, {
      method: "POST",
      headers: { "x-api-key": "sk-ant-sim", "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-claude", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(response.status).toBe(404);
    expect(await response.json()).toMatchObject({ type: "error", error: { type: "not_found_error" } });
  });

  it("answers a status fault and overload with Anthropic's error types, 529 when full", async () => {
    const backend = sim.backend("claude");
    await backend.configure({ fault: { type: "status", status: 529 } });
    try {
      const error = await claude()
        .messages.create(ask)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.APIError);
      expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(529);
      expect((error as { error?: unknown }).error).toMatchObject({
        type: "error",
        error: { type: "overloaded_error" },
      });
    } finally {
      await backend.configure({ fault: { type: "none" } });
    }
  });

  it("sends Anthropic's error event mid-stream, which the SDK raises, and 529 for a whole overloaded answer", async () => {
    const backend = sim.backend("claude");
    await backend.configure({ fault: { type: "errorEvent", afterTokens: 2, overloaded: true } });
    try {
      const stream = await claude().messages.create({ ...ask, stream: true });
      const seen: string[] = [];
      const error = await (async () => {
        for await (const event of stream) seen.push(event.type);
      })().catch((err: unknown) => err);
      expect(seen.filter((t) => t === "content_block_delta")).toHaveLength(2);
      expect(String(error)).toMatch(/overloaded_error|Overloaded \(simulated\)/);
      const whole = await claude()
        .messages.create(ask)
        .catch((e: unknown) => e);
      expect((whole as InstanceType<typeof Anthropic.APIError>).status).toBe(529);
    } finally {
      await backend.configure({ fault: { type: "none" } });
    }
  });

  it("breaks a stream with invalid JSON, which the SDK's iteration throws", async () => {
    const backend = sim.backend("claude");
    await backend.configure({ fault: { type: "malformedSse", afterTokens: 2 } });
    try {
      const stream = await claude().messages.create({ ...ask, stream: true });
      const seen: string[] = [];
      await expect(
        (async () => {
          for await (const event of stream) seen.push(event.type);
        })(),
      ).rejects.toThrow();
      expect(seen.filter((t) => t === "content_block_delta")).toHaveLength(2);
    } finally {
      await backend.configure({ fault: { type: "none" } });
    }
  });
});

describe("faults", () => {
  it("refuses connections while `refuse` is set, then listens again on the same port", async () => {
    const backend = sim.backend("faulty");
    const url = backend.url;
    await backend.configure({ fault: { type: "refuse" } });
    const err = await rejection(client("faulty").completions.create({ model: "sim-model", prompt: "a" }));
    expect(err).toBeInstanceOf(APIConnectionError);
    expect(err).not.toBeInstanceOf(APIConnectionTimeoutError);
    expect(backend.records()).toEqual([]);

    await backend.configure({ fault: { type: "none" } });
    expect(backend.url).toBe(url);
    const ok = await client("faulty").completions.create({ model: "sim-model", prompt: "a" });
    expect(ok.choices[0]?.text).toMatch(/^sim0 /);
  });

  it("drops open streams when `refuse` is set, as a crashed server would", async () => {
    const backend = sim.backend("faulty");
    await backend.configure({ fault: { type: "slowDrip", intervalMs: 50 } });
    const stream = await client("faulty").completions.create({ model: "sim-model", prompt: "a", stream: true });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    await backend.configure({ fault: { type: "refuse" } });
    await expect(iterator.next()).rejects.toThrow();
    expect(backend.records()[0]).toMatchObject({ outcome: "fault", fault: "slowDrip" });
  });

  it("answers the configured status in the error envelope, for the configured share of requests", async () => {
    const backend = sim.backend("faulty");
    await backend.configure({ fault: { type: "status", status: 500 } });
    const err = await rejection(client("faulty").chat.completions.create({ model: "sim-model", messages: [] }));
    expect(err).toBeInstanceOf(BadRequestError);
    const failed = await rejection(
      client("faulty").chat.completions.create({ model: "sim-model", messages: [{ role: "user", content: "a" }] }),
    );
    expect(failed).toBeInstanceOf(InternalServerError);
    expect((failed as InternalServerError).error).toMatchObject({ type: "InternalServerError", code: 500 });
    expect(backend.records()[1]).toMatchObject({ outcome: "fault", fault: "status", status: 500 });

    await backend.configure({ fault: { type: "status", status: 500, rate: 0 } });
    await client("faulty").completions.create({ model: "sim-model", prompt: "a" });
  });

  it("hangs before headers until the SDK times out, and records the abort", async () => {
    await sim.backend("faulty").configure({ fault: { type: "hangBeforeHeaders" } });
    const started = now();
    const err = await rejection(
      client("faulty", { timeout: 200 }).completions.create({ model: "sim-model", prompt: "a", stream: true }),
    );
    expect(err).toBeInstanceOf(APIConnectionTimeoutError);
    const record = await settled("faulty");
    expect(record).toMatchObject({ outcome: "aborted", fault: "hangBeforeHeaders" });
    expect(record.headersAt).toBeUndefined();
    expect(record.abortedAt! - started).toBeGreaterThanOrEqual(195);
    expect(sim.backend("faulty").inflight()).toBe(0);
  });

  it("stalls mid-stream after the configured tokens until the client aborts", async () => {
    await sim.backend("faulty").configure({ fault: { type: "hangMidStream", afterTokens: 2 } });
    const controller = new AbortController();
    const stream = await client("faulty").chat.completions.create(
      { model: "sim-model", messages: [{ role: "user", content: "a" }], stream: true },
      { signal: controller.signal },
    );
    setTimeout(() => controller.abort(), 300);
    const contents: string[] = [];
    // The SDK ends the iteration quietly when its signal aborts.
    for await (const chunk of stream) contents.push(chunk.choices[0]?.delta.content ?? "");
    expect(controller.signal.aborted).toBe(true);
    expect(contents).toEqual(["sim0 ", "sim1 "]);
    const record = await settled("faulty");
    expect(record).toMatchObject({ outcome: "aborted", fault: "hangMidStream" });
    expect(record.abortedAt! - record.receivedAt).toBeGreaterThanOrEqual(290);
  });

  it("breaks the stream with invalid JSON, which the SDK's iteration throws", async () => {
    await sim.backend("faulty").configure({ fault: { type: "malformedSse", afterTokens: 3 } });
    const stream = await client("faulty").completions.create({ model: "sim-model", prompt: "a", stream: true });
    const texts: string[] = [];
    await expect(
      (async () => {
        for await (const chunk of stream) texts.push(chunk.choices[0]?.text ?? "");
      })(),
    ).rejects.toThrow(/JSON/);
    expect(texts).toEqual(["sim0 ", "sim1 ", "sim2 "]);
  });

  it("ends a stream with the server's error event, which the SDK raises, or answers the status whole", async () => {
    await sim.backend("faulty").configure({ fault: { type: "errorEvent", afterTokens: 2, overloaded: true } });
    const stream = await client("faulty").completions.create({ model: "sim-model", prompt: "a", stream: true });
    const texts: string[] = [];
    const error = await (async () => {
      for await (const chunk of stream) texts.push(chunk.choices[0]?.text ?? "");
    })().catch((err: unknown) => err);
    expect(texts).toEqual(["sim0 ", "sim1 "]);
    expect(error).toBeInstanceOf(APIError);
    expect(String(error)).toContain("Overloaded (simulated)");
    const [record] = sim.backend("faulty").records();
    expect(record).toMatchObject({ outcome: "fault", fault: "errorEvent" });
    await sim.backend("faulty").configure({ fault: { type: "errorEvent", afterTokens: 0 } });
    const whole = await rejection(client("faulty").completions.create({ model: "sim-model", prompt: "a" }));
    expect(whole).toBeInstanceOf(InternalServerError);
  });

  it("ends a malformed stream after about a second without [DONE]", async () => {
    await sim.backend("faulty").configure({ fault: { type: "malformedSse", afterTokens: 1 } });
    const res = await fetch(`${sim.backend("faulty").url}/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "sim-model", prompt: "a", stream: true }),
    });
    const started = now();
    const body = await res.text();
    expect(now() - started).toBeGreaterThan(900);
    expect(body).toContain('data: {"choices": [\n\n');
    expect(body).not.toContain("[DONE]");
    expect(sim.backend("faulty").records()[0]).toMatchObject({ outcome: "fault", fault: "malformedSse" });
  });

  it("drips tokens at the configured interval", async () => {
    const backend = sim.backend("faulty");
    const ask = async () => {
      const stream = await client("faulty").completions.create({
        model: "sim-model",
        prompt: "a",
        max_tokens: 3,
        stream: true,
      });
      const texts: string[] = [];
      for await (const chunk of stream) if (chunk.choices[0]?.text) texts.push(chunk.choices[0].text);
      expect(texts).toEqual(["sim0 ", "sim1 ", "sim2 "]);
      const record = await settled("faulty");
      backend.clear();
      expect(record.outcome).toBe("completed");
      return record.tokenGapsMs;
    };
    // What the server scheduled is asserted, not when the tokens reached this process: on a busy
    // machine those gaps are stretched or squeezed by whatever else runs.
    expect(await ask()).toEqual([5, 1, 1]);
    await backend.configure({ fault: { type: "slowDrip", intervalMs: 80 } });
    expect(await ask()).toEqual([80, 80, 80]);
  });

  it("fails /health while unhealthy but still serves requests", async () => {
    const root = sim.backend("faulty").url.replace(/\/v1$/, "");
    const healthy = await fetch(`${root}/health`);
    expect([healthy.status, await healthy.text()]).toEqual([200, ""]);
    await sim.backend("faulty").configure({ fault: { type: "unhealthy" } });
    expect((await fetch(`${root}/health`)).status).toBe(503);
    const ok = await client("faulty").completions.create({ model: "sim-model", prompt: "a" });
    expect(ok.choices[0]?.finish_reason).toBe("stop");
  });
});

describe("load", () => {
  it("slows down past capacity, reports it in /metrics and refuses beyond maxConcurrency", async () => {
    const backend = sim.backend("small");
    const sdk = client("small");
    // Each stream stops after its first token and stays open, so the first three are in flight together
    // however slowly the machine sends the requests; the fourth finds three ahead of it.
    await backend.configure({ fault: { type: "hangMidStream", afterTokens: 1 } });
    const controllers: AbortController[] = [];
    try {
      const ask = async () => {
        const controller = new AbortController();
        controllers.push(controller);
        const stream = await sdk.completions.create(
          { model: "sim-model", prompt: "a", stream: true },
          { signal: controller.signal },
        );
        const first = await stream[Symbol.asyncIterator]().next();
        return first.value?.choices[0]?.text;
      };
      const firstTokens: unknown[] = [];
      for (let i = 0; i < 3; i++) {
        firstTokens.push(await ask());
        await waitFor(() => (backend.records().length === i + 1 ? true : undefined));
      }
      expect(firstTokens).toEqual(["sim0 ", "sim0 ", "sim0 "]);
      const refused = await ask().then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(refused).toBeInstanceOf(APIError);
      expect((refused as APIError).status).toBe(503);

      const metrics = await (await fetch(backend.url.replace(/\/v1$/, "/metrics"))).text();
      expect(metrics).toContain('vllm:num_requests_running{model_name="sim-model"} 2');
      expect(metrics).toContain('vllm:num_requests_waiting{model_name="sim-model"} 1');
      expect(backend.inflight()).toBe(3);
      expect(backend.peakConcurrency()).toBe(3);
      const records = backend.records();
      expect(records.map((r) => r.outcome)).toEqual(["pending", "pending", "pending", "refused"]);
      expect(records.map((r) => r.concurrencyAtArrival)).toEqual([1, 2, 3, 4]);
      // The third arrived with three in flight, so it ran at 2/3 of the speed: 150 ms to its first token became 225 ms.
      const third = records[2]!;
      expect(third.firstTokenAt! - third.receivedAt).toBeGreaterThanOrEqual(220);
    } finally {
      for (const controller of controllers) controller.abort();
      await backend.configure({ fault: { type: "none" } });
    }
    await waitFor(() => (backend.inflight() === 0 ? true : undefined));
    expect(
      backend
        .records()
        .slice(0, 3)
        .map((r) => r.outcome),
    ).toEqual(["aborted", "aborted", "aborted"]);
  });

  it("records a client abort, after the client aborted, and holds no stream", async () => {
    const backend = sim.backend("faulty");
    await backend.configure({ fault: { type: "slowDrip", intervalMs: 20 } });
    const sdk = client("faulty");
    const latencies: number[] = [];
    for (let i = 0; i < 5; i++) {
      backend.clear();
      const controller = new AbortController();
      const stream = await sdk.chat.completions.create(
        { model: "sim-model", messages: [{ role: "user", content: "a" }], stream: true },
        { signal: controller.signal },
      );
      let abortedAt = 0;
      // The SDK ends the iteration quietly when its signal aborts.
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content === "sim1 ") {
          abortedAt = now();
          controller.abort();
        }
      }
      const record = await settled("faulty");
      expect(record.outcome).toBe("aborted");
      expect(record.abortedAt).toBeGreaterThanOrEqual(abortedAt);
      latencies.push(record.abortedAt! - abortedAt);
    }
    // How soon (a few milliseconds on an idle machine) is for bench/gateway-cancel.ts: a loaded machine may take longer.
    expect(latencies).toHaveLength(5);
    expect(backend.inflight()).toBe(0);
  });

  it("serves 250 concurrent streams to the end", async () => {
    const wide = sim.backend("wide");
    const url = `${wide.url}/completions`;
    const body = JSON.stringify({ model: "sim-model", prompt: "a", stream: true });
    const texts = await Promise.all(
      Array.from({ length: 250 }, async () => (await fetch(url, { method: "POST", body })).text()),
    );
    for (const text of texts) {
      expect(text.match(/"text":"sim\d+ "/g)).toHaveLength(16);
      expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    }
    // How many of those overlapped depends on the machine's pace. Held open after their first token,
    // 250 streams are all streaming at once, whatever the pace, and the backend counts every one.
    await wide.configure({ fault: { type: "hangMidStream", afterTokens: 1 } });
    wide.resetPeak();
    const controller = new AbortController();
    try {
      await Promise.all(
        Array.from({ length: 250 }, async () => {
          const res = await fetch(url, { method: "POST", body, signal: controller.signal });
          const reader = res.body!.getReader();
          const decoder = new TextDecoder();
          let seen = "";
          while (!/"text":"sim0 "/.test(seen)) {
            const { value, done } = await reader.read();
            if (done) throw new Error(`the stream ended before its first token: ${seen}`);
            seen += decoder.decode(value, { stream: true });
          }
        }),
      );
      expect(wide.inflight()).toBe(250);
      expect(wide.peakConcurrency()).toBe(250);
    } finally {
      controller.abort();
      await wide.configure({ fault: { type: "none" } });
    }
  });
});

/** A request to the control API with its token. */
const controlFetch = (path: string, init: RequestInit = {}) =>
  fetch(`${sim.control}${path}`, {
    ...init,
    headers: { ...(init.headers as Record<string, string>), Authorization: `Bearer ${sim.controlToken}` },
  });

describe("control", () => {
  it("refuses every route without its token, or with another (401), and answers with it", async () => {
    const routes: [string, string][] = [
      ["GET", "/backends"],
      ["PATCH", "/backends/faulty"],
      ["GET", "/backends/faulty/records"],
      ["DELETE", "/backends/faulty/records"],
      ["POST", "/backends/faulty/reset-peak"],
      ["PUT", "/backends/faulty/agent-scripts"],
      ["GET", "/nowhere"],
    ];
    const token = sim.controlToken!;
    expect(token.length).toBeGreaterThanOrEqual(32);
    const refusals: Record<string, string>[] = [
      {},
      { Authorization: "Bearer" },
      { Authorization: `Bearer ${token.slice(0, -1)}` },
      { Authorization: `Bearer ${token}x` },
      { Authorization: `Basic ${token}` },
      { Authorization: token },
    ];
    const patch = JSON.stringify({ fault: { type: "status", status: 500 } });
    for (const [method, path] of routes)
      for (const headers of refusals) {
        const r = await fetch(`${sim.control}${path}`, { method, headers, body: method === "PATCH" ? patch : null });
        expect([method, path, r.status]).toEqual([method, path, 401]);
        expect(r.headers.get("www-authenticate")).toMatch(/^Bearer/);
        expect(await r.json()).toMatchObject({ error: { type: "AuthenticationError", code: 401 } });
      }
    // Nothing the refused requests asked for happened.
    expect(sim.backend("faulty").options().fault).toEqual({ type: "none" });
    expect((await controlFetch("/backends")).status).toBe(200);
    // Another simulator's token opens only its own.
    const other = await startSimulator({ control: { token: "another-token-0123456789" }, backends: [{ id: "x" }] });
    try {
      expect(other.controlToken).toBe("another-token-0123456789");
      const auth = (t: string) => ({ headers: { Authorization: `Bearer ${t}` } });
      expect((await fetch(`${other.control}/backends`, auth(token))).status).toBe(401);
      expect((await fetch(`${other.control}/backends`, auth("another-token-0123456789"))).status).toBe(200);
    } finally {
      await other.stop();
    }
    await expect(startSimulator({ control: { token: "short" }, backends: [] })).rejects.toThrow(/16 characters/);
  });

  it("changes options, lists records since a sequence number and clears them over HTTP", async () => {
    const listed = (await (await controlFetch("/backends")).json()) as { backends: { id: string; url: string }[] };
    expect(listed.backends.map((b) => b.id)).toEqual(sim.backends.map((b) => b.id));
    expect(listed.backends.find((b) => b.id === "faulty")?.url).toBe(sim.backend("faulty").url);

    const patched = await controlFetch("/backends/faulty", {
      method: "PATCH",
      body: JSON.stringify({ fault: { type: "status", status: 502 } }),
    });
    expect(await patched.json()).toMatchObject({ options: { fault: { type: "status", status: 502 } } });
    const err = await rejection(client("faulty").completions.create({ model: "sim-model", prompt: "a" }));
    expect((err as APIError).status).toBe(502);
    await client("faulty").models.list();

    const all = (await (await controlFetch("/backends/faulty/records")).json()) as { records: RequestRecord[] };
    expect(all.records.map((r) => [r.path, r.outcome, r.status])).toEqual([
      ["/v1/completions", "fault", 502],
      ["/v1/models", "completed", 200],
    ]);
    const since = all.records[0]!.seq;
    const later = (await (await controlFetch(`/backends/faulty/records?since=${since}`)).json()) as {
      records: RequestRecord[];
    };
    expect(later.records.map((r) => r.path)).toEqual(["/v1/models"]);

    const bad = await controlFetch("/backends/faulty", { method: "PATCH", body: '{"fault":{"type":"melt"}}' });
    expect(bad.status).toBe(400);
    expect((await controlFetch("/backends/nowhere/records")).status).toBe(404);

    expect(sim.backend("faulty").peakConcurrency()).toBe(1);
    const cleared = await controlFetch("/backends/faulty/records", { method: "DELETE" });
    expect(await cleared.json()).toMatchObject({ peak: 0 });
    expect(sim.backend("faulty").records()).toEqual([]);
    expect((await controlFetch("/backends/faulty/reset-peak", { method: "POST" })).status).toBe(200);
  });

  it("stops with a hanging request open", async () => {
    const own = await startSimulator({ backends: [{ id: "x", fault: { type: "hangBeforeHeaders" } }] });
    const pending = fetch(`${own.backend("x").url}/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "sim-model", prompt: "a" }),
    });
    await waitFor(() => (own.backend("x").inflight() === 1 ? true : undefined));
    // stop() has no timer to fall back on: it returns only once it has dropped the open request.
    await own.stop();
    await expect(pending).rejects.toThrow();
    expect(own.backend("x").records()[0]?.outcome).toBe("error");
  });

  it("runs as a process that prints its URLs and control token, and stops on SIGTERM", async () => {
    const dir = await mkdtemp(join(tmpdir(), "sextant-sim-"));
    const run = (token: string | undefined) => {
      const child = spawn("node_modules/.bin/tsx", ["gpu-backends/simulator/main.ts", "--config", config], {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, SIMULATOR_CONTROL_TOKEN: token },
      });
      let stderr = "";
      child.stderr.on("data", (data: Buffer) => (stderr += data));
      const exited = once(child, "exit");
      const line = once(createInterface({ input: child.stdout }), "line") as Promise<[string]>;
      return { child, exited, line, stderr: () => stderr };
    };
    const config = join(dir, "backends.json");
    try {
      await writeFile(config, JSON.stringify({ backends: [{ id: "eu-west-1", models: ["m"] }, { id: "us-east-1" }] }));
      const given = "operator-chosen-token-0123456789";
      const [minted, chosen, short] = [run(undefined), run(given), run("short")];
      expect(await short.exited).toEqual([2, null]);
      expect(short.stderr()).toContain("SIMULATOR_CONTROL_TOKEN must be 16 characters or more");
      for (const [started, token] of [
        [minted, undefined],
        [chosen, given],
      ] as const) {
        const ready = JSON.parse((await started.line)[0]) as {
          control: string;
          controlToken: string;
          backends: Record<string, string>;
        };
        expect(Object.keys(ready.backends)).toEqual(["eu-west-1", "us-east-1"]);
        if (token) expect(ready.controlToken).toBe(token);
        else expect(ready.controlToken).toMatch(/^[\w-]{43}$/);
        const models = await new OpenAI({ baseURL: ready.backends["eu-west-1"], apiKey: "x" }).models.list();
        expect(models.data.map((m) => m.id)).toEqual(["m"]);
        expect((await fetch(`${ready.control}/backends`)).status).toBe(401);
        const auth = { headers: { Authorization: `Bearer ${ready.controlToken}` } };
        expect((await fetch(`${ready.control}/backends`, auth)).status).toBe(200);
        started.child.kill("SIGTERM");
        expect(await started.exited).toEqual([0, null]);
        expect(started.stderr()).toContain("SIGTERM, stopping");
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
