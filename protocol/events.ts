/**
 * Editor events (`POST /v1/events`): what the editor saw happen to a suggestion, an answer, an
 * edit or an agent task. Validated strictly, one event at a time: an event with a field this
 * schema does not name is refused, so no prompt, completion, code or path reaches the lake by an
 * extra field, and each field holds only the shape of what it names (an id, a model's name, an
 * editor's name and version), short, so that no text rides in on a named one either. The SDK and
 * the edge share these schemas.
 */
import { z } from "zod";
import { REQUEST_ID } from "./request-id.js";

/** The most events one `POST /v1/events` may carry. */
export const MAX_EVENTS_PER_BATCH = 500;

/** How far back an event's time may lie: the lake's deduplication covers this window. */
export const MAX_EVENT_AGE_DAYS = 7;
/** How far ahead of the edge's clock an event's time may lie (client clock skew). */
export const MAX_EVENT_SKEW_MS = 5 * 60_000;

/**
 * An id a client chose (a UUID, a ULID, `req-42`): up to 40 letters, digits, '-' or '_', room for a
 * UUID with a short prefix and no more, so that an id cannot carry a base64 blob.
 */
const ClientId = (min: number) =>
  z
    .string()
    .regex(
      new RegExp(`^[A-Za-z0-9][A-Za-z0-9_-]{${min - 1},39}$`),
      `${min} to 40 letters, digits, '-' or '_', starting with a letter or digit (a UUID or ULID)`,
    );

/** A client-chosen id, the same on every retry of the event (a UUID, a ULID): the lake keeps one row per id. */
export const EventId = ClientId(8);

/**
 * A model's public name as gateways spell them (`tab-simulated`, `Qwen/Qwen2.5-Coder-7B`,
 * `claude-sonnet-4-5`, `qwen2.5-coder:7b`, Workers AI's `@cf/meta/llama-3.1-8b-instruct`): 64
 * characters at most, the longest names in use being well under that.
 */
export const ModelName = z
  .string()
  .regex(
    /^@?[A-Za-z0-9][A-Za-z0-9._:/-]{0,62}$/,
    "a model's name: up to 64 letters, digits and . _ : / - (an optional leading @)",
  );

/** The editor and its version, e.g. `vscode/1.96.2`, `jetbrains-idea/2024.3`, `sextant-cli`. */
const ClientName = z
  .string()
  .regex(
    /^[A-Za-z0-9][A-Za-z0-9._-]{0,31}(?:\/[A-Za-z0-9][A-Za-z0-9.+-]{0,23})?$/,
    "an editor's name (32 characters at most) and optionally /version (24 at most), e.g. vscode/1.96",
  );

/** An agent task's id, as the edge gives it (`task_` and 20 lowercase letters or digits). */
const TaskId = z.string().regex(/^task_[0-9a-z]{20}$/, "an agent task's id (task_…)");

/** Milliseconds since the epoch, or an ISO 8601 time with its offset. */
const EventTime = z
  .union([z.number().int().min(0), z.iso.datetime({ offset: true }).transform((s) => Date.parse(s))])
  .describe("milliseconds since the epoch, or an ISO 8601 time");

const count = z.number().int().min(0).max(100_000_000);

/** What every event may carry beside its own fields. */
const common = {
  id: EventId,
  at: EventTime,
  /**
   * The `X-Request-Id` of the edge request the event is about: joins it to the edge's own record. Any
   * id the edge answers with (minted, or the client's own it kept) is accepted, and nothing else.
   */
  request_id: z.string().regex(REQUEST_ID, "a request id: 1 to 64 letters, digits and _ . : -").optional(),
  /** The editor session (the `TabSession` id, a UUID). */
  session_id: ClientId(1).optional(),
  /** The public model name the request named. */
  model: ModelName.optional(),
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
  client: ClientName.optional(),
  /**
   * Text the event is about (the suggestion, the prompt), only for an org that opted in, and only
   * encrypted with a key the org holds: the edge stores the ciphertext as it came.
   */
  content: z
    .strictObject({
      /** The org's name for its key, e.g. `acme-2026`. */
      key_id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/, "a key's name: up to 40 letters, digits, . _ -"),
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
    task_id: TaskId,
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
