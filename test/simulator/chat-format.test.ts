import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimulator, type Simulator } from "../../gpu-backends/simulator/simulator.js";

let sim: Simulator;
let client: OpenAI;

beforeAll(async () => {
  sim = await startSimulator({
    backends: [{ id: "vllm", ttftMs: 1, tokensPerSecond: 5000, completionTokens: 3 }],
  });
  client = new OpenAI({ baseURL: sim.backend("vllm").url, apiKey: "sk-unused", maxRetries: 0 });
});
afterAll(() => sim?.stop());

const weather: OpenAI.ChatCompletionTool = {
  type: "function",
  function: {
    name: "weather",
    parameters: { type: "object", properties: { days: { type: "integer" }, city: { type: "string" } } },
  },
};
const lookup: OpenAI.ChatCompletionTool = { type: "function", function: { name: "lookup" } };
const ask: OpenAI.ChatCompletionMessageParam = { role: "user", content: "Weather in Paris?" };
const called: OpenAI.ChatCompletionMessageParam[] = [
  ask,
  {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: '{"city":"Paris"}' } }],
  },
  { role: "tool", tool_call_id: "call_1", content: "Sunny" },
];

describe("the simulator's chat answers", () => {
  it("calls an offered tool after the user's message, giving its first string property the tokens", async () => {
    const whole = await client.chat.completions.create({ model: "sim-model", messages: [ask], tools: [weather] });
    expect(whole.choices[0]).toMatchObject({
      finish_reason: "tool_calls",
      message: {
        content: null,
        tool_calls: [
          {
            id: expect.stringMatching(/^call_sim_/),
            type: "function",
            function: { name: "weather", arguments: '{"city":"sim0 sim1 sim2 "}' },
          },
        ],
      },
    });
  });

  it("answers in text after a tool result, when told none, and calls the named tool when told to", async () => {
    const after = await client.chat.completions.create({ model: "sim-model", messages: called, tools: [weather] });
    expect(after.choices[0]!.message.content).toBe("sim0 sim1 sim2 ");
    const none = await client.chat.completions.create({
      model: "sim-model",
      messages: [ask],
      tools: [weather],
      tool_choice: "none",
    });
    expect(none.choices[0]!.message.content).toBe("sim0 sim1 sim2 ");
    const named = await client.chat.completions.create({
      model: "sim-model",
      messages: called,
      tools: [weather, lookup],
      tool_choice: { type: "function", function: { name: "lookup" } },
    });
    const [call] = named.choices[0]!.message.tool_calls!;
    expect(call!.type === "function" && call!.function).toEqual({
      name: "lookup",
      arguments: '{"text":"sim0 sim1 sim2 "}',
    });
  });

  it("streams a call's arguments a token at a time, which the SDK assembles", async () => {
    const stream = client.chat.completions.stream({ model: "sim-model", messages: [ask], tools: [weather] });
    const pieces: string[] = [];
    stream.on("chunk", (chunk) => {
      const args = chunk.choices[0]?.delta.tool_calls?.[0]?.function?.arguments;
      if (args) pieces.push(args);
    });
    const final = await stream.finalChatCompletion();
    expect(pieces).toEqual(['{"city":"sim0 ', "sim1 ", "sim2 ", '"}']);
    expect(final.choices[0]!.message.tool_calls![0]).toMatchObject({
      function: { name: "weather", arguments: '{"city":"sim0 sim1 sim2 "}' },
    });
    expect(final.choices[0]!.finish_reason).toBe("tool_calls");
  });

  it("answers n choices, each its own chunk when streamed, with usage counting all of them", async () => {
    const whole = await client.chat.completions.create({ model: "sim-model", messages: [ask], n: 3 });
    expect(whole.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(whole.usage).toMatchObject({ completion_tokens: 9 });
    const stream = await client.chat.completions.create({
      model: "sim-model",
      messages: [ask],
      n: 2,
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts = ["", ""];
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      expect(chunk.choices.length).toBeLessThanOrEqual(1);
      for (const choice of chunk.choices) texts[choice.index] += choice.delta.content ?? "";
      usage = chunk.usage ?? usage;
    }
    expect(texts).toEqual(["sim0 sim1 sim2 ", "sim0 sim1 sim2 "]);
    expect(usage).toMatchObject({ completion_tokens: 6 });
  });
});
