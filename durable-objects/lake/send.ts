/**
 * Rows onto the records queue (from the edge's routes and from objects alike), packed into messages under the queue's size limits: a message
 * holds one table's rows, at most `MESSAGE_BYTES` of them, and one `sendBatch` at most
 * `BATCH_MESSAGES` messages and `BATCH_BYTES` in all.
 */
import type { LakeMessage, LakeRow, LakeTable } from "../../protocol/lake.js";

// Queues allow 128 KB a message and 256 KB a batch; the margin covers the message's own framing.
const MESSAGE_BYTES = 96 * 1024;
const BATCH_MESSAGES = 100;
const BATCH_BYTES = 192 * 1024;

const encoder = new TextEncoder();

/**
 * Sends `rows` of `table`; rejects if the queue refused any. Some may have been sent by then: sending
 * them all again is safe, since the lake keeps one row per identity.
 */
export async function sendRows(queue: Queue<LakeMessage>, table: LakeTable, rows: readonly LakeRow[]): Promise<void> {
  const messages: { body: LakeMessage; bytes: number }[] = [];
  let current: LakeRow[] = [];
  let size = 0;
  const close = () => {
    if (current.length) messages.push({ body: { v: 1, table, rows: current }, bytes: size });
    current = [];
    size = 0;
  };
  for (const row of rows) {
    const bytes = encoder.encode(JSON.stringify(row)).byteLength + 1;
    if (size + bytes > MESSAGE_BYTES) close();
    current.push(row);
    size += bytes;
  }
  close();
  let batch: MessageSendRequest<LakeMessage>[] = [];
  let batchBytes = 0;
  for (const message of messages) {
    if (batch.length && (batch.length >= BATCH_MESSAGES || batchBytes + message.bytes > BATCH_BYTES)) {
      await queue.sendBatch(batch);
      batch = [];
      batchBytes = 0;
    }
    batch.push({ body: message.body, contentType: "json" });
    batchBytes += message.bytes;
  }
  if (batch.length) await queue.sendBatch(batch);
}
