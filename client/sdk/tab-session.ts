/**
 * Tab completions for one editor session: each new request cancels the one still in flight, on
 * the client (closing its connection) and at the edge (the session header lets the edge cancel a
 * request it can see even when the disconnect does not reach it).
 */
import type OpenAI from "openai";
import { SESSION_HEADER } from "../../protocol/gateway.js";

type CompletionParams = OpenAI.CompletionCreateParamsNonStreaming;
type StreamingParams = OpenAI.CompletionCreateParamsStreaming;

export class TabSession {
  readonly id: string;
  private current: AbortController | undefined;

  /** `openai` is the official SDK's client with `baseURL` pointed at the edge's `/v1`. */
  constructor(
    private readonly openai: OpenAI,
    options: { id?: string } = {},
  ) {
    this.id = options.id ?? crypto.randomUUID();
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

  /** A whole completion; a newer call rejects this one with the SDK's `APIUserAbortError`. */
  async complete(params: CompletionParams, options: { signal?: AbortSignal } = {}): Promise<OpenAI.Completion> {
    const controller = this.next(options.signal);
    try {
      return await this.openai.completions.create(params, {
        signal: controller.signal,
        headers: { [SESSION_HEADER]: this.id },
      });
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
    try {
      const stream = await this.openai.completions.create(
        { ...params, stream: true },
        { signal: controller.signal, headers: { [SESSION_HEADER]: this.id } },
      );
      const release = () => this.done(controller);
      return {
        async *[Symbol.asyncIterator]() {
          try {
            yield* stream;
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
}
