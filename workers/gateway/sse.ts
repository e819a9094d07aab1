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
const SPACE = 32;
const COLON = 58;

export class SseReader {
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  private readonly decoder = new TextDecoder();
  /** Set once the stream leaves the plain form (`feed`): the general parser reads the rest. */
  private parser: EventSourceParser | undefined;
  /** What the plain split has not yet found the end of. */
  private pending = "";
  private fed = false;
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
    private readonly translate?: (event: string | undefined, data: string) => { events: string[]; done: boolean },
  ) {
    this.reader = body.getReader();
  }

  /** One event of the stream, as a parser dispatches it. */
  private dispatch(event: string | undefined, data: string): void {
    if (this.translate) {
      const { events, done } = this.translate(event, data);
      for (const data of events) this.queue.push({ type: "event", data });
      if (done) this.sawDone = true;
      return;
    }
    if (data === "[DONE]") {
      this.sawDone = true;
      return;
    }
    this.queue.push(event ? { type: "event", data, event } : { type: "event", data });
  }

  /**
   * Splits the stream into events. A stream in the plain form backends send (LF line ends, each
   * event's lines `data:`, `event:` or comments) is split here, as cheaply as a relay that only
   * looks for blank lines; the first event outside that form hands the rest of the stream, from
   * that event on, to eventsource-parser, which reads any server-sent events as the spec says.
   */
  private feed(text: string): void {
    if (this.parser) return this.parser.feed(text);
    const pending = this.pending + text;
    if (text.includes("\r") || (!this.fed && pending.charCodeAt(0) === 0xfeff)) return this.general(pending);
    this.fed = true;
    let at = 0;
    for (let end = pending.indexOf("\n\n", at); end >= 0; end = pending.indexOf("\n\n", at)) {
      if (!this.plainEvent(pending, at, end)) return this.general(pending.slice(at));
      at = end + 2;
    }
    this.pending = at === 0 ? pending : pending.slice(at);
    if (this.pending.length > MAX_EVENT_BYTES)
      this.parseError ??= `Buffered data exceeded max buffer size of ${MAX_EVENT_BYTES} characters`;
  }

  /** Dispatches the event in `s` from `from` to `to` (its blank line) if it is in the plain form; false if not. */
  private plainEvent(s: string, from: number, to: number): boolean {
    let data: string | undefined;
    let event: string | undefined;
    for (let i = from; i <= to; ) {
      let eol = s.indexOf("\n", i);
      if (eol < 0 || eol > to) eol = to;
      if (eol > i) {
        if (s.startsWith("data:", i)) {
          const value = s.slice(s.charCodeAt(i + 5) === SPACE ? i + 6 : i + 5, eol);
          data = data === undefined ? value : `${data}\n${value}`;
        } else if (s.startsWith("event:", i))
          event = s.slice(s.charCodeAt(i + 6) === SPACE ? i + 7 : i + 6, eol) || undefined;
        else if (s.charCodeAt(i) !== COLON) return false;
      }
      i = eol + 1;
    }
    if (data !== undefined) this.dispatch(event, data);
    return true;
  }

  /** From here on, eventsource-parser reads the stream, starting at `text` (an event's first line). */
  private general(text: string): void {
    this.pending = "";
    this.parser = createParser({
      onEvent: (event) => this.dispatch(event.event, event.data),
      onError: (error) => {
        this.parseError ??= error.message;
      },
      maxBufferSize: MAX_EVENT_BYTES,
    } as Parameters<typeof createParser>[0]);
    // Past the stream's start: what begins `text` is no byte-order mark to drop.
    if (this.fed) this.parser.feed("");
    this.fed = true;
    this.parser.feed(text);
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
        this.feed(this.decoder.decode());
        // An unfinished event's lines still count (an invalid field is an error): the parser reads them.
        if (!this.parser && this.pending) this.general(this.pending);
        this.finish();
        continue;
      }
      this.feed(this.decoder.decode(result.value, { stream: true }));
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
