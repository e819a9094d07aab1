/**
 * A streamed chat completion, as the gateway relays it, turned into the Responses API's stream:
 * typed events (`event: <type>` and its JSON with a `sequence_number`) from `response.created` to
 * `response.completed`. What the relay says besides its chunks is read as it means: its comments
 * (the heartbeat, the serving backend) pass through, which keeps a gone client noticed between
 * tokens; an error event or an `{"error": …}` chunk, a stream that ends before `[DONE]` or breaks,
 * ends in `response.failed` and an `error` event, never a short answer that looks whole. The
 * chunks' `model` and `id` are the backend's business: the Response carries its own.
 */
import { createParser } from "eventsource-parser";
import {
  functionCallItem,
  INCOMPLETE,
  messageItem,
  newId,
  reasoningItem,
  responseObject,
  responsesUsage,
  textPart,
  type ResponsesRequest,
} from "./responses.js";

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** An output item being streamed: where it sits in `output`, and what it holds so far. */
interface Open {
  index: number;
  id: string;
  text: string;
}

interface OpenMessage extends Open {
  /** The part being streamed (`output_text` or `refusal`) and the parts already done. */
  kind: "output_text" | "refusal";
  parts: Json[];
}

interface OpenCall extends Open {
  callId: string;
  name: string;
}

const DELTA_EVENTS = {
  output_text: { delta: "response.output_text.delta", done: "response.output_text.done", field: "text" },
  refusal: { delta: "response.refusal.delta", done: "response.refusal.done", field: "refusal" },
} as const;

const encoder = new TextEncoder();

/** Translates one chat completion stream into Responses events; `push` takes the SSE text to send. */
class Translator {
  private sequence = 0;
  private readonly output: Json[] = [];
  private reasoning: Open | undefined;
  private message: OpenMessage | undefined;
  private readonly calls = new Map<number, OpenCall>();
  private usage: Json | null = null;
  private finish: string | undefined;
  /** Set once the response has ended: `completed` (or incomplete), or `failed`. */
  ended: "completed" | "failed" | undefined;

  constructor(
    private readonly request: ResponsesRequest,
    private readonly push: (text: string) => void,
    private readonly id = newId("resp"),
    private readonly createdAt = Math.floor(Date.now() / 1000),
  ) {}

  private emit(type: string, fields: Json): void {
    this.push(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.sequence++, ...fields })}\n\n`);
  }

  private response(fields: Json): Json {
    return responseObject(this.id, this.createdAt, this.request, fields);
  }

  start(): void {
    this.emit("response.created", { response: this.response({}) });
    this.emit("response.in_progress", { response: this.response({}) });
  }

  comment(text: string): void {
    if (!this.ended) this.push(text ? `: ${text}\n\n` : ":\n\n");
  }

  /** One chat completion chunk. */
  chunk(value: Json): void {
    if (this.ended) return;
    if (value.error !== undefined && value.error !== null) return this.fail(value.error);
    const usage = responsesUsage(value.usage);
    if (usage) this.usage = usage;
    const choices = Array.isArray(value.choices) ? value.choices.filter(isObject) : [];
    const choice = choices.find((c) => c.index === 0) ?? choices[0];
    if (!choice) return;
    const delta = isObject(choice.delta) ? choice.delta : {};
    const thought = [delta.reasoning, delta.reasoning_content].find((t) => typeof t === "string" && t !== "");
    if (typeof thought === "string") this.think(thought);
    if (typeof delta.content === "string" && delta.content) this.say("output_text", delta.content);
    if (typeof delta.refusal === "string" && delta.refusal) this.say("refusal", delta.refusal);
    if (Array.isArray(delta.tool_calls)) for (const call of delta.tool_calls.filter(isObject)) this.call(call);
    if (typeof choice.finish_reason === "string") this.finish = choice.finish_reason;
  }

  private add(item: Json): number {
    const index = this.output.length;
    this.output.push(item);
    this.emit("response.output_item.added", { output_index: index, item });
    return index;
  }

  private think(text: string): void {
    this.closeMessage();
    if (!this.reasoning) {
      const id = newId("rs");
      const index = this.add(reasoningItem(id, undefined));
      this.reasoning = { index, id, text: "" };
      const part = { type: "summary_text", text: "" };
      this.emit("response.reasoning_summary_part.added", { item_id: id, output_index: index, summary_index: 0, part });
    }
    const { id, index } = this.reasoning;
    this.reasoning.text += text;
    this.emit("response.reasoning_summary_text.delta", {
      item_id: id,
      output_index: index,
      summary_index: 0,
      delta: text,
    });
  }

  private closeReasoning(): void {
    const open = this.reasoning;
    if (!open) return;
    this.reasoning = undefined;
    const ids = { item_id: open.id, output_index: open.index, summary_index: 0 };
    this.emit("response.reasoning_summary_text.done", { ...ids, text: open.text });
    this.emit("response.reasoning_summary_part.done", { ...ids, part: { type: "summary_text", text: open.text } });
    this.done(open.index, reasoningItem(open.id, open.text));
  }

  private say(kind: OpenMessage["kind"], text: string): void {
    this.closeReasoning();
    if (!this.message) {
      const id = newId("msg");
      this.message = { index: this.add(messageItem(id, "in_progress", [])), id, text: "", kind, parts: [] };
      this.openPart();
    } else if (this.message.kind !== kind) {
      this.closePart();
      this.message.kind = kind;
      this.openPart();
    }
    const { id, index, parts } = this.message;
    this.message.text += text;
    const ids = { item_id: id, output_index: index, content_index: parts.length };
    this.emit(DELTA_EVENTS[kind].delta, { ...ids, delta: text, ...(kind === "output_text" ? { logprobs: [] } : {}) });
  }

  private part(): Json {
    const { kind, text } = this.message!;
    return kind === "output_text" ? textPart(text) : { type: "refusal", refusal: text };
  }

  private openPart(): void {
    const { id, index, parts } = this.message!;
    this.message!.text = "";
    const part = this.part();
    this.emit("response.content_part.added", { item_id: id, output_index: index, content_index: parts.length, part });
  }

  private closePart(): void {
    const open = this.message!;
    const part = this.part();
    const ids = { item_id: open.id, output_index: open.index, content_index: open.parts.length };
    const events = DELTA_EVENTS[open.kind];
    this.emit(events.done, {
      ...ids,
      [events.field]: open.text,
      ...(open.kind === "output_text" ? { logprobs: [] } : {}),
    });
    this.emit("response.content_part.done", { ...ids, part });
    open.parts.push(part);
  }

  private closeMessage(): void {
    const open = this.message;
    if (!open) return;
    this.closePart();
    this.message = undefined;
    this.done(open.index, messageItem(open.id, "completed", open.parts));
  }

  private call(delta: Json): void {
    const key = typeof delta.index === "number" ? delta.index : 0;
    const fn = isObject(delta.function) ? delta.function : {};
    let open = this.calls.get(key);
    if (!open) {
      this.closeReasoning();
      this.closeMessage();
      const id = newId("fc");
      const made = {
        id: typeof delta.id === "string" ? delta.id : newId("call"),
        name: String(fn.name ?? ""),
        args: "",
      };
      const index = this.add(functionCallItem(id, "in_progress", made));
      open = { index, id, text: "", callId: made.id, name: made.name };
      this.calls.set(key, open);
    }
    if (typeof fn.arguments === "string" && fn.arguments) {
      open.text += fn.arguments;
      this.emit("response.function_call_arguments.delta", {
        item_id: open.id,
        output_index: open.index,
        delta: fn.arguments,
      });
    }
  }

  private closeCalls(): void {
    for (const open of this.calls.values()) {
      const ids = { item_id: open.id, output_index: open.index };
      this.emit("response.function_call_arguments.done", { ...ids, name: open.name, arguments: open.text });
      const made = { id: open.callId, name: open.name, args: open.text };
      this.done(open.index, functionCallItem(open.id, "completed", made));
    }
    this.calls.clear();
  }

  private done(index: number, item: Json): void {
    this.output[index] = item;
    this.emit("response.output_item.done", { output_index: index, item });
  }

  /** The chat answer is whole (`[DONE]`): every open item is done, then the response. */
  complete(): void {
    if (this.ended) return;
    this.closeReasoning();
    this.closeMessage();
    this.closeCalls();
    this.ended = "completed";
    const reason = this.finish === undefined ? undefined : INCOMPLETE[this.finish];
    const fields = { output: this.output, usage: this.usage };
    if (reason)
      this.emit("response.incomplete", {
        response: this.response({ ...fields, status: "incomplete", incomplete_details: { reason } }),
      });
    else this.emit("response.completed", { response: this.response({ ...fields, status: "completed" }) });
  }

  /**
   * The answer broke: the response fails with what it had so far, and an `error` event follows in
   * both of OpenAI's shapes (flat, and under `error`, which the `openai` SDK raises as an APIError).
   * A break on the backends' side is OpenAI's `server_error`, as its own failed responses say.
   */
  fail(error: unknown): void {
    if (this.ended) return;
    this.ended = "failed";
    const found = isObject(error) ? error : {};
    const message = typeof found.message === "string" ? found.message : String(error);
    const code = typeof found.code === "string" ? found.code : "server_error";
    // The items still open, as far as they got.
    const output = [...this.output];
    if (this.reasoning) output[this.reasoning.index] = reasoningItem(this.reasoning.id, this.reasoning.text);
    if (this.message) {
      const { index, id, parts } = this.message;
      output[index] = messageItem(id, "incomplete", [...parts, this.part()]);
    }
    for (const open of this.calls.values()) {
      const made = { id: open.callId, name: open.name, args: open.text };
      output[open.index] = functionCallItem(open.id, "incomplete", made);
    }
    this.emit("response.failed", {
      response: this.response({ status: "failed", error: { code, message }, output, usage: this.usage }),
    });
    this.emit("error", { code, message, param: null, error: { type: "server_error", code, message, param: null } });
  }
}

/**
 * The Responses stream for a chat completion stream. Cancelling it (the client went away)
 * cancels the chat stream, which stops the backend's request.
 */
export function responsesStream(
  chat: ReadableStream<Uint8Array>,
  request: ResponsesRequest,
): ReadableStream<Uint8Array> {
  const reader = chat.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  const translator = new Translator(request, (text) => void (pending += text));
  const parser = createParser({
    onEvent: (event) => {
      if (event.data === "[DONE]") return translator.complete();
      let value: unknown;
      try {
        value = JSON.parse(event.data);
      } catch {
        return translator.fail({ message: "The backend sent a malformed event. The stream is incomplete." });
      }
      if (!isObject(value)) return translator.fail({ message: "The backend sent a malformed event." });
      // The relay's `event: error` carries `{"error": …}`, as a backend's own error chunk does.
      translator.chunk(event.event === "error" && value.error === undefined ? { error: value } : value);
    },
    onComment: (comment) => translator.comment(comment),
  });
  return new ReadableStream<Uint8Array>({
    start() {
      translator.start();
    },
    async pull(controller) {
      while (!pending && !translator.ended) {
        let read: ReadableStreamReadResult<Uint8Array>;
        try {
          read = await reader.read();
        } catch (err) {
          translator.fail({ message: `The stream broke: ${err instanceof Error ? err.message : String(err)}.` });
          break;
        }
        if (read.done) {
          parser.feed(decoder.decode());
          translator.fail({ message: "The stream ended before the answer was whole." });
          break;
        }
        parser.feed(decoder.decode(read.value, { stream: true }));
      }
      if (pending) controller.enqueue(encoder.encode(pending));
      pending = "";
      if (translator.ended === "completed") {
        controller.close();
        // The relay's own end follows `[DONE]`: read to it, so the relay settles the request as completed.
        void (async () => {
          while (!(await reader.read()).done);
        })().catch(() => {});
      } else if (translator.ended === "failed") {
        controller.close();
        reader.cancel(new Error("the response failed")).catch(() => {});
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}
