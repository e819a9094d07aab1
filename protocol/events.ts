/**
 * Editor events (`POST /v1/events`): what the editor saw happen to a suggestion, an answer, an
 * edit or an agent task. Validated strictly, one event at a time: an event with a field this
 * schema does not name is refused, so no prompt, completion, code or path reaches the lake by an
 * extra field. The SDK and the edge share these schemas.
 */
import { z } from "zod";

/** The most events one `POST /v1/events` may carry. */
export const MAX_EVENTS_PER_BATCH = 500;

/** How far back an event's time may lie: the lake's deduplication covers this window. */
export const MAX_EVENT_AGE_DAYS = 7;
/** How far ahead of the edge's clock an event's time may lie (client clock skew). */
export const MAX_EVENT_SKEW_MS = 5 * 60_000;

/** A client-chosen id, the same on every retry of the event (a UUID, a ULID): the lake keeps one row per id. */
export const EventId = z
  .string()
  .regex(/^[A-Za-z0-9_-]{8,128}$/, "8 to 128 letters, digits, '-' or '_' (a UUID or ULID)");

const Token = (max: number) =>
  z
    .string()
    .min(1)
    .max(max)
    .regex(/^[\w.:/@+-]+$/, "letters, digits and . : / @ + - _ only");

/** Milliseconds since the epoch, or an ISO 8601 time with its offset. */
const EventTime = z
  .union([z.number().int().min(0), z.iso.datetime({ offset: true }).transform((s) => Date.parse(s))])
  .describe("milliseconds since the epoch, or an ISO 8601 time");

const count = z.number().int().min(0).max(100_000_000);

/** What every event may carry beside its own fields. */
const common = {
  id: EventId,
  at: EventTime,
  /** The `X-Request-Id` of the edge request the event is about: joins it to the edge's own record. */
  request_id: Token(128).optional(),
  /** The editor session (the `TabSession` id). */
  session_id: Token(128).optional(),
  /** The public model name the request named. */
  model: Token(256).optional(),
  language: z
    .string()
    .regex(/^[a-z0-9+#._-]{1,32}$/, "a language name such as typescript or c++")
    .optional(),
  /** A keyed hash of the file's path, computed by the client (never the path): 16 to 64 hex digits. */
  file_id: z
    .string()
    .regex(/^[0-9a-f]{16,64}$/, "16 to 64 lowercase hex digits: a keyed hash of the path, never the path")
    .optional(),
  /** The editor and its version, e.g. `vscode/1.96`. */
  client: Token(64).optional(),
  /**
   * Text the event is about (the suggestion, the prompt), only for an org that opted in, and only
   * encrypted with a key the org holds: the edge stores the ciphertext as it came.
   */
  content: z
    .strictObject({
      key_id: Token(64),
      ciphertext: z.base64().max(87_384, "at most 64 KiB of ciphertext"),
    })
    .optional(),
};

const ev = <T extends string, S extends z.ZodRawShape>(type: T, shape: S) =>
  z.strictObject({ type: z.literal(type), ...common, ...shape });

/** Each kind of event and its own fields. */
export const EditorEvent = z.discriminatedUnion("type", [
  ev("tab.shown", { shown_chars: count.optional(), shown_lines: count.optional(), latency_ms: count.optional() }),
  ev("tab.accepted", {
    shown_chars: count.optional(),
    accepted_chars: count.optional(),
    /** Part of the suggestion was taken (word by word, line by line). */
    partial: z.boolean().optional(),
  }),
  ev("tab.rejected", {}),
  ev("tab.ignored", {}),
  /** An accepted suggestion checked again later: how much of it is still there. */
  ev("tab.retained", {
    after_s: z.union([z.literal(30), z.literal(300)]),
    retained_ratio: z.number().min(0).max(1),
  }),
  ev("chat.feedback", { rating: z.enum(["up", "down"]) }),
  ev("apply.kept", { lines_changed: count.optional() }),
  ev("apply.reverted", { lines_changed: count.optional() }),
  ev("agent.outcome", {
    task_id: Token(128),
    outcome: z.enum(["applied", "discarded", "failed", "cancelled"]),
  }),
]);
export type EditorEvent = z.input<typeof EditorEvent>;
export type ParsedEditorEvent = z.output<typeof EditorEvent>;
export type EditorEventType = ParsedEditorEvent["type"];

export const EVENT_TYPES = EditorEvent.options.map((o) => o.shape.type.value) as EditorEventType[];

export const EventsRequest = z.strictObject({
  events: z.array(z.unknown()).min(1).max(MAX_EVENTS_PER_BATCH, `at most ${MAX_EVENTS_PER_BATCH} events per request`),
});

/** Why one event of a batch was refused. */
export const EventRefusal = z.object({
  index: z.number().int(),
  id: z.string().nullable(),
  code: z.enum(["invalid_event", "event_time_out_of_range", "content_not_enabled"]),
  detail: z.string(),
  errors: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
});
export type EventRefusal = z.infer<typeof EventRefusal>;

/**
 * `POST /v1/events`'s answer (202): how many events were taken, how many repeated an id earlier in
 * the same request (taken once), and each event refused with its reason. An event sent again in a
 * later request is taken again here and stored once in the lake.
 */
export const EventsResponse = z.object({
  accepted: z.number().int(),
  duplicates: z.number().int(),
  refused: z.array(EventRefusal),
});
export type EventsResponse = z.infer<typeof EventsResponse>;
