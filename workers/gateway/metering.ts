/**
 * Token metering for the inference gateway, kept off the hot path: `meter` only adds to an
 * isolate-level aggregate and hands the runtime a flush to wait for; flushes upsert the aggregate
 * into `usage_daily` with one D1 batch, one statement per (day, key, model).
 *
 * A flush starts about a second after an entry is recorded, so the requests of that second share
 * one batch. At most one flush runs at a time; entries recorded while one runs are written by the
 * next. The flush that takes an entry is always covered by a `waitUntil`: the entry's own, or that
 * of an earlier entry whose flush has not started yet (one timer serves all of them, rather than
 * one per request), so nothing is stranded in memory when the isolate goes idle; a flush
 * that fails puts its rows back for the next one (they are lost only if the isolate is evicted
 * before another request arrives).
 */
import { later } from "../later.js";

export interface UsageEntry {
  orgId: string;
  userId: string;
  keyId: string;
  /** The public model name the client asked for. */
  model: string;
  promptTokens: number;
  completionTokens: number;
  /** `Date.now()` when the request finished; decides the UTC day it is billed to. */
  at: number;
}

interface Row {
  day: string;
  orgId: string;
  userId: string;
  keyId: string;
  model: string;
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

// D1 allows 100 bound parameters per statement (8 here) and bounds the statements one invocation
// may run; a flush past this many rows is split into several batches.
const MAX_STATEMENTS_PER_BATCH = 100;

// INSERT … SELECT FROM orgs drops the usage of an org deleted since the request, instead of
// failing the whole batch on the foreign key and retrying it forever. SQLite needs the WHERE to
// tell the upsert's ON from a join's.
const UPSERT = `INSERT INTO usage_daily (day, org_id, user_id, key_id, model, requests, prompt_tokens, completion_tokens)
SELECT ?, id, ?, ?, ?, ?, ?, ? FROM orgs WHERE id = ?
ON CONFLICT (day, key_id, model) DO UPDATE SET
  requests = requests + excluded.requests,
  prompt_tokens = prompt_tokens + excluded.prompt_tokens,
  completion_tokens = completion_tokens + excluded.completion_tokens`;

const buffer = new Map<string, Row>();
/** Flushes started and finished in this isolate: an entry is written by flush number `started + 1`. */
let started = 0;
let finished = 0;
let inFlight: Promise<void> | undefined;
/** When the flush that a timer is waiting to start will start; cleared as any flush starts. */
let scheduledAt: number | undefined;

/**
 * How long a metered entry waits before its flush starts, so that the requests of that second
 * share one write and the write never competes with the stream that just ended.
 */
export const FLUSH_DELAY_MS = 1_000;

/**
 * Records one finished model request. Never throws and never waits: the write happens in a flush
 * about `delayMs` later, which the runtime keeps alive through `waitUntil`.
 *
 * @example
 * meter(c.env, (p) => c.executionCtx.waitUntil(p), {
 *   orgId: org.id, userId: user.id, keyId: key.id, model: "sextant-fast",
 *   promptTokens: usage.prompt_tokens, completionTokens: usage.completion_tokens, at: Date.now(),
 * });
 */
export function meter(
  env: Env,
  waitUntil: (p: Promise<unknown>) => void,
  entry: UsageEntry,
  delayMs = FLUSH_DELAY_MS,
): void {
  const at = Number.isFinite(entry.at) ? entry.at : Date.now();
  add({
    day: new Date(at).toISOString().slice(0, 10),
    orgId: entry.orgId,
    userId: entry.userId,
    keyId: entry.keyId,
    model: entry.model,
    requests: 1,
    promptTokens: count(entry.promptTokens),
    completionTokens: count(entry.completionTokens),
  });
  // A flush that has not started yet takes this entry too: its timer and `waitUntil` cover it.
  const due = Date.now() + delayMs;
  if (scheduledAt !== undefined && scheduledAt <= due) return;
  scheduledAt = due;
  const ticket = started + 1;
  waitUntil(later(delayMs).then(() => settle(env, ticket)));
}

/**
 * Writes everything buffered now, waiting for a flush already under way first. Resolves once it
 * is written or, if D1 failed, back in the buffer for the next flush; it never rejects.
 */
export function flushUsage(env: Env): Promise<void> {
  return settle(env, started + 1);
}

// Upstream usage figures come from model servers: a NaN or a fraction must not poison a batch.
const count = (n: number) => (Number.isFinite(n) && n > 0 ? Math.floor(n) : 0);

function add(row: Row): void {
  const id = JSON.stringify([row.day, row.keyId, row.model]);
  const held = buffer.get(id);
  if (!held) {
    buffer.set(id, { ...row });
    return;
  }
  held.requests += row.requests;
  held.promptTokens += row.promptTokens;
  held.completionTokens += row.completionTokens;
}

/**
 * Resolves once flush number `ticket` has finished. Whichever waiter finds no flush running starts
 * the next one in its own request context, so the I/O always belongs to a request still alive.
 */
async function settle(env: Env, ticket: number): Promise<void> {
  while (finished < ticket) {
    inFlight ??= flushOnce(env);
    await inFlight;
  }
}

function flushOnce(env: Env): Promise<void> {
  started++;
  // Entries from now on need a flush after this one.
  scheduledAt = undefined;
  const rows = [...buffer.values()];
  buffer.clear();
  return write(env, rows).finally(() => {
    finished++;
    inFlight = undefined;
  });
}

async function write(env: Env, rows: Row[]): Promise<void> {
  let failed = 0;
  for (let i = 0; i < rows.length; i += MAX_STATEMENTS_PER_BATCH) {
    const chunk = rows.slice(i, i + MAX_STATEMENTS_PER_BATCH);
    try {
      const upsert = env.DB.prepare(UPSERT);
      await env.DB.batch(
        chunk.map((r) =>
          upsert.bind(r.day, r.userId, r.keyId, r.model, r.requests, r.promptTokens, r.completionTokens, r.orgId),
        ),
      );
    } catch {
      // A batch is atomic: none of its rows were written, so all of them go back.
      for (const row of chunk) add(row);
      failed += chunk.length;
    }
  }
  // Counts only: ids and model names are customer data and stay out of logs.
  if (failed > 0) console.error(JSON.stringify({ level: "error", message: "usage flush failed", rows: failed }));
}
