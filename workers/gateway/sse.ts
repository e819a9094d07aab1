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
  /** When the current wait times out, and the timer that enforces it. */
  private deadline = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private timerAt = 0;
  private reading = false;
  private timedOut = false;
  private finished = false;
  private sawDone = false;
  private parseError: string | undefined;

  /**
   * `translate`, when given, turns each event into the events to hand out and says when the answer
   * is whole (a backend whose stream is not OpenAI's, such as Anthropic's Messages API); without
   * it, events pass as they are and `[DONE]` ends the answer.
   */
  constructor(
    body: ReadableStream<Uint8Array>,
    translate?: (event: string | undefined, data: string) => { events: string[]; done: boolean },
  ) {
    this.reader = body.getReader();
    this.parser = createParser({
      onEvent: (event) => {
        if (translate) {
          const { events, done } = translate(event.event, event.data);
          for (const data of events) this.queue.push({ type: "event", data });
          if (done) this.sawDone = true;
          return;
        }
        if (event.data === "[DONE]") {
          this.sawDone = true;
          return;
        }
        this.queue.push(
          event.event ? { type: "event", data: event.data, event: event.event } : { type: "event", data: event.data },
        );
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

  /**
   * Whether `[DONE]` has already been received and every event before it taken: the answer is
   * whole, and its last events can go out together with the end instead of a write before it.
   */
  get drainedToDone(): boolean {
    return this.sawDone && this.queue.length === 0 && !this.parseError && !this.timedOut;
  }

  /**
   * The next event, the end, a parse error, or a timeout after `timeoutMs` of silence. A timeout
   * ends the stream (the caller gives up on it). One timer per reader serves every wait: it is
   * re-armed only when it fires before the current deadline, so tokens arriving faster than the
   * timeout cost no timer work, and a read is never raced against a promise of its own.
   */
  async next(timeoutMs: number): Promise<SseItem> {
    this.deadline = Date.now() + timeoutMs;
    for (;;) {
      const queued = this.queue.shift();
      if (queued) return queued;
      if (this.timedOut) return { type: "timeout" };
      if (this.parseError) return { type: "error", message: `malformed event stream: ${this.parseError}` };
      // `[DONE]` ends the answer; the body's own end may come a moment later (see `close`).
      if (this.finished || this.sawDone) return { type: "end", done: this.sawDone };
      if (this.deadline - Date.now() <= 0) return this.timeout();
      this.arm();
      let result: ReadableStreamReadResult<Uint8Array>;
      this.reading = true;
      try {
        result = await this.reader.read();
      } catch (err) {
        if (this.timedOut) return { type: "timeout" };
        this.finish();
        return {
          type: "error",
          message: `the backend's stream broke: ${err instanceof Error ? err.message : String(err)}`,
        };
      } finally {
        this.reading = false;
      }
      if (this.timedOut) return { type: "timeout" };
      if (result.done) {
        this.parser.feed(this.decoder.decode());
        this.finish();
        continue;
      }
      this.parser.feed(this.decoder.decode(result.value, { stream: true }));
    }
  }

  /** Makes sure the timer fires no later than the current deadline. */
  private arm(): void {
    if (this.timer !== undefined && this.timerAt <= this.deadline) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timerAt = this.deadline;
    this.timer = setTimeout(this.fire, Math.max(0, this.deadline - Date.now()));
  }

  private readonly fire = () => {
    this.timer = undefined;
    if (this.finished) return;
    if (this.deadline - Date.now() > 0) {
      if (this.reading) this.arm();
      return;
    }
    // A read waiting past its deadline: cancelling the stream ends it, and `next` reports the timeout.
    if (this.reading) this.timeout();
  };

  private timeout(): SseItem {
    this.timedOut = true;
    this.cancel(new Error("timed out"));
    return { type: "timeout" };
  }

  private finish(): void {
    this.finished = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * Done with the stream. After `[DONE]` the rest of the body is read to its end in the background
   * (kept alive by `waitUntil`, for a second at most), so the connection to the backend can serve
   * its next request;
   * otherwise the stream is cancelled, which closes the connection.
   */
  close(waitUntil: (promise: Promise<unknown>) => void): void {
    if (!this.sawDone || this.finished || this.timedOut) return this.cancel();
    this.finish();
    waitUntil(
      (async () => {
        // A backend that keeps the body open after `[DONE]` gets a second, then the stream is cancelled.
        const timer = setTimeout(() => this.reader.cancel().catch(() => {}), 1_000);
        try {
          while (!(await this.reader.read()).done);
        } finally {
          clearTimeout(timer);
        }
      })().catch(() => {}),
    );
  }

  cancel(reason?: unknown): void {
    this.finish();
    this.reader.cancel(reason).catch(() => {});
  }
}
