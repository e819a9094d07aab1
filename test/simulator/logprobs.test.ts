/**
 * The simulator's log-probabilities and token ids, in the shape the `openai` SDK types them and vLLM
 * sends them (`logprobs`, `top_logprobs`, `return_tokens_as_token_ids`, `return_token_ids`), streamed
 * and whole, and the same either way.
 */
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SIMULATED_NOTE, simulatedTokenId, simulatedTokens } from "../../gpu-backends/simulator/logprobs.js";
import { startSimulator, type Simulator } from "../../gpu-backends/simulator/simulator.js";

let sim: Simulator;
let client: OpenAI;

beforeAll(async () => {
  sim = await startSimulator({
    backends: [{ id: "vllm", ttftMs: 1, tokensPerSecond: 5000, completionTokens: 4 }],
  });
  client = new OpenAI({ baseURL: sim.backend("vllm").url, apiKey: "sk-unused", maxRetries: 0 });
});
afterAll(() => sim?.stop());

const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Fix the failing test." }];
type TokenLogprob = OpenAI.Chat.Completions.ChatCompletionTokenLogprob;
/** vLLM's fields beyond OpenAI's. */
type VllmChoice = { token_ids?: number[] };
type VllmAnswer = { prompt_token_ids?: number[]; simulated?: string };

/** Every key of an entry is one the SDK's type has, with the type it says. */
function expectSdkShape(entry: TokenLogprob, top: number) {
  expect(Object.keys(entry).sort()).toEqual(["bytes", "logprob", "token", "top_logprobs"]);
  expect(typeof entry.token).toBe("string");
  expect(entry.logprob).toBeLessThanOrEqual(0);
  expect(entry.bytes).toEqual([...new TextEncoder().encode(entry.token)]);
  expect(entry.top_logprobs).toHaveLength(top);
  for (const alt of entry.top_logprobs) expect(Object.keys(alt).sort()).toEqual(["bytes", "logprob", "token"]);
}

describe("the simulator's log-probabilities", () => {
  it("answers logprobs and top_logprobs whole, one entry per token of the answer, labelled simulated", async () => {
    const whole = await client.chat.completions.create({
      model: "sim-model",
      messages,
      logprobs: true,
      top_logprobs: 2,
    });
    const choice = whole.choices[0]!;
    const content: TokenLogprob[] = choice.logprobs!.content!;
    expect(content.map((e) => e.token).join("")).toBe(choice.message.content);
    expect(content.map((e) => e.token)).toEqual(simulatedTokens(choice.message.content!));
    for (const entry of content) expectSdkShape(entry, 2);
    expect(content[0]!.top_logprobs[0]).toEqual({
      token: content[0]!.token,
      logprob: content[0]!.logprob,
      bytes: content[0]!.bytes,
    });
    expect((whole as unknown as VllmAnswer).simulated).toBe(SIMULATED_NOTE);
    // Without the request's fields, nothing of it.
    const plain = await client.chat.completions.create({ model: "sim-model", messages });
    expect(plain.choices[0]!.logprobs).toBeNull();
    expect((plain as unknown as VllmAnswer).simulated).toBeUndefined();
  });

  it("gives tokens as token_id:<n>, token ids and prompt token ids as vLLM does, the same streamed and whole", async () => {
    const body = {
      model: "sim-model",
      messages,
      logprobs: true,
      return_tokens_as_token_ids: true,
      return_token_ids: true,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming;
    const whole = await client.chat.completions.create(body);
    const choice = whole.choices[0]! as OpenAI.ChatCompletion.Choice & VllmChoice;
    const ids = simulatedTokens(choice.message.content!).map(simulatedTokenId);
    expect(choice.token_ids).toEqual(ids);
    expect(choice.logprobs!.content!.map((e) => e.token)).toEqual(ids.map((id) => `token_id:${id}`));
    for (const entry of choice.logprobs!.content!) expectSdkShape(entry, 0);
    const prompt = (whole as unknown as VllmAnswer).prompt_token_ids!;
    expect(prompt.length).toBeGreaterThan(0);

    const stream = await client.chat.completions.create({ ...body, stream: true });
    const streamed: TokenLogprob[] = [];
    const streamedIds: number[] = [];
    const prompts: number[][] = [];
    let text = "";
    for await (const chunk of stream) {
      const c = chunk.choices[0] as (OpenAI.ChatCompletionChunk.Choice & VllmChoice) | undefined;
      const p = (chunk as unknown as VllmAnswer).prompt_token_ids;
      if (p) prompts.push(p);
      if (!c) continue;
      text += c.delta.content ?? "";
      streamed.push(...(c.logprobs?.content ?? []));
      streamedIds.push(...(c.token_ids ?? []));
    }
    expect(text).toBe(choice.message.content);
    expect(streamed).toEqual(choice.logprobs!.content);
    expect(streamedIds).toEqual(ids);
    // The prompt's ids on the first chunk only.
    expect(prompts).toEqual([prompt]);
  });

  it("covers a tool call's arguments, and refuses what vLLM refuses", async () => {
    const tools: OpenAI.ChatCompletionTool[] = [
      {
        type: "function",
        function: { name: "run", parameters: { type: "object", properties: { cmd: { type: "string" } } } },
      },
    ];
    const whole = await client.chat.completions.create({ model: "sim-model", messages, tools, logprobs: true });
    const call = whole.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    const args = call.function.arguments;
    expect(whole.choices[0]!.logprobs!.content!.map((e) => e.token).join("")).toBe(args);

    await expect(
      client.chat.completions.create({ model: "sim-model", messages, top_logprobs: 2 }),
    ).rejects.toMatchObject({
      status: 400,
    });
    await expect(
      client.chat.completions.create({ model: "sim-model", messages, logprobs: true, top_logprobs: 21 }),
    ).rejects.toMatchObject({ status: 400 });
  });
});
