import { describe, expect, it } from "vitest";
import { ApiError } from "../../workers/problem.js";
import { fromChatCompletion, ResponsesRequest, toChatRequest } from "../../workers/gateway/responses.js";
import { responsesStream } from "../../workers/gateway/responses-stream.js";
import { errorEvent } from "../../workers/gateway/legs.js";

const request = (fields: Record<string, unknown>) =>
  ResponsesRequest.parse({ model: "public", input: "Hi", ...fields });

/** The 400 a request gets: its detail and the fields it names. */
function refusal(fields: Record<string, unknown>): { detail: string; paths: string[] } {
  try {
    toChatRequest(request(fields));
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    expect(err.code).toBe("invalid_request");
    return { detail: err.detail, paths: (err.options.errors ?? []).map((e) => e.path) };
  }
  throw new Error("expected a refusal");
}

describe("Responses requests as chat completion requests", () => {
  it("puts the instructions first as the system prompt and maps the sampling, limit and format fields", () => {
    const schema = { type: "object", properties: { title: { type: "string" } } };
    expect(
      toChatRequest(
        request({
          instructions: "Be brief.",
          max_output_tokens: 64,
          temperature: 0.2,
          top_p: 0.9,
          reasoning: { effort: "low", summary: "auto" },
          text: { format: { type: "json_schema", name: "title", schema, strict: true } },
          user: "u-1",
          metadata: { a: "b" },
          store: true,
          include: ["reasoning.encrypted_content"],
        }),
      ),
    ).toEqual({
      model: "public",
      messages: [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
      ],
      max_completion_tokens: 64,
      temperature: 0.2,
      top_p: 0.9,
      reasoning_effort: "low",
      response_format: { type: "json_schema", json_schema: { name: "title", schema, strict: true } },
      user: "u-1",
    });
  });

  it("always asks for usage when streaming, and leaves a plain text format out", () => {
    expect(toChatRequest(request({ stream: true, text: { format: { type: "text" } } }))).toEqual({
      model: "public",
      messages: [{ role: "user", content: "Hi" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(toChatRequest(request({ text: { format: { type: "json_object" } } })).response_format).toEqual({
      type: "json_object",
    });
  });

  it("turns input items into messages: a turn's text and function calls become one assistant message", () => {
    const chat = toChatRequest(
      request({
        input: [
          { role: "developer", content: [{ type: "input_text", text: "Use tools." }] },
          {
            type: "message",
            role: "user",
            content: [
              { type: "input_text", text: "What is in " },
              { type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "low" },
            ],
          },
          { type: "reasoning", id: "rs_1", summary: [] },
          { id: "msg_1", role: "assistant", content: [{ type: "output_text", text: "Let me look.", annotations: [] }] },
          { type: "function_call", id: "fc_1", call_id: "call_1", name: "look", arguments: '{"a":1}' },
          { type: "function_call", call_id: "call_2", name: "look", arguments: "{}" },
          { type: "function_call_output", call_id: "call_1", output: "one" },
          { type: "function_call_output", call_id: "call_2", output: [{ type: "input_text", text: "two" }] },
          { type: "item_reference", id: "msg_0" },
          { role: "user", content: "Thanks" },
        ],
        tools: [{ type: "function", name: "look", parameters: { type: "object" }, strict: false }],
        tool_choice: { type: "function", name: "look" },
        parallel_tool_calls: false,
      }),
    );
    expect(chat.messages).toEqual([
      { role: "system", content: "Use tools." },
      {
        role: "user",
        content: [
          { type: "text", text: "What is in " },
          { type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } },
        ],
      },
      {
        role: "assistant",
        content: "Let me look.",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "look", arguments: '{"a":1}' } },
          { id: "call_2", type: "function", function: { name: "look", arguments: "{}" } },
        ],
      },
      { role: "tool", tool_call_id: "call_1", content: "one" },
      { role: "tool", tool_call_id: "call_2", content: "two" },
      { role: "user", content: "Thanks" },
    ]);
    expect(chat.tools).toEqual([
      { type: "function", function: { name: "look", parameters: { type: "object" }, strict: false } },
    ]);
    expect(chat.tool_choice).toEqual({ type: "function", function: { name: "look" } });
    expect(chat.parallel_tool_calls).toBe(false);
  });

  it("refuses what points at stored state, naming the field and saying why", () => {
    expect(refusal({ previous_response_id: "resp_1" })).toEqual({
      detail: expect.stringMatching(/^previous_response_id: this edge stores no responses.*whole conversation/),
      paths: ["previous_response_id"],
    });
    expect(refusal({ conversation: { id: "conv_1" } }).paths).toEqual(["conversation"]);
    expect(refusal({ background: true }).paths).toEqual(["background"]);
    expect(refusal({ prompt: { id: "pmpt_1" } }).paths).toEqual(["prompt"]);
    expect(toChatRequest(request({ background: false }))).toEqual(toChatRequest(request({})));
  });

  it("refuses built-in tools, other tool choices, files, unknown items and malformed ones", () => {
    expect(refusal({ tools: [{ type: "function", name: "f" }, { type: "web_search" }] })).toEqual({
      detail: expect.stringContaining('tools.1.type: "web_search" tools are built into'),
      paths: ["tools.1.type"],
    });
    expect(refusal({ tool_choice: { type: "allowed_tools", mode: "auto", tools: [] } }).paths).toEqual(["tool_choice"]);
    const file = { role: "user", content: [{ type: "input_file", file_id: "file_1" }] };
    expect(refusal({ input: [file] }).paths).toEqual(["input.0.content.0.type"]);
    const stored = { role: "user", content: [{ type: "input_image", file_id: "file_1" }] };
    expect(refusal({ input: [stored] }).paths).toEqual(["input.0.content.0.image_url"]);
    expect(refusal({ input: [{ type: "web_search_call", id: "ws_1" }] }).paths).toEqual(["input.0.type"]);
    expect(refusal({ input: [{ type: "function_call", name: "f", arguments: "{}" }] }).paths).toEqual([
      "input.0.call_id",
    ]);
    expect(refusal({ input: [{ type: "reasoning", summary: [] }] }).paths).toEqual(["input"]);
    expect(refusal({ text: { format: { type: "grammar" } } }).paths).toEqual(["text.format.type"]);
  });
});

const chatCompletion = (message: Record<string, unknown>, finish = "stop", usage?: Record<string, unknown>) => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  model: "backend-model",
  choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: finish }],
  usage: usage ?? { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 },
});

describe("chat completions as Response objects", () => {
  it("answers with a message, the public model, store false and the Responses usage", () => {
    const response = fromChatCompletion(
      chatCompletion({ content: "Hello" }, "stop", {
        prompt_tokens: 5,
        completion_tokens: 3,
        prompt_tokens_details: { cached_tokens: 2 },
        completion_tokens_details: { reasoning_tokens: 1 },
      }),
      request({ instructions: "Be brief.", temperature: 0.5 }),
    );
    expect(response).toMatchObject({
      id: expect.stringMatching(/^resp_[0-9a-f]{32}$/),
      object: "response",
      status: "completed",
      model: "public",
      store: false,
      instructions: "Be brief.",
      temperature: 0.5,
      previous_response_id: null,
      output: [
        {
          id: expect.stringMatching(/^msg_/),
          type: "message",
          status: "completed",
          role: "assistant",
          content: [{ type: "output_text", text: "Hello", annotations: [], logprobs: [] }],
        },
      ],
      usage: {
        input_tokens: 5,
        input_tokens_details: { cached_tokens: 2 },
        output_tokens: 3,
        output_tokens_details: { reasoning_tokens: 1 },
        total_tokens: 8,
      },
    });
  });

  it("gives reasoning, text and each tool call their own output items, in that order", () => {
    const response = fromChatCompletion(
      chatCompletion(
        {
          content: "Looking.",
          reasoning: "Hmm.",
          tool_calls: [
            { id: "call_a", type: "function", function: { name: "look", arguments: '{"q":1}' } },
            { id: "call_b", type: "function", function: { name: "see", arguments: "{}" } },
          ],
        },
        "tool_calls",
      ),
      request({}),
    );
    expect(response.output).toMatchObject([
      { type: "reasoning", summary: [{ type: "summary_text", text: "Hmm." }] },
      { type: "message", content: [{ type: "output_text", text: "Looking." }] },
      { type: "function_call", call_id: "call_a", name: "look", arguments: '{"q":1}', status: "completed" },
      { type: "function_call", call_id: "call_b", name: "see", arguments: "{}" },
    ]);
    const calls = fromChatCompletion(chatCompletion({ content: null, tool_calls: [] }), request({}));
    expect(calls.output).toEqual([]);
  });

  it("says why an answer stopped short, and carries a refusal as a refusal part", () => {
    expect(fromChatCompletion(chatCompletion({ content: "Hel" }, "length"), request({}))).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
    });
    const refused = fromChatCompletion(chatCompletion({ content: null, refusal: "No." }), request({}));
    expect(refused.output).toMatchObject([{ type: "message", content: [{ type: "refusal", refusal: "No." }] }]);
  });
});

/** A chat stream as the relay sends it, in pieces; `cancelled` records a cancel from the reader's side. */
function relay(pieces: string[], end: "close" | "error" | "open" = "close") {
  const state = { cancelled: false };
  const encoder = new TextEncoder();
  let next = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (next < pieces.length) controller.enqueue(encoder.encode(pieces[next++]));
      else if (end === "close") controller.close();
      else if (end === "error") controller.error(new Error("connection reset"));
    },
    cancel() {
      state.cancelled = true;
    },
  });
  return { stream, state };
}

const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", model: "backend-model", choices: [{ index: 0, delta, finish_reason: finish }], ...extra })}\n\n`;

const USAGE = `data: ${JSON.stringify({ id: "c1", choices: [], usage: { prompt_tokens: 4, completion_tokens: 2 } })}\n\n`;

async function translated(pieces: string[], end: "close" | "error" = "close", fields: Record<string, unknown> = {}) {
  const text = await new Response(responsesStream(relay(pieces, end).stream, request(fields))).text();
  const events = text
    .split("\n\n")
    .filter((block) => block.startsWith("event: "))
    .map((block) => {
      const [head, data] = block.split("\ndata: ");
      const value = JSON.parse(data!) as Record<string, unknown>;
      expect(value.type).toBe(head!.slice("event: ".length));
      return value;
    });
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  return { text, events, types: events.map((e) => String(e.type)) };
}

describe("chat completion streams as Responses streams", () => {
  it("sends the text as output_text deltas between the item's events, and usage in response.completed", async () => {
    const { text, events, types } = await translated([
      ": backend=east region=us-east\n\n",
      chunk({ role: "assistant", content: "Hel" }),
      ":\n\n",
      chunk({ content: "lo" }),
      chunk({}, "stop"),
      USAGE,
      "data: [DONE]\n\n",
    ]);
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    // The relay's comments pass through: clients ignore them, and they keep a gone client noticed.
    expect(text).toContain(": backend=east region=us-east\n\n");
    expect(text).not.toContain("[DONE]");
    expect(text).not.toContain("backend-model");
    const [created] = events;
    expect(created!.response).toMatchObject({ status: "in_progress", model: "public", output: [] });
    expect(events[6]).toMatchObject({ text: "Hello", content_index: 0, output_index: 0 });
    expect(events.at(-1)!.response).toMatchObject({
      status: "completed",
      model: "public",
      output: [{ type: "message", status: "completed", content: [{ type: "output_text", text: "Hello" }] }],
      usage: { input_tokens: 4, output_tokens: 2, total_tokens: 6 },
    });
  });

  it("streams reasoning, then text, then tool calls as items of their own", async () => {
    const call = (index: number, fields: Record<string, unknown>) => chunk({ tool_calls: [{ index, ...fields }] });
    const { events, types } = await translated([
      chunk({ reasoning_content: "Think." }),
      chunk({ content: "Sure." }),
      call(0, { id: "call_a", type: "function", function: { name: "look", arguments: "" } }),
      call(0, { function: { arguments: '{"q":' } }),
      call(1, { id: "call_b", type: "function", function: { name: "see", arguments: "{}" } }),
      call(0, { function: { arguments: "1}" } }),
      chunk({}, "tool_calls"),
      "data: [DONE]\n\n",
    ]);
    expect(types.filter((t) => t.endsWith(".delta"))).toEqual([
      "response.reasoning_summary_text.delta",
      "response.output_text.delta",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
    ]);
    const done = events.filter((e) => e.type === "response.function_call_arguments.done");
    expect(done).toMatchObject([
      { output_index: 2, name: "look", arguments: '{"q":1}' },
      { output_index: 3, name: "see", arguments: "{}" },
    ]);
    expect(events.at(-1)!.response).toMatchObject({
      status: "completed",
      output: [
        { type: "reasoning", summary: [{ type: "summary_text", text: "Think." }] },
        { type: "message", content: [{ type: "output_text", text: "Sure." }] },
        { type: "function_call", call_id: "call_a", name: "look", arguments: '{"q":1}', status: "completed" },
        { type: "function_call", call_id: "call_b", name: "see", arguments: "{}", status: "completed" },
      ],
    });
  });

  it("ends an answer cut by its limit with response.incomplete", async () => {
    const { events } = await translated([chunk({ content: "Hel" }), chunk({}, "length"), "data: [DONE]\n\n"]);
    expect(events.at(-1)).toMatchObject({
      type: "response.incomplete",
      response: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } },
    });
  });

  it("ends in response.failed and an error event on the relay's error event, an error chunk, an early end or a break", async () => {
    const endings: [string[], "close" | "error", RegExp][] = [
      [[errorEvent("upstream_failure", "The backend failed mid-stream.", "req-1")], "close", /failed mid-stream/],
      [[`data: ${JSON.stringify({ error: { message: "Boom", type: "InternalServerError" } })}\n\n`], "close", /Boom/],
      [[], "close", /ended before the answer was whole/],
      [[], "error", /connection reset/],
      [["data: {not json\n\n"], "close", /malformed/],
    ];
    for (const [tail, end, message] of endings) {
      const { events, types } = await translated([chunk({ content: "Hel" }), ...tail], end);
      expect(types.slice(-2)).toEqual(["response.failed", "error"]);
      expect(types).not.toContain("response.completed");
      const [failed, last] = events.slice(-2);
      // OpenAI's code for a failure on the server's side.
      expect(failed!.response).toMatchObject({
        status: "failed",
        error: { code: "server_error", message: expect.stringMatching(message) },
        output: [{ type: "message", status: "incomplete", content: [{ type: "output_text", text: "Hel" }] }],
      });
      expect(last).toMatchObject({
        code: "server_error",
        message: expect.stringMatching(message),
        error: { type: "server_error", code: "server_error", message: expect.stringMatching(message) },
      });
    }
  });

  it("cancels the relay's stream when the client cancels the response", async () => {
    const { stream, state } = relay([chunk({ content: "Hel" })], "open");
    const reader = responsesStream(stream, request({})).getReader();
    await reader.read();
    await reader.cancel(new Error("client went away"));
    expect(state.cancelled).toBe(true);
  });
});
