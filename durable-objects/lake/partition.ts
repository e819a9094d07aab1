/**
 * One partition of the lake (a table's UTC hour), one object per partition: it writes the
 * partition's Parquet files, keeps the only record of which rows they hold, and compacts and
 * expires them.
 *
 * Exactly once. A row is identified by its org and id; the object keeps a hash of each identity it
 * has committed and drops any row it has seen, so a client's retried event and a queue's
 * redelivered message both land once. A batch is written as `part-<n>.parquet`, where n is one past
 * the last committed file, and committed (identities and file, one transaction) only after R2 has
 * it. A crash between the two leaves a file nothing lists, and the retry writes the same name
 * again: its rows replace the orphan's, whose own rows are not committed and come back with their
 * own redelivery. The manifest and the compaction alarm follow each commit; a commit marks the
 * partition dirty until both are done, and a failure between is finished by the next call.
 *
 * Compaction (an alarm, an hour's `LAKE_COMPACT_DELAY_SECONDS` after the hour ends, and again after
 * a late write) folds every file into one, streamed a row group at a time, and commits the swap before
 * deleting the old files. Retention (`LAKE_RETENTION_DAYS`) deletes the partition whole.
 */
import { DurableObject } from "cloudflare:workers";
import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import { LAKE_TABLES, partitionPrefix, type LakeManifest, type LakeRow, type Partition } from "../../protocol/lake.js";
import { compactDelayMs, faultEvery, retentionMs, type LakeFaults } from "./settings.js";
import { encodeRows, ParquetAssembler, readRowGroups } from "./parquet.js";
import { r2Buffer } from "./r2-buffer.js";

export interface AppendResult {
  written: number;
  duplicates: number;
  file: string | null;
}

export interface CompactResult {
  files: number;
  rows: number;
  compacted: boolean;
}

type FileRow = {
  seq: number;
  key: string;
  rows: number;
  bytes: number;
  kind: "part" | "compacted" | "obsolete";
  created_at: number;
};

const HOUR_MS = 3_600_000;
/** After a write to an hour already over, compaction waits this long for more of its late rows. */
const LATE_COMPACT_DELAY_MS = 60_000;
/** A compacted file is closed at this size and the next one started (large files, bounded memory). */
const MAX_COMPACTED_BYTES = 256 * 2 ** 20;

const identity = (org: unknown, id: unknown) =>
  sha256(new TextEncoder().encode(`${String(org)}\0${String(id)}`)).subarray(0, 16);

export class LakePartition extends DurableObject<Env & LakeFaults> {
  private readonly sql: SqlStorage;
  /** Appends and compaction run one at a time: each reads what the previous committed. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Writes this instance has made, for `LAKE_FAULT_EVERY`. */
  private writes = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.init();
  }

  private init(): void {
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS seen (id BLOB PRIMARY KEY) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS files (
        seq INTEGER PRIMARY KEY, key TEXT NOT NULL, rows INTEGER NOT NULL, bytes INTEGER NOT NULL,
        kind TEXT NOT NULL, created_at INTEGER NOT NULL
      );
      CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
    `);
  }

  private serial<T>(work: () => Promise<T>): Promise<T> {
    const run = this.queue.then(work, work);
    this.queue = run.catch(() => {});
    return run;
  }

  private partition(given?: Partition): Partition {
    const stored = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'partition'").toArray()[0];
    if (stored) return JSON.parse(stored.v) as Partition;
    if (!given) throw new Error("this lake partition has never been written");
    this.sql.exec("INSERT INTO meta (k, v) VALUES ('partition', ?)", JSON.stringify(given));
    return given;
  }

  private files(): FileRow[] {
    return this.sql.exec<FileRow>("SELECT * FROM files ORDER BY seq").toArray();
  }

  private nextSeq(): number {
    return (this.sql.exec<{ n: number | null }>("SELECT max(seq) AS n FROM files").one().n ?? 0) + 1;
  }

  /** Writes the rows this partition has not seen as one new file; answers what it wrote. */
  append(partition: Partition, rows: LakeRow[]): Promise<AppendResult> {
    return this.serial(async () => {
      const p = this.partition(partition);
      const idColumn = LAKE_TABLES[p.table].id;
      const fresh: LakeRow[] = [];
      const ids: Uint8Array[] = [];
      const batch = new Set<string>();
      for (const row of rows) {
        const id = identity(row.org_id, row[idColumn]);
        const hex = bytesToHex(id);
        if (batch.has(hex)) continue;
        batch.add(hex);
        if (this.sql.exec("SELECT 1 FROM seen WHERE id = ?", id).toArray().length) continue;
        fresh.push(row);
        ids.push(id);
      }
      if (fresh.length === 0) {
        // A redelivery after a commit whose manifest or alarm failed: finish that write's work.
        if (this.dirty()) await this.publish(p, Date.now());
        return { written: 0, duplicates: rows.length, file: null };
      }
      const seq = this.nextSeq();
      const key = `${partitionPrefix(p)}part-${String(seq).padStart(6, "0")}.parquet`;
      const bytes = encodeRows(p.table, fresh);
      await this.env.LAKE.put(key, bytes, { httpMetadata: { contentType: "application/vnd.apache.parquet" } });
      const every = faultEvery(this.env);
      if (every && ++this.writes % every === 0)
        throw new Error("injected lake fault: the file was written, not committed");
      const now = Date.now();
      this.ctx.storage.transactionSync(() => {
        for (const id of ids) this.sql.exec("INSERT INTO seen (id) VALUES (?)", id);
        this.sql.exec(
          "INSERT INTO files (seq, key, rows, bytes, kind, created_at) VALUES (?, ?, ?, ?, 'part', ?)",
          seq,
          key,
          fresh.length,
          bytes.byteLength,
          now,
        );
        this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('dirty', '1')");
      });
      await this.publish(p, now);
      return { written: fresh.length, duplicates: rows.length - fresh.length, file: key };
    });
  }

  private dirty(): boolean {
    return this.sql.exec("SELECT 1 FROM meta WHERE k = 'dirty'").toArray().length > 0;
  }

  /**
   * After a commit: the manifest rewritten and compaction scheduled. The commit marks the partition
   * dirty and this clears it, so a failure here is finished by the next call (a redelivery finds its
   * rows committed and calls this alone).
   */
  private async publish(p: Partition, now: number): Promise<void> {
    await this.schedule(p, now);
    await this.publishManifest(p);
  }

  private async publishManifest(p: Partition): Promise<void> {
    await this.writeManifest(p);
    this.sql.exec("DELETE FROM meta WHERE k = 'dirty'");
  }

  /** Folds the partition's files into as few as `MAX_COMPACTED_BYTES` allows; a no-op when it is one file. */
  compact(): Promise<CompactResult> {
    return this.serial(() => this.compactNow());
  }

  private async compactNow(): Promise<CompactResult> {
    const p = this.partition();
    await this.deleteObsolete();
    const live = this.files();
    const rows = live.reduce((n, f) => n + f.rows, 0);
    if (live.length <= 1) {
      await this.sweepOrphans(p);
      if (this.dirty()) await this.publishManifest(p);
      return { files: live.length, rows, compacted: false };
    }
    let seq = this.nextSeq();
    const outputs: { seq: number; key: string; rows: number; bytes: number }[] = [];
    let file = new ParquetAssembler(p.table);
    const close = async () => {
      const key = `${partitionPrefix(p)}compacted-${String(seq).padStart(6, "0")}.parquet`;
      const bytes = file.finish();
      await this.env.LAKE.put(key, bytes, { httpMetadata: { contentType: "application/vnd.apache.parquet" } });
      outputs.push({ seq, key, rows: file.rows, bytes: bytes.byteLength });
      seq += 1;
      file = new ParquetAssembler(p.table);
    };
    for (const input of live) {
      for await (const group of readRowGroups(r2Buffer(this.env.LAKE, input.key, input.bytes))) {
        file.add(group);
        if (file.size >= MAX_COMPACTED_BYTES) await close();
      }
    }
    if (file.rows > 0) await close();
    const now = Date.now();
    this.ctx.storage.transactionSync(() => {
      for (const input of live) this.sql.exec("UPDATE files SET kind = 'obsolete' WHERE seq = ?", input.seq);
      for (const out of outputs)
        this.sql.exec(
          "INSERT INTO files (seq, key, rows, bytes, kind, created_at) VALUES (?, ?, ?, ?, 'compacted', ?)",
          out.seq,
          out.key,
          out.rows,
          out.bytes,
          now,
        );
      this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('compacted_at', ?)", String(now));
      this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('dirty', '1')");
    });
    await this.deleteObsolete();
    await this.sweepOrphans(p);
    await this.publishManifest(p);
    return { files: outputs.length, rows, compacted: true };
  }

  /**
   * Deletes files under the partition that it never committed: a write that died between its file
   * and its commit, whose retry never came back to this partition. Appends wait while this runs, so
   * none is half done.
   */
  private async sweepOrphans(p: Partition): Promise<void> {
    const known = new Set(this.files().map((f) => f.key));
    const orphans: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.env.LAKE.list({ prefix: partitionPrefix(p), cursor });
      for (const object of page.objects)
        if (object.key.endsWith(".parquet") && !known.has(object.key)) orphans.push(object.key);
      cursor = page.truncated ? page.cursor : undefined;
    } while (cursor);
    for (let i = 0; i < orphans.length; i += 1000) await this.env.LAKE.delete(orphans.slice(i, i + 1000));
  }

  /** Files a committed compaction replaced: deleted, then forgotten (a failed delete is retried next time). */
  private async deleteObsolete(): Promise<void> {
    const obsolete = this.sql
      .exec<{ seq: number; key: string }>("SELECT seq, key FROM files WHERE kind = 'obsolete'")
      .toArray();
    if (obsolete.length === 0) return;
    for (let i = 0; i < obsolete.length; i += 1000)
      await this.env.LAKE.delete(obsolete.slice(i, i + 1000).map((f) => f.key));
    for (const f of obsolete) this.sql.exec("DELETE FROM files WHERE seq = ?", f.seq);
  }

  /** The partition's manifest as it stands (also written beside its files). */
  manifest(): LakeManifest | null {
    const stored = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'partition'").toArray()[0];
    if (!stored) return null;
    return this.describe(JSON.parse(stored.v) as Partition);
  }

  private describe(p: Partition): LakeManifest {
    const live = this.files().filter((f) => f.kind !== "obsolete");
    const compacted = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'compacted_at'").toArray()[0];
    return {
      table: p.table,
      day: p.day,
      hour: p.hour,
      rows: live.reduce((n, f) => n + f.rows, 0),
      files: live.map((f) => ({
        key: f.key,
        rows: f.rows,
        bytes: f.bytes,
        kind: f.kind === "compacted" ? "compacted" : "part",
        createdAt: new Date(f.created_at).toISOString(),
      })),
      compactedAt: compacted ? new Date(Number(compacted.v)).toISOString() : null,
      updatedAt: new Date().toISOString(),
    };
  }

  private async writeManifest(p: Partition): Promise<void> {
    await this.env.LAKE.put(`${partitionPrefix(p)}_manifest.json`, JSON.stringify(this.describe(p)), {
      httpMetadata: { contentType: "application/json" },
    });
  }

  private hourEnd(p: Partition): number {
    return Date.parse(`${p.day}T${p.hour}:00:00Z`) + HOUR_MS;
  }

  private expiresAt(p: Partition): number {
    return this.hourEnd(p) + retentionMs(this.env);
  }

  /** Arms the alarm for the partition's compaction after a write at `now`. */
  private async schedule(p: Partition, now: number): Promise<void> {
    const end = this.hourEnd(p);
    const due =
      now >= end ? now + Math.min(LATE_COMPACT_DELAY_MS, compactDelayMs(this.env)) : end + compactDelayMs(this.env);
    this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('compact_due', ?)", String(due));
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current > due || current <= now) await this.ctx.storage.setAlarm(due);
  }

  override async alarm(): Promise<void> {
    const stored = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'partition'").toArray()[0];
    if (!stored) return;
    const p = JSON.parse(stored.v) as Partition;
    const now = Date.now();
    if (now >= this.expiresAt(p)) {
      await this.serial(async () => {
        const keys = this.files().map((f) => f.key);
        for (let i = 0; i < keys.length; i += 1000) await this.env.LAKE.delete(keys.slice(i, i + 1000));
        await this.env.LAKE.delete(`${partitionPrefix(p)}_manifest.json`);
        await this.ctx.storage.deleteAll();
        this.init();
      });
      return;
    }
    const next = await this.serial(async () => {
      const due = this.compactDue();
      if (due && now >= due) {
        await this.compactNow();
        // A write during the compaction set a later due time: that one stands.
        if (this.compactDue() === due) this.sql.exec("DELETE FROM meta WHERE k = 'compact_due'");
      }
      const pending = this.compactDue();
      return pending && pending > now ? pending : this.expiresAt(p);
    });
    await this.ctx.storage.setAlarm(next);
  }

  private compactDue(): number {
    return Number(this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'compact_due'").toArray()[0]?.v ?? 0);
  }
}
