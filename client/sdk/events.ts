/**
 * Editor events (`POST /v1/events`): `sextant.events.send` posts them (500 a request at most; more
 * are split), and `sextant.events.recorder()` batches them in the background for an editor that
 * records as things happen. Sending an event again is safe: the lake keeps one row per event id.
 */
import { EventRefusal, EventsResponse, MAX_EVENTS_PER_BATCH, type EditorEvent } from "../../protocol/events.js";
import { APIError, BadRequestError } from "./errors.js";
import type { HttpClient } from "./http.js";

export type { EditorEvent, EventsResponse };

interface PerRequest {
  signal?: AbortSignal;
}

/** An event without its `id` and `at`: the SDK fills them in (a fresh UUID, now). */
export type NewEvent = EditorEvent extends infer E
  ? E extends { id: string; at: unknown }
    ? Omit<E, "id" | "at"> & { id?: string; at?: E["at"] }
    : never
  : never;

export const withIdentity = (event: NewEvent): EditorEvent =>
  ({ ...event, id: event.id ?? crypto.randomUUID(), at: event.at ?? Date.now() }) as EditorEvent;

export class Events {
  constructor(private readonly http: HttpClient) {}

  /**
   * Posts the events; a bad one is refused alone, with its reason, in `refused` (its `index` counts
   * in `events`). Retried after a connection failure, 429 or 5xx: the same ids are stored once.
   *
   * @example
   * const { refused } = await sextant.events.send([
   *   { id: crypto.randomUUID(), type: "tab.accepted", at: Date.now(), request_id, accepted_chars: 12 },
   * ]);
   */
  async send(events: readonly EditorEvent[], opts: PerRequest = {}): Promise<EventsResponse> {
    const total: EventsResponse = { accepted: 0, duplicates: 0, refused: [] };
    for (let start = 0; start < events.length; start += MAX_EVENTS_PER_BATCH) {
      const batch = events.slice(start, start + MAX_EVENTS_PER_BATCH);
      const answer = await this.post(batch, opts);
      total.accepted += answer.accepted;
      total.duplicates += answer.duplicates;
      for (const r of answer.refused) total.refused.push({ ...r, index: r.index + start });
    }
    return total;
  }

  private async post(events: readonly EditorEvent[], opts: PerRequest): Promise<EventsResponse> {
    try {
      return await this.http.request({
        method: "POST",
        path: "/v1/events",
        body: { events },
        schema: EventsResponse,
        idempotent: true,
        ...opts,
      });
    } catch (err) {
      // Every event refused: the same answer, as a 400 that lists them.
      const refused =
        err instanceof BadRequestError ? (err.problem as { refused?: unknown } | undefined)?.refused : undefined;
      const parsed = EventRefusal.array().safeParse(refused);
      if (parsed.success) return { accepted: 0, duplicates: 0, refused: parsed.data };
      throw err;
    }
  }

  /** A background batcher: see `EventRecorder`. */
  recorder(options: RecorderOptions = {}): EventRecorder {
    return new EventRecorder(this, options);
  }
}

export interface RecorderOptions {
  /** Sends what is held this long after the first event of a batch; default 5 s. */
  flushIntervalMs?: number;
  /** Events held at most; past this the oldest are dropped (counted in `dropped`); default 10,000. */
  maxBuffered?: number;
  /** Called with each answer that refused events, and with each send that failed (they are kept and retried). */
  onError?: (error: unknown, refused?: EventRefusal[]) => void;
}

/**
 * Holds events and sends them in batches: at `MAX_EVENTS_PER_BATCH`, or `flushIntervalMs` after the
 * first. A failed send keeps its events for the next; `flush()` sends now, `close()` sends the rest
 * and stops.
 */
export class EventRecorder {
  private held: EditorEvent[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private sending: Promise<void> | undefined;
  /** Events dropped because the buffer was full (the edge unreachable for long). */
  dropped = 0;
  /** Events the edge refused, with their reasons, as they come back. */
  refused = 0;

  constructor(
    private readonly events: Events,
    private readonly options: RecorderOptions = {},
  ) {}

  /** Records an event (filling in `id` and `at` when absent) and returns it as it will be sent. */
  record(event: NewEvent): EditorEvent {
    const full = withIdentity(event);
    this.held.push(full);
    const max = this.options.maxBuffered ?? 10_000;
    if (this.held.length > max) {
      this.dropped += this.held.length - max;
      this.held.splice(0, this.held.length - max);
    }
    if (this.held.length >= MAX_EVENTS_PER_BATCH) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.options.flushIntervalMs ?? 5_000);
    return full;
  }

  /** Sends everything held now; resolves when it is sent or, if the edge failed, kept for the next try. */
  async flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.sending;
    if (this.held.length === 0) return;
    const batch = this.held.splice(0, MAX_EVENTS_PER_BATCH);
    this.sending = (async () => {
      try {
        const answer = await this.events.send(batch);
        if (answer.refused.length) {
          this.refused += answer.refused.length;
          this.options.onError?.(new Error(`${answer.refused.length} events refused`), answer.refused);
        }
      } catch (err) {
        // A refusal of the request itself (a revoked key, a malformed body) would only repeat.
        if (err instanceof APIError && err.status < 500 && err.status !== 408 && err.status !== 429)
          this.dropped += batch.length;
        else this.held.unshift(...batch);
        this.options.onError?.(err);
      }
    })();
    await this.sending;
    this.sending = undefined;
    if (this.held.length >= MAX_EVENTS_PER_BATCH) await this.flush();
    else if (this.held.length)
      this.timer ??= setTimeout(() => void this.flush(), this.options.flushIntervalMs ?? 5_000);
  }

  /** Sends what is held and stops the timer. */
  async close(): Promise<void> {
    await this.flush();
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
