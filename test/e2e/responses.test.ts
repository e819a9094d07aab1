import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, stepCountIs, streamText, tool, type ModelMessage } from "ai";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { VIRGINIA, startGateway, until, type GatewayFixture } from "../support/gateway.js";

const POOL_SECRET = "pool-secret-0123456789abcdef";
const ANTHROPIC_SECRET = "sk-ant-pool-secret";

/** A function tool as the Responses API takes it. */
const WEATHER: OpenAI.Responses.FunctionTool = {
  type: "function",
  name: "weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: true,
};

/** The events of a raw Responses stream: each `event:` line's type with its JSON. */
function events(text: string): { event: string; data: Record<string, unknown> }[] {
  return text
    .split("\n\n")
    .filter((block) => block.startsWith("event: "))
    .map((block) => {
      const [head, data] = block.split("\ndata: ");
      return { event: head!.slice("event: ".length), data: JSON.parse(data!) as Record<string, unknown> };
    });
}

/**
 * `POST /v1/responses` through the real local edge to simulated backends (an OpenAI-compatible one
 * and one speaking Anthropic's Messages API), driven by each client unchanged but for its base URL:
 * the official `openai` SDK, the Vercel AI SDK's default OpenAI provider and LangChain's ChatOpenAI.
 */
describe("the Responses API on the gateway's chat pools", () => {
  let gw: GatewayFixture;

  beforeAll(async () => {
    gw = await startGateway(
      [
        { id: "vllm", models: ["sim-coder"], apiKey: POOL_SECRET, completionTokens: 6 },
        { id: "claude", kind: "anthropic", models: ["sim-claude"], apiKey: ANTHROPIC_SECRET },
      ],
      (urls) => {
        const endpoint = (id: string, kind: "vllm" | "anthropic", model: string, secret: string) => ({
          id,
          region: "us-east",
          ...VIRGINIA,
          url: urls[id]!,
          model,
          kind,
          capacity: 16,
          secret,
        });
        return {
          pools: {
            chat: { role: "chat", models: ["chat-sim"], endpoints: [endpoint("vllm", "vllm", "sim-coder", "SIM_KEY")] },
            claude: {
              role: "chat",
              models: ["claude-sim"],
              endpoints: [endpoint("claude", "anthropic", "sim-claude", "ANTHROPIC_KEY")],
            },
          },
          health: { probeIntervalMs: 500, snapshotMaxAgeMs: 200 },
        };
      },
      { SIM_KEY: POOL_SECRET, ANTHROPIC_KEY: ANTHROPIC_SECRET },
    );
  });
  afterAll(async () => gw?.stop());
  beforeEach(async () => {
    for (const b of gw.sim.backends) {
      await b.configure({ fault: { type: "none" }, tokensPerSecond: 200 });
      b.clear();
    }
  });

  const sent = (backend = "vllm") =>
    gw.sim
      .backend(backend)
      .records()
      .filter((r) => r.method === "POST")
      .map((r) => r.body as Record<string, unknown>);

  describe("with the openai SDK", () => {
    it("answers a whole response with the instructions as the system prompt, the public model and usage", async () => {
      const response = await gw.openai().responses.create({
        model: "chat-sim",
        instructions: "Answer briefly.",
        input: "Say something.",
        max_output_tokens: 4,
        store: true,
        metadata: { ticket: "T-1" },
        user: "user-1",
      });
      expect(response).toMatchObject({
        object: "response",
        id: expect.stringMatching(/^resp_/),
        status: "incomplete",
        incomplete_details: { reason: "max_output_tokens" },
        model: "chat-sim",
        store: false,
        metadata: { ticket: "T-1" },
        usage: { input_tokens: 8, output_tokens: 4, total_tokens: 12 },
      });
      expect(response.output).toEqual([
        {
          id: expect.stringMatching(/^msg_/),
          type: "message",
          status: "completed",
          role: "assistant",
          content: [{ type: "output_text", text: "sim0 sim1 sim2 sim3 ", annotations: [], logprobs: [] }],
        },
      ]);
      expect(response.output_text).toBe("sim0 sim1 sim2 sim3 ");
      expect(sent()).toEqual([
        {
          model: "sim-coder",
          messages: [
            { role: "system", content: "Answer briefly." },
            { role: "user", content: "Say something." },
          ],
          max_completion_tokens: 4,
          user: "user-1",
        },
      ]);
    });

    it("streams the semantic events in order, numbered, ending with the completed response and its usage", async () => {
      const stream = await gw.openai().responses.create({ model: "chat-sim", input: "Hello", stream: true });
      const seen: OpenAI.Responses.ResponseStreamEvent[] = [];
      for await (const event of stream) seen.push(event);
      expect(seen.map((e) => e.sequence_number)).toEqual(seen.map((_, i) => i));
      expect([...new Set(seen.map((e) => e.type))]).toEqual([
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
      ]);
      const deltas = seen.flatMap((e) => (e.type === "response.output_text.delta" ? [e.delta] : []));
      expect(deltas).toEqual(["sim0 ", "sim1 ", "sim2 ", "sim3 ", "sim4 ", "sim5 "]);
      const completed = seen.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
      expect(completed.response).toMatchObject({ status: "completed", model: "chat-sim", store: false });
      expect(completed.response.usage).toMatchObject({ input_tokens: 2, output_tokens: 6, total_tokens: 8 });
      // Usage is asked for upstream, whatever the client said.
      expect(sent()[0]).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    });

    it("gives responses.stream() its deltas and final response", async () => {
      const stream = gw.openai().responses.stream({ model: "chat-sim", input: "Hello", instructions: "Be kind." });
      let text = "";
      stream.on("response.output_text.delta", (event) => (text += event.delta));
      const final = await stream.finalResponse();
      expect(final.output_text).toBe("sim0 sim1 sim2 sim3 sim4 sim5 ");
      expect(text).toBe(final.output_text);
      expect(final.id).toMatch(/^resp_/);
    });

    it("round-trips a function call: the call, its output sent back, then the answer", async () => {
      const first = await gw.openai().responses.create({
        model: "chat-sim",
        input: "What is the weather in Paris?",
        tools: [WEATHER],
        max_output_tokens: 2,
      });
      const [call] = first.output;
      expect(call).toEqual({
        id: expect.stringMatching(/^fc_/),
        type: "function_call",
        status: "completed",
        call_id: expect.stringMatching(/^call_sim_/),
        name: "weather",
        arguments: '{"city":"sim0 sim1 "}',
      });
      if (call?.type !== "function_call") throw new Error("expected a function call");
      const second = await gw.openai().responses.create({
        model: "chat-sim",
        input: [
          { role: "user", content: "What is the weather in Paris?" },
          call,
          { type: "function_call_output", call_id: call.call_id, output: "Sunny, 21 °C" },
        ],
        tools: [WEATHER],
        max_output_tokens: 2,
      });
      expect(second.output_text).toBe("sim0 sim1 ");
      const [, chat] = sent();
      expect(chat!.tools).toEqual([
        {
          type: "function",
          function: {
            name: "weather",
            description: WEATHER.description,
            parameters: WEATHER.parameters,
            strict: true,
          },
        },
      ]);
      expect(chat!.messages).toEqual([
        { role: "user", content: "What is the weather in Paris?" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: call.call_id, type: "function", function: { name: "weather", arguments: call.arguments } },
          ],
        },
        { role: "tool", tool_call_id: call.call_id, content: "Sunny, 21 °C" },
      ]);
    });

    it("streams a function call's arguments as deltas", async () => {
      const stream = gw.openai().responses.stream({ model: "chat-sim", input: "Weather?", tools: [WEATHER] });
      const deltas: string[] = [];
      stream.on("response.function_call_arguments.delta", (event) => deltas.push(event.delta));
      const final = await stream.finalResponse();
      expect(final.output).toMatchObject([
        { type: "function_call", name: "weather", arguments: '{"city":"sim0 sim1 sim2 sim3 sim4 sim5 "}' },
      ]);
      expect(deltas.join("")).toBe('{"city":"sim0 sim1 sim2 sim3 sim4 sim5 "}');
      expect(deltas.length).toBeGreaterThan(2);
    });

    it("stops the backend's request when the client aborts the stream", async () => {
      await gw.sim.backend("vllm").configure({ tokensPerSecond: 5 });
      const controller = new AbortController();
      const stream = await gw
        .openai()
        .responses.create({ model: "chat-sim", input: "long", stream: true }, { signal: controller.signal });
      const iterator = stream[Symbol.asyncIterator]();
      let event = await iterator.next();
      while (!event.done && event.value.type !== "response.output_text.delta") event = await iterator.next();
      controller.abort();
      await iterator.next().catch(() => undefined);
      const record = await until("the backend to see the abort", () =>
        gw.sim
          .backend("vllm")
          .records()
          .find((r) => r.abortedAt),
      );
      expect(record.outcome).toBe("aborted");
    });

    it("raises a backend that breaks mid-stream as an error after the text so far, never a short answer", async () => {
      await gw.sim.backend("vllm").configure({ fault: { type: "errorEvent", afterTokens: 2 } });
      const stream = await gw.openai().responses.create({ model: "chat-sim", input: "Hi", stream: true });
      let text = "";
      const types: string[] = [];
      const error = await (async () => {
        for await (const event of stream) {
          types.push(event.type);
          if (event.type === "response.output_text.delta") text += event.delta;
        }
      })().catch((err: unknown) => err);
      expect(text).toBe("sim0 sim1 ");
      expect(error).toBeInstanceOf(OpenAI.APIError);
      expect(String(error)).toContain("Internal error (simulated)");
      expect(types).toContain("response.failed");
      expect(types).not.toContain("response.completed");
    });

    it("answers through an Anthropic pool, with its thinking as a reasoning item", async () => {
      const response = await gw.openai().responses.create({
        model: "claude-sim",
        input: "Why?",
        reasoning: { effort: "low" },
        max_output_tokens: 2000,
      });
      expect(response.output).toMatchObject([
        { type: "reasoning", summary: [{ type: "summary_text", text: "Thinking (simulated)." }] },
        { type: "message", content: [{ type: "output_text", text: expect.stringMatching(/^sim0 /) }] },
      ]);
      expect(sent("claude")[0]).toMatchObject({ thinking: { type: "enabled", budget_tokens: 1024 } });
      const stream = gw.openai().responses.stream({ model: "claude-sim", input: "Why?", reasoning: { effort: "low" } });
      let thought = "";
      stream.on("response.reasoning_summary_text.delta", (event) => (thought += event.delta));
      expect((await stream.finalResponse()).output_text).toMatch(/^sim0 /);
      expect(thought).toBe("Thinking (simulated).");
    });
  });

  describe("over raw HTTP", () => {
    it("frames the stream as OpenAI does and ends a broken one with response.failed and an error event", async () => {
      const ok = await gw.post("/responses", { model: "chat-sim", input: "Hi", stream: true, max_output_tokens: 2 });
      expect(ok.headers.get("content-type")).toContain("text/event-stream");
      const whole = events(await ok.text());
      expect(whole.every(({ event, data }) => data.type === event)).toBe(true);
      expect(whole.at(-1)!.event).toBe("response.incomplete");

      await gw.sim.backend("vllm").configure({ fault: { type: "malformedSse", afterTokens: 2 } });
      const raw = await gw.post("/responses", { model: "chat-sim", input: "Hi", stream: true });
      expect(raw.status).toBe(200);
      const broken = events(await raw.text());
      const failed = broken.find((e) => e.event === "response.failed")!;
      expect(failed.data.response).toMatchObject({
        status: "failed",
        error: { code: "server_error", message: expect.stringContaining("malformed") },
        output: [{ type: "message", status: "incomplete", content: [{ text: "sim0 sim1 " }] }],
      });
      expect(broken.at(-1)).toMatchObject({ event: "error", data: { code: "server_error" } });
      expect(broken.map((e) => e.event)).not.toContain("response.completed");
    });

    it("answers what it cannot serve with problem+json errors naming the field", async () => {
      const problem = async (body: unknown, status: number, detail: RegExp, init: RequestInit = {}) => {
        const response = await fetch(`${gw.edge.baseURL}/v1/responses`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${gw.apiKey}` },
          body: typeof body === "string" ? body : JSON.stringify(body),
          ...init,
        });
        expect(response.status).toBe(status);
        expect(response.headers.get("content-type")).toBe("application/problem+json");
        const json = (await response.json()) as { detail: string; error: { message: string } };
        expect(json.detail).toMatch(detail);
        expect(json.error.message).toBe(json.detail);
      };
      await problem({ model: "chat-sim", input: "x" }, 401, /API key/, {
        headers: { "content-type": "application/json" },
      });
      await problem('{"model": "chat-sim", "input":', 400, /not valid JSON/);
      await problem({ model: "no-such-model", input: "x" }, 404, /No model named no-such-model/);
      await problem({ model: "chat-sim", input: "x", previous_response_id: "resp_1" }, 400, /stores no responses/);
      await problem(
        { model: "chat-sim", input: "x", tools: [{ type: "web_search" }] },
        400,
        /tools\.0\.type: "web_search"/,
      );
      await problem({ model: "chat-sim", input: "x", background: true }, 400, /^background: /);
      await problem({ model: "chat-sim", input: "x", conversation: "conv_1" }, 400, /^conversation: /);
      await problem({ model: "chat-sim", input: [{ type: "computer_call_output" }] }, 400, /input\.0\.type/);
      await problem({ model: "chat-sim", input: "x".repeat(1_048_577) }, 413, /limit/);
      await expect(
        gw.openai({ apiKey: "sxt_not-a-real-key" }).responses.create({ model: "chat-sim", input: "x" }),
      ).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
      expect(sent()).toEqual([]);
    });
  });

  describe("n choices on chat completions", () => {
    it("returns n choices from an OpenAI-compatible pool, streamed or whole, with the tokens of all of them", async () => {
      const whole = await gw.openai().chat.completions.create({
        model: "chat-sim",
        messages: [{ role: "user", content: "Two ways, please." }],
        n: 2,
        max_tokens: 3,
      });
      expect(whole.choices.map((c) => [c.index, c.message.content])).toEqual([
        [0, "sim0 sim1 sim2 "],
        [1, "sim0 sim1 sim2 "],
      ]);
      expect(whole.usage).toMatchObject({ completion_tokens: 6 });
      expect(sent()[0]).toMatchObject({ n: 2 });
      const stream = await gw.openai().chat.completions.create({
        model: "chat-sim",
        messages: [{ role: "user", content: "Two ways, please." }],
        n: 2,
        max_tokens: 3,
        stream: true,
      });
      const texts = ["", ""];
      for await (const chunk of stream) for (const c of chunk.choices) texts[c.index] += c.delta.content ?? "";
      expect(texts).toEqual(["sim0 sim1 sim2 ", "sim0 sim1 sim2 "]);
    });

    it("refuses n above 1 on an Anthropic pool, and n above the edge's maximum anywhere", async () => {
      const refused = await gw
        .openai()
        .chat.completions.create({ model: "claude-sim", messages: [{ role: "user", content: "x" }], n: 2 })
        .catch((err: unknown) => err);
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      const error = refused as InstanceType<typeof OpenAI.APIError>;
      expect(error.headers?.get("content-type")).toBe("application/problem+json");
      expect(error.message).toContain("Anthropic's Messages API, which cannot take `n` above 1");
      const tooMany = await gw.post("/chat/completions", {
        model: "chat-sim",
        messages: [{ role: "user", content: "x" }],
        n: 9,
      });
      expect(tooMany.status).toBe(400);
      expect(((await tooMany.json()) as { detail: string }).detail).toContain("n: ");
      expect(sent("claude")).toEqual([]);
      expect(sent()).toEqual([]);
    });
  });

  describe("with the Vercel AI SDK's default OpenAI provider", () => {
    const model = (id: string) => createOpenAI({ baseURL: `${gw.edge.baseURL}/v1`, apiKey: gw.apiKey })(id);
    const weather = tool({
      description: "The weather in a city",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => `Sunny in ${city.trim()}`,
    });

    it("streams text with streamText", async () => {
      const result = streamText({ model: model("chat-sim"), prompt: "Hello", maxOutputTokens: 3 });
      let text = "";
      for await (const piece of result.textStream) text += piece;
      expect(text).toBe("sim0 sim1 sim2 ");
      expect(await result.finishReason).toBe("length");
      expect((await result.usage).outputTokens).toBe(3);
    });

    it("calls a tool and answers with its result in generateText", async () => {
      const result = await generateText({
        model: model("chat-sim"),
        prompt: "What is the weather in Paris?",
        tools: { weather },
        stopWhen: stepCountIs(3),
        maxOutputTokens: 2,
      });
      expect(result.steps).toHaveLength(2);
      expect(result.steps[0]!.toolCalls).toMatchObject([{ toolName: "weather", input: { city: "sim0 sim1 " } }]);
      expect(result.text).toBe("sim0 sim1 ");
      const [, second] = sent();
      expect((second!.messages as { role: string; content: unknown }[]).at(-1)).toMatchObject({
        role: "tool",
        content: expect.stringContaining("Sunny in sim0 sim1"),
      });
    });

    it("carries on a conversation from response.messages, its earlier answers whole once store is off", async () => {
      const first = await generateText({ model: model("chat-sim"), prompt: "Hello", maxOutputTokens: 2 });
      const messages: ModelMessage[] = [
        { role: "user", content: "Hello" },
        ...first.response.messages,
        { role: "user", content: "And then?" },
      ];
      // By default (store on) the earlier answer goes as a reference to a stored item: left out.
      const inputs: unknown[] = [];
      const watched = createOpenAI({
        baseURL: `${gw.edge.baseURL}/v1`,
        apiKey: gw.apiKey,
        fetch: async (url, init) => {
          inputs.push((JSON.parse(String(init?.body)) as { input: unknown }).input);
          return fetch(url, init);
        },
      })("chat-sim");
      expect((await generateText({ model: watched, messages, maxOutputTokens: 2 })).text).toBe("sim0 sim1 ");
      expect(inputs[0]).toContainEqual({ type: "item_reference", id: expect.stringMatching(/^msg_/) });
      const stored = { openai: { store: false } };
      await generateText({ model: model("chat-sim"), messages, maxOutputTokens: 2, providerOptions: stored });
      const [, referenced, whole] = sent();
      expect(referenced!.messages).toEqual([
        { role: "user", content: [{ type: "text", text: "Hello" }] },
        { role: "user", content: [{ type: "text", text: "And then?" }] },
      ]);
      expect(whole!.messages).toEqual([
        { role: "user", content: [{ type: "text", text: "Hello" }] },
        { role: "assistant", content: "sim0 sim1 " },
        { role: "user", content: [{ type: "text", text: "And then?" }] },
      ]);
    });
  });

  describe("with LangChain's ChatOpenAI on the Responses API", () => {
    it("streams a chat answer and its usage", async () => {
      const chat = new ChatOpenAI({
        useResponsesApi: true,
        configuration: { baseURL: `${gw.edge.baseURL}/v1` },
        apiKey: gw.apiKey,
        model: "chat-sim",
        maxTokens: 3,
        maxRetries: 0,
      });
      let text = "";
      let usage: unknown;
      for await (const chunk of await chat.stream("Hello")) {
        text += chunk.text;
        usage = chunk.usage_metadata ?? usage;
      }
      expect(text).toBe("sim0 sim1 sim2 ");
      expect(usage).toMatchObject({ output_tokens: 3 });
      expect(sent()[0]).toMatchObject({ stream: true, max_completion_tokens: 3 });
    });
  });
});
