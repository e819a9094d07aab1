/**
 * `POST /v1/events`: editor events in, a batch at a time. Each event is validated on its own: a bad
 * one is refused in the answer with its reason and the rest are taken. Taken events go to the
 * records queue and on to the lake, which keeps one row per org and event id.
 */
import { Hono } from "hono";
import {
  EditorEvent,
  EventsRequest,
  MAX_EVENT_AGE_DAYS,
  MAX_EVENT_SKEW_MS,
  type EventRefusal,
  type EventsResponse,
  type ParsedEditorEvent,
} from "../../protocol/events.js";
import type { LakeRow } from "../../protocol/lake.js";
import type { AppEnv } from "../app-env.js";
import type { Principal } from "../auth/principal.js";
import { retentionMs } from "../../durable-objects/lake/settings.js";
import { sendRows } from "../../durable-objects/lake/send.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;

/**
 * The oldest time an event may have: `MAX_EVENT_AGE_DAYS` back (the window the lake deduplicates
 * over), or less when the lake keeps partitions a shorter time (`LAKE_RETENTION_DAYS`, counted from
 * the end of each hour), so that no accepted event lands in a partition already expired.
 */
function oldestEventTime(env: Env, now: number): number {
  const retention = retentionMs(env);
  return Math.max(now - MAX_EVENT_AGE_DAYS * DAY_MS, Math.floor((now - retention) / HOUR_MS) * HOUR_MS);
}

function rowOf(event: ParsedEditorEvent, principal: Principal, receivedAt: number): LakeRow {
  const { id, content, ...fields } = event;
  return {
    ...fields,
    event_id: id,
    received_at: receivedAt,
    org_id: principal.org.id,
    user_id: principal.user.id,
    key_id: principal.key.id,
    content_key_id: content?.key_id,
    content: content?.ciphertext,
  };
}

const idOf = (raw: unknown) =>
  typeof raw === "object" && raw !== null && typeof (raw as { id?: unknown }).id === "string"
    ? (raw as { id: string }).id.slice(0, 128)
    : null;

export const events = new Hono<AppEnv>().post("/", requireApiKey, limit("events"), async (c) => {
  const body = await jsonBody(c, EventsRequest);
  const principal = c.get("principal");
  const now = Date.now();
  const refused: EventRefusal[] = [];
  const rows: LakeRow[] = [];
  const ids = new Set<string>();
  let duplicates = 0;
  const oldest = oldestEventTime(c.env, now);
  body.events.forEach((raw, index) => {
    const id = idOf(raw);
    const parsed = EditorEvent.safeParse(raw);
    if (!parsed.success) {
      const errors = parsed.error.issues.map((issue) => ({
        path: issue.path.map(String).join(".") || "(event)",
        message: issue.message,
      }));
      refused.push({
        index,
        id,
        code: "invalid_event",
        detail: errors.map((e) => `${e.path}: ${e.message}`).join("; "),
        errors,
      });
      return;
    }
    const event = parsed.data;
    if (event.at < oldest || event.at > now + MAX_EVENT_SKEW_MS) {
      refused.push({
        index,
        id,
        code: "event_time_out_of_range",
        detail: `at (${new Date(event.at).toISOString()}) must lie after ${new Date(oldest).toISOString()} (the lake's dedupe window and retention) and not ahead of the edge's clock.`,
      });
      return;
    }
    if (event.content && principal.org.eventContent !== "sealed") {
      refused.push({
        index,
        id,
        code: "content_not_enabled",
        detail:
          "This org has not opted in to keeping event content (an admin sets its eventContent to sealed); send the event without `content`.",
      });
      return;
    }
    if (ids.has(event.id)) {
      duplicates += 1;
      return;
    }
    ids.add(event.id);
    rows.push(rowOf(event, principal, now));
  });
  if (rows.length === 0)
    throw new ApiError("invalid_request", `Every event was refused: ${refused[0]!.detail}`, {
      errors: refused.map((r) => ({ path: `events.${r.index}`, message: `${r.code}: ${r.detail}` })),
      extra: { refused },
    });
  try {
    await sendRows(c.env.RECORDS, "editor_events", rows);
  } catch (err) {
    console.error(JSON.stringify({ level: "error", message: "records queue refused events", error: String(err) }));
    throw new ApiError("unavailable", "The event queue is unavailable; send the batch again shortly.", {
      headers: { "Retry-After": "5" },
    });
  }
  return c.json({ accepted: rows.length, duplicates, refused } satisfies EventsResponse, 202);
});
