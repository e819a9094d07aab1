/**
 * Reads a backend's server-sent events one at a time, with a timeout per event: how the edge
 * notices a backend that hangs before its first token or stalls between two.
 */
import { createParser, type EventSourceParser } from "eventsource-parser";

export type SseItem =
  | { type: "event"; data: string; event?: string }
  /** The stream ended; `done` says whether `[DONE]` was seen before the end. */
  | { type: "end"; done: boolean }
  | { type: "timeout" }
  | { type: "error"; message: string };

/** Events larger than this are refused as malformed rather than buffered without bound. */
const MAX_EVENT_BYTES = 4 * 2 ** 20;

export class SseReader {
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new TextDecoder();
  private readonly parser: EventSourceParser;
  private readonly queue: SseItem[] = [];
  private pending: Promise<ReadableStreamReadResult<Uint8Array>> | undefined;
  private finished = false;
  private sawDone = false;
  private parseError: string | undefined;

  constructor(body: ReadableStream<Uint8Array>) {
    this.reader = body.getReader();
    this.parser = createParser({
      onEvent: (event) => {
        if (event.data === "[DONE]") {
          this.sawDone = true;
          return;
        }
        this.queue.push({ type: "event", data: event.data, ...(event.event ? { event: event.event } : {}) });
      },
      onError: (error) => {
        this.parseError ??= error.message;
      },
      maxBufferSize: MAX_EVENT_BYTES,
    } as Parameters<typeof createParser>[0]);
  }

  /** An event already received, without waiting. */
  shift(): SseItem | undefined {
    return this.queue.shift();
  }

  /** The next event, the end, a parse error, or a timeout after `timeoutMs` of silence. */
  async next(timeoutMs: number): Promise<SseItem> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const queued = this.queue.shift();
      if (queued) return queued;
      if (this.parseError) return { type: "error", message: `malformed event stream: ${this.parseError}` };
      if (this.finished) return { type: "end", done: this.sawDone };
      const remaining = deadline - Date.now();
      if (remaining <= 0) return { type: "timeout" };
      if (!this.pending) {
        this.pending = this.reader.read();
        // A read still pending when the stream is cancelled rejects with nobody awaiting it.
        this.pending.catch(() => {});
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const result = await Promise.race([
        this.pending,
        new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), remaining))),
      ]).catch((err: unknown) => ({ error: err instanceof Error ? err.message : String(err) }));
      if (timer !== undefined) clearTimeout(timer);
      if (result === "timeout") return { type: "timeout" };
      this.pending = undefined;
      if ("error" in result) return { type: "error", message: `the backend's stream broke: ${result.error}` };
      if (result.done) {
        this.parser.feed(this.decoder.decode());
        this.finished = true;
        continue;
      }
      this.parser.feed(this.decoder.decode(result.value, { stream: true }));
    }
  }

  cancel(reason?: unknown): void {
    this.finished = true;
    this.reader.cancel(reason).catch(() => {});
  }
}
