/**
 * The records queue's consumer: each batch's rows grouped by partition (table, UTC day and hour of
 * the row's time) and handed to that partition's object, which writes them exactly once. A message
 * is acknowledged once every partition its rows went to has committed them; otherwise it is retried
 * (with backoff), and after the queue's `max_retries` it goes to the dead-letter queue, whose
 * consumer keeps it as JSON under `dead-letter/` in the lake's bucket.
 */
import {
  LAKE_TABLES,
  partitionName,
  partitionOf,
  type LakeMessage,
  type LakeRow,
  type Partition,
} from "../../protocol/lake.js";
import { faultEvery, writeTimeoutMs, type LakeFaults } from "../../durable-objects/lake/settings.js";
import { withDeadline } from "../../protocol/sleep.js";

/** Partitions written at once from one batch. */
const PARALLEL_PARTITIONS = 6;

function isLakeMessage(body: unknown): body is LakeMessage {
  if (typeof body !== "object" || body === null) return false;
  const m = body as Partial<LakeMessage>;
  return (
    m.v === 1 &&
    typeof m.table === "string" &&
    Object.hasOwn(LAKE_TABLES, m.table) &&
    Array.isArray(m.rows) &&
    m.rows.every(
      (row) => typeof row === "object" && row !== null && typeof row.at === "number" && Number.isFinite(row.at),
    )
  );
}

/** Batches this isolate has taken, for `LAKE_FAULT_EVERY`. */
let batches = 0;

const backoff = (attempts: number) => Math.min(60, 2 ** attempts);

/** Where a message that can never be written is kept, for an operator to read or replay. */
async function keepDeadLetter(env: Env, message: Message<unknown>, queue: string): Promise<void> {
  const day = message.timestamp.toISOString().slice(0, 10);
  await env.LAKE.put(
    `dead-letter/day=${day}/${message.id}.json`,
    JSON.stringify({
      queue,
      id: message.id,
      timestamp: message.timestamp,
      attempts: message.attempts,
      body: message.body,
    }),
    { httpMetadata: { contentType: "application/json" } },
  );
}

export async function consumeRecords(batch: MessageBatch<unknown>, env: Env & LakeFaults): Promise<void> {
  if (batch.queue.endsWith("-dlq")) {
    for (const message of batch.messages) {
      await keepDeadLetter(env, message, batch.queue);
      message.ack();
    }
    return;
  }
  const groups = new Map<string, { partition: Partition; rows: LakeRow[]; messages: Set<Message<unknown>> }>();
  const pending = new Map<Message<unknown>, Set<string>>();
  for (const message of batch.messages) {
    if (!isLakeMessage(message.body)) {
      // Not something this edge sent: it would fail every retry.
      await keepDeadLetter(env, message, batch.queue);
      message.ack();
      continue;
    }
    const { table, rows } = message.body;
    const names = new Set<string>();
    for (const row of rows) {
      const partition = partitionOf(table, row.at as number);
      const name = partitionName(partition);
      let group = groups.get(name);
      if (!group) groups.set(name, (group = { partition, rows: [], messages: new Set() }));
      group.rows.push(row);
      group.messages.add(message);
      names.add(name);
    }
    pending.set(message, names);
  }

  const failed = new Set<string>();
  const work = [...groups.entries()];
  const timeoutMs = writeTimeoutMs(env);
  const run = async () => {
    for (let next = work.shift(); next; next = work.shift()) {
      const [name, group] = next;
      // A write that does not answer in time is given up on and its messages delivered again: one
      // partition that hangs must not hold up every other (the queue delivers nothing more from this
      // consumer until the batch ends). A write given up on may still commit; the partition drops
      // the retry's rows it has seen, so they land once either way.
      let failure: { message: string; error: string } | undefined;
      try {
        const stub = env.LAKE_PARTITION.get(env.LAKE_PARTITION.idFromName(name));
        const answer = await withDeadline(stub.append(group.partition, group.rows), Date.now() + timeoutMs);
        if (answer === "deadline")
          failure = { message: "lake partition write timed out", error: `no answer after ${timeoutMs} ms` };
      } catch (err) {
        failure = { message: "lake partition write failed", error: String(err) };
      }
      if (failure) {
        failed.add(name);
        console.error(JSON.stringify({ level: "warn", ...failure, partition: name, rows: group.rows.length }));
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_PARTITIONS, work.length) }, run));

  // A forced redelivery (`LAKE_FAULT_EVERY`, for testing): everything was written, nothing acknowledged.
  const every = faultEvery(env);
  let retried = 0;
  if (every && ++batches % every === 0) {
    console.error(JSON.stringify({ level: "warn", message: "lake batch redelivered on purpose (LAKE_FAULT_EVERY)" }));
    batch.retryAll({ delaySeconds: 0 });
    retried = pending.size;
  } else
    for (const [message, names] of pending) {
      if ([...names].some((n) => failed.has(n))) {
        message.retry({ delaySeconds: backoff(message.attempts) });
        retried++;
      } else message.ack();
    }
  consumed(batch, groups.size, failed.size, retried);
}

/**
 * One line as the consumer returns a batch, counts only: with the queue's own line for the batch
 * (Miniflare's `QUEUE <name> acked/total`, once the delivery returns), it tells a consumer that never
 * returned from a delivery that never came back.
 */
function consumed(batch: MessageBatch<unknown>, partitions: number, failed: number, retried: number): void {
  console.log(
    JSON.stringify({
      level: "info",
      message: "lake batch consumed",
      queue: batch.queue,
      messages: batch.messages.length,
      partitions,
      failed,
      retried,
    }),
  );
}
