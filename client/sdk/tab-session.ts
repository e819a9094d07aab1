/**
 * Tab completions for one editor session: each new request cancels the one still in flight, on
 * the client (closing its connection) and at the edge (the session header lets the edge cancel a
 * request it can see even when the disconnect does not reach it). With an `EventRecorder`, the
 * session also records what became of each suggestion (shown, accepted, rejected, ignored), joined
 * in the lake to the edge's record of the request that produced it.
 */
import type OpenAI from "openai";
import { SESSION_HEADER } from "../../protocol/gateway.js";
import type { EditorEvent } from "../../protocol/events.js";
import type { EventRecorder } from "./events.js";

type CompletionParams = OpenAI.CompletionCreateParamsNonStreaming;
type StreamingParams = OpenAI.CompletionCreateParamsStreaming;

/** A completion, or one chunk of a streamed one, or its `id`. */
export type SuggestionRef = { id: string } | string;

interface Suggestion {
  requestId: string;
  model: string;
}

/** Suggestions remembered for their events; the oldest are forgotten past this many. */
const REMEMBERED = 256;

export class TabSession {
  readonly id: string;
  private current: AbortController | undefined;
  private readonly recorder: EventRecorder | undefined;
  private readonly suggestions = new Map<string, Suggestion>();

  /**
   * `openai` is the official SDK's client with `baseURL` pointed at the edge's `/v1`; `events`
   * (`sextant.events.recorder()`) is where the session's events go.
   */
  constructor(
    private readonly openai: OpenAI,
    options: { id?: string; events?: EventRecorder } = {},
  ) {
    this.id = options.id ?? crypto.randomUUID();
    this.recorder = options.events;
  }

  private next(signal?: AbortSignal): AbortController {
    this.current?.abort(new Error("superseded by a newer tab request"));
    const controller = new AbortController();
    if (signal) {
      if (signal.aborted) controller.abort(signal.reason);
      else signal.addEventListener("abort", () => controller.abort(signal.reason), { once: true });
    }
    this.current = controller;
    return controller;
  }

  private done(controller: AbortController): void {
    if (this.current === controller) this.current = undefined;
  }

  /** Headers of one request: the session, and a request id the session's events will name. */
  private headers(): { headers: Record<string, string>; requestId: string } {
    const requestId = crypto.randomUUID();
    return { requestId, headers: { [SESSION_HEADER]: this.id, "X-Request-Id": requestId } };
  }

  private remember(completionId: string | undefined, suggestion: Suggestion): void {
    if (!completionId || this.suggestions.has(completionId)) return;
    this.suggestions.set(completionId, suggestion);
    if (this.suggestions.size > REMEMBERED) this.suggestions.delete(this.suggestions.keys().next().value!);
  }

  /** A whole completion; a newer call rejects this one with the SDK's `APIUserAbortError`. */
  async complete(params: CompletionParams, options: { signal?: AbortSignal } = {}): Promise<OpenAI.Completion> {
    const controller = this.next(options.signal);
    const { headers, requestId } = this.headers();
    try {
      const completion = await this.openai.completions.create(params, { signal: controller.signal, headers });
      this.remember(completion.id, { requestId, model: params.model });
      return completion;
    } finally {
      this.done(controller);
    }
  }

  /** A streamed completion; a newer call ends this stream's iteration. */
  async stream(
    params: Omit<StreamingParams, "stream">,
    options: { signal?: AbortSignal } = {},
  ): Promise<AsyncIterable<OpenAI.Completion>> {
    const controller = this.next(options.signal);
    const { headers, requestId } = this.headers();
    try {
      const stream = await this.openai.completions.create(
        { ...params, stream: true },
        { signal: controller.signal, headers },
      );
      const release = () => this.done(controller);
      const remember = (chunk: OpenAI.Completion) => this.remember(chunk.id, { requestId, model: params.model });
      return {
        async *[Symbol.asyncIterator]() {
          try {
            for await (const chunk of stream) {
              remember(chunk);
              yield chunk;
            }
          } finally {
            release();
          }
        },
      };
    } catch (err) {
      this.done(controller);
      throw err;
    }
  }

  /** Cancels whatever is in flight (the editor closed, the cursor moved away). */
  cancel(): void {
    this.current?.abort(new Error("cancelled"));
    this.current = undefined;
  }

  private record(
    ref: SuggestionRef,
    event: Record<string, unknown> & { type: EditorEvent["type"] },
  ): EditorEvent | undefined {
    const id = typeof ref === "string" ? ref : ref.id;
    const suggestion = this.suggestions.get(id);
    if (!this.recorder || !suggestion) return undefined;
    return this.recorder.record({
      ...event,
      request_id: suggestion.requestId,
      session_id: this.id,
      model: suggestion.model,
    } as Parameters<EventRecorder["record"]>[0]);
  }

  /** The suggestion was shown to the user. */
  shown(ref: SuggestionRef, fields: { shown_chars?: number; shown_lines?: number; latency_ms?: number } = {}) {
    return this.record(ref, { type: "tab.shown", ...fields });
  }

  /** The user took the suggestion, or part of it (`partial`, with `accepted_chars`). */
  accepted(ref: SuggestionRef, fields: { shown_chars?: number; accepted_chars?: number; partial?: boolean } = {}) {
    return this.record(ref, { type: "tab.accepted", ...fields });
  }

  /** The user dismissed the suggestion (Escape). */
  rejected(ref: SuggestionRef) {
    return this.record(ref, { type: "tab.rejected" });
  }

  /** The user typed on past the suggestion without taking it. */
  ignored(ref: SuggestionRef) {
    return this.record(ref, { type: "tab.ignored" });
  }

  /** An accepted suggestion checked again `after_s` (30 or 300) seconds later. */
  retained(ref: SuggestionRef, fields: { after_s: 30 | 300; retained_ratio: number }) {
    return this.record(ref, { type: "tab.retained", ...fields });
  }
}
