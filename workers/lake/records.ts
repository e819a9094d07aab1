/**
 * The edge's own record of each model request, sent to the lake (`edge_requests`) off the hot
 * path: a finished request's row joins an isolate-level buffer, and one send about a second later
 * takes every row of that second to the records queue. A send that fails puts its rows back for the
 * next (up to `MAX_BUFFERED`; past that the oldest are dropped and counted in the log), so a queue
 * outage costs memory for a while, not requests. Rows carry ids, names and numbers, never a prompt
 * or an answer.
 */
import type { LakeRow } from "../../protocol/lake.js";
import { later } from "../later.js";
import { sendRows } from "./send.js";

const FLUSH_DELAY_MS = 1_000;
const MAX_BUFFERED = 20_000;

let buffer: LakeRow[] = [];
let scheduled = false;

async function flush(env: Env): Promise<void> {
  scheduled = false;
  const rows = buffer;
  buffer = [];
  if (rows.length === 0) return;
  try {
    // A row sent twice (a send that failed part way, then again) is stored once: ids are unique.
    await sendRows(env.RECORDS, "edge_requests", rows);
  } catch (err) {
    buffer = [...rows, ...buffer];
    const dropped = Math.max(0, buffer.length - MAX_BUFFERED);
    if (dropped) buffer = buffer.slice(dropped);
    console.error(
      JSON.stringify({
        level: "warn",
        message: "edge records held back",
        rows: buffer.length,
        dropped,
        error: String(err),
      }),
    );
  }
}

/** Records one finished request; never throws and never waits. */
export function recordRequest(env: Env, waitUntil: (p: Promise<unknown>) => void, row: LakeRow): void {
  buffer.push(row);
  if (buffer.length > MAX_BUFFERED) buffer.shift();
  if (scheduled) return;
  scheduled = true;
  waitUntil(later(FLUSH_DELAY_MS).then(() => flush(env)));
}

/** Sends what is buffered now (tests, and an isolate about to be idle). */
export const flushRecords = (env: Env) => flush(env);
