/**
 * The edge's own records for the lake (`edge_requests`, `refusals`), sent off the hot path: a row
 * joins an isolate-level buffer, and one send about a second later takes every row of that second
 * to the records queue. A send that fails puts its rows back for the next (up to `MAX_BUFFERED` a
 * table; past that the oldest are dropped and counted in the log), so a queue outage costs memory
 * for a while, not requests. Rows carry ids, names and numbers, never a prompt or an answer.
 */
import type { LakeRow, LakeTable } from "../../protocol/lake.js";
import { later } from "../later.js";
import { sendRows } from "../../durable-objects/lake/send.js";

const FLUSH_DELAY_MS = 1_000;
const MAX_BUFFERED = 20_000;

const buffers = new Map<LakeTable, LakeRow[]>();
let scheduled = false;

async function flush(env: Env): Promise<void> {
  scheduled = false;
  const taken = [...buffers.entries()];
  buffers.clear();
  for (const [table, rows] of taken) {
    if (rows.length === 0) continue;
    try {
      // A row sent twice (a send that failed part way, then again) is stored once: ids are unique.
      await sendRows(env.RECORDS, table, rows);
    } catch (err) {
      let held = [...rows, ...(buffers.get(table) ?? [])];
      const dropped = Math.max(0, held.length - MAX_BUFFERED);
      if (dropped) held = held.slice(dropped);
      buffers.set(table, held);
      console.error(
        JSON.stringify({
          level: "warn",
          message: "edge records held back",
          table,
          rows: held.length,
          dropped,
          error: String(err),
        }),
      );
    }
  }
}

/** Records one row of `table` (its `record_id` is added); never throws and never waits. */
export function record(env: Env, waitUntil: (p: Promise<unknown>) => void, table: LakeTable, row: LakeRow): void {
  let rows = buffers.get(table);
  if (!rows) buffers.set(table, (rows = []));
  rows.push({ record_id: crypto.randomUUID(), ...row });
  if (rows.length > MAX_BUFFERED) rows.shift();
  if (scheduled) return;
  scheduled = true;
  waitUntil(later(FLUSH_DELAY_MS).then(() => flush(env)));
}
