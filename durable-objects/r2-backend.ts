import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import { HotIndex, type HotIndexOptions, type TranslatedTerm } from "./hot-index.js";
import type { BackendEntry, BackendFilter, BackendHit, IndexBackend } from "./index-backend.js";
import { decodeSegment, encodeSegment, languageCode, quantize, type RawEntry } from "./segment.js";

/** Compaction writes segments of at most this many entries. */
export const SEGMENT_ENTRIES = 16_384;
/** A segment this small is merged with others once there are enough of them. */
const SMALL_SEGMENT = 2048;
const SMALL_SEGMENTS_BEFORE_MERGE = 8;
/** A segment with less than this share of live entries is rewritten. */
const MIN_LIVE_SHARE = 0.5;
const IN_BATCH = 90;

export interface R2BackendOptions extends HotIndexOptions {
  /** Suffix of this backend's manifest tables, so that two backends (index generations) share one database. */
  tables?: string;
}

export interface CompactionReport {
  /** Segments read and replaced. */
  rewritten: number;
  /** Segments with no live entry, deleted outright. */
  dropped: number;
  /** Segments written. */
  written: number;
  /** Live entries moved into the new segments. */
  moved: number;
}

/**
 * The embedded index backend: vectors and keyed terms in immutable, content-addressed R2 segments;
 * which segment and slot holds each live entry (the manifest) in the Durable Object's SQLite; and a
 * `HotIndex` in memory, built from R2 on first use and then kept current by every write and
 * removal. A write stores its segment before the manifest names it, so a crash leaves at worst an
 * unreferenced object, never a manifest row without its data. Removal only updates the manifest;
 * `compact` later rewrites sparse and small segments and deletes what nothing references.
 */
export class R2Backend implements IndexBackend {
  #hot: HotIndex | null = null;
  #loading: Promise<HotIndex> | null = null;
  /** Bumped by every change, so a load that raced one starts again. */
  #generation = 0;
  readonly #segments: string;
  readonly #entries: string;

  constructor(
    private readonly sql: SqlStorage,
    private readonly transaction: <T>(fn: () => T) => T,
    private readonly bucket: R2Bucket,
    private readonly prefix: string,
    readonly dims: number,
    private readonly options: R2BackendOptions = {},
  ) {
    const segments = (this.#segments = `r2_segments${options.tables ?? ""}`);
    const entries = (this.#entries = `r2_entries${options.tables ?? ""}`);
    sql.exec(`CREATE TABLE IF NOT EXISTS ${segments} (
      key TEXT PRIMARY KEY,
      entries INTEGER NOT NULL,
      live INTEGER NOT NULL,
      bytes INTEGER NOT NULL
    )`);
    sql.exec(`CREATE TABLE IF NOT EXISTS ${entries} (
      id INTEGER PRIMARY KEY,
      segment TEXT NOT NULL,
      slot INTEGER NOT NULL,
      path TEXT NOT NULL
    )`);
    sql.exec(`CREATE INDEX IF NOT EXISTS ${entries}_by_path ON ${entries} (path)`);
    sql.exec(`CREATE INDEX IF NOT EXISTS ${entries}_by_segment ON ${entries} (segment)`);
  }

  async write(entries: readonly BackendEntry[]): Promise<void> {
    if (entries.length === 0) return;
    const raw = entries.map((e) => quantize(e, this.dims));
    const bytes = encodeSegment(raw, this.dims);
    const key = `${this.prefix}/segments/${bytesToHex(sha256(bytes))}`;
    await this.bucket.put(key, bytes);
    this.#generation++;
    this.transaction(() => {
      this.sql.exec(
        `INSERT INTO ${this.#segments} (key, entries, live, bytes) VALUES (?, ?, 0, ?) ON CONFLICT (key) DO NOTHING`,
        key,
        raw.length,
        bytes.length,
      );
      raw.forEach((entry, slot) => {
        const previous = this.sql
          .exec<{ segment: string }>(`SELECT segment FROM ${this.#entries} WHERE id = ?`, entry.id)
          .toArray()[0];
        if (previous) this.sql.exec(`UPDATE ${this.#segments} SET live = live - 1 WHERE key = ?`, previous.segment);
        this.sql.exec(
          `INSERT OR REPLACE INTO ${this.#entries} (id, segment, slot, path) VALUES (?, ?, ?, ?)`,
          entry.id,
          key,
          slot,
          entries[slot]!.path,
        );
      });
      this.sql.exec(`UPDATE ${this.#segments} SET live = live + ? WHERE key = ?`, raw.length, key);
    });
    if (this.#hot)
      for (const entry of raw) {
        this.#hot.remove(entry.id);
        this.#hot.add(entry);
      }
  }

  async remove(ids: readonly string[]): Promise<void> {
    const numbers = ids.map(Number);
    this.#generation++;
    this.transaction(() => {
      for (let i = 0; i < numbers.length; i += IN_BATCH) {
        const batch = numbers.slice(i, i + IN_BATCH);
        const marks = batch.map(() => "?").join(",");
        const bySegment = this.sql
          .exec<{
            segment: string;
            n: number;
          }>(`SELECT segment, count(*) AS n FROM ${this.#entries} WHERE id IN (${marks}) GROUP BY segment`, ...batch)
          .toArray();
        for (const { segment, n } of bySegment)
          this.sql.exec(`UPDATE ${this.#segments} SET live = live - ? WHERE key = ?`, n, segment);
        this.sql.exec(`DELETE FROM ${this.#entries} WHERE id IN (${marks})`, ...batch);
      }
    });
    if (this.#hot) for (const id of numbers) this.#hot.remove(id);
  }

  async queryVector(vector: Float32Array, k: number, filter: BackendFilter): Promise<BackendHit[]> {
    const hot = await this.hot();
    return hot.queryVector(vector, k, this.#filter(hot, filter)).map(({ id, score }) => ({ id: String(id), score }));
  }

  async queryTerms(
    terms: readonly number[],
    k: number,
    filter: BackendFilter,
    weights?: readonly number[],
  ): Promise<BackendHit[]> {
    const hot = await this.hot();
    const hits = hot.queryTerms(terms, k, this.#filter(hot, filter), weights);
    return (hits ?? []).map(({ id, score }) => ({ id: String(id), score }));
  }

  async queryTranslated(
    words: readonly TranslatedTerm[],
    k: number,
    filter: BackendFilter,
    weights?: readonly number[],
  ): Promise<BackendHit[]> {
    const hot = await this.hot();
    const hits = hot.queryTranslated(words, k, this.#filter(hot, filter), weights);
    return (hits ?? []).map(({ id, score }) => ({ id: String(id), score }));
  }

  /** Deletes the segments it wrote (under `prefix/segments/`) and forgets them. */
  async destroy(): Promise<void> {
    await deletePrefix(this.bucket, `${this.prefix}/segments`);
    this.sql.exec(`DELETE FROM ${this.#entries}`);
    this.sql.exec(`DELETE FROM ${this.#segments}`);
    this.#hot = null;
  }

  /** Live entries, segments and their bytes on R2, the hot index's memory, and the definition pieces it holds. */
  stats(): {
    entries: number;
    segments: number;
    segmentBytes: number;
    hotBytes: number | null;
    exact: boolean | null;
    pieces: number | null;
  } {
    const row = this.sql.exec(`SELECT count(*) AS n, coalesce(sum(bytes), 0) AS b FROM ${this.#segments}`).one();
    const entries = Number(this.sql.exec(`SELECT count(*) AS n FROM ${this.#entries}`).one().n);
    return {
      entries,
      segments: Number(row.n),
      segmentBytes: Number(row.b),
      hotBytes: this.#hot?.bytes ?? null,
      exact: this.#hot?.exact ?? null,
      pieces: this.#hot?.pieceCount ?? null,
    };
  }

  /** Whether `compact` has work: a segment with nothing live, sparse ones, or many small ones. */
  needsCompaction(): boolean {
    const row = this.sql
      .exec(
        `SELECT sum(live = 0) AS empty, sum(live > 0 AND live < entries * ?) AS sparse, sum(live > 0 AND entries < ?) AS small FROM ${this.#segments}`,
        MIN_LIVE_SHARE,
        SMALL_SEGMENT,
      )
      .one();
    return Number(row.empty) > 0 || Number(row.sparse) > 0 || Number(row.small) >= SMALL_SEGMENTS_BEFORE_MERGE;
  }

  /**
   * Rewrites sparse segments, merges small ones, and deletes segments nothing references. Live
   * entries are copied byte for byte (never re-quantized), so search results do not change.
   * Safe against writes and removals that interleave with its reads: only entries still in a
   * victim segment when the manifest is updated are moved.
   */
  async compact(): Promise<CompactionReport> {
    const segments = this.sql
      .exec<{ key: string; entries: number; live: number }>(`SELECT key, entries, live FROM ${this.#segments}`)
      .toArray();
    const empty = segments.filter((s) => s.live <= 0);
    const sparse = segments.filter((s) => s.live > 0 && s.live < s.entries * MIN_LIVE_SHARE);
    const small = segments.filter(
      (s) => s.live > 0 && s.live >= s.entries * MIN_LIVE_SHARE && s.entries < SMALL_SEGMENT,
    );
    const victims = [...sparse, ...(small.length >= SMALL_SEGMENTS_BEFORE_MERGE || sparse.length > 0 ? small : [])];
    const report: CompactionReport = { rewritten: 0, dropped: 0, written: 0, moved: 0 };

    if (victims.length > 0) {
      const moving: RawEntry[] = [];
      for (const victim of victims) {
        const object = await this.bucket.get(victim.key);
        if (!object) throw new Error(`Index segment ${victim.key} is missing from R2.`);
        const decoded = decodeSegment(new Uint8Array(await object.arrayBuffer()), this.dims);
        const live = new Set(
          this.sql
            .exec<{ slot: number }>(`SELECT slot FROM ${this.#entries} WHERE segment = ?`, victim.key)
            .toArray()
            .map((r) => r.slot),
        );
        decoded.forEach((entry, slot) => live.has(slot) && moving.push(entry));
      }
      moving.sort((a, b) => a.id - b.id);
      const written: { key: string; entries: RawEntry[]; bytes: number }[] = [];
      for (let i = 0; i < moving.length; i += SEGMENT_ENTRIES) {
        const entries = moving.slice(i, i + SEGMENT_ENTRIES);
        const bytes = encodeSegment(entries, this.dims);
        const key = `${this.prefix}/segments/${bytesToHex(sha256(bytes))}`;
        await this.bucket.put(key, bytes);
        written.push({ key, entries, bytes: bytes.length });
      }
      const victimKeys = new Set(victims.map((v) => v.key));
      this.transaction(() => {
        for (const segment of written) {
          this.sql.exec(
            `INSERT INTO ${this.#segments} (key, entries, live, bytes) VALUES (?, ?, 0, ?) ON CONFLICT (key) DO NOTHING`,
            segment.key,
            segment.entries.length,
            segment.bytes,
          );
          segment.entries.forEach((entry, slot) => {
            const current = this.sql
              .exec<{ segment: string }>(`SELECT segment FROM ${this.#entries} WHERE id = ?`, entry.id)
              .toArray()[0];
            // Removed, or rewritten by a newer write, while this compaction was reading.
            if (!current || !victimKeys.has(current.segment)) return;
            this.sql.exec(
              `UPDATE ${this.#entries} SET segment = ?, slot = ? WHERE id = ?`,
              segment.key,
              slot,
              entry.id,
            );
            this.sql.exec(`UPDATE ${this.#segments} SET live = live + 1 WHERE key = ?`, segment.key);
            report.moved++;
          });
        }
        for (const key of victimKeys) {
          const left = Number(
            this.sql.exec(`SELECT count(*) AS n FROM ${this.#entries} WHERE segment = ?`, key).one().n,
          );
          if (left === 0) this.sql.exec(`DELETE FROM ${this.#segments} WHERE key = ?`, key);
          else this.sql.exec(`UPDATE ${this.#segments} SET live = ? WHERE key = ?`, left, key);
        }
      });
      const gone = [...victimKeys].filter(
        (key) => this.sql.exec(`SELECT 1 FROM ${this.#segments} WHERE key = ?`, key).toArray().length === 0,
      );
      if (gone.length > 0) await this.bucket.delete(gone);
      report.rewritten = gone.length;
      report.written = written.length;
    }

    const drop = empty.filter(
      (s) => Number(this.sql.exec(`SELECT count(*) AS n FROM ${this.#entries} WHERE segment = ?`, s.key).one().n) === 0,
    );
    if (drop.length > 0) {
      this.transaction(() => {
        for (const { key } of drop) this.sql.exec(`DELETE FROM ${this.#segments} WHERE key = ? AND live <= 0`, key);
      });
      await this.bucket.delete(drop.map((s) => s.key));
      report.dropped = drop.length;
    }
    return report;
  }

  /** The hot index, built from the manifest and R2 once per object lifetime. */
  async hot(): Promise<HotIndex> {
    if (this.#hot) return this.#hot;
    this.#loading ??= this.#load().finally(() => (this.#loading = null));
    return this.#loading;
  }

  async #load(): Promise<HotIndex> {
    for (;;) {
      const generation = this.#generation;
      const hot = await this.#read();
      if (generation === this.#generation) return (this.#hot = hot);
    }
  }

  async #read(): Promise<HotIndex> {
    const hot = new HotIndex(this.dims, this.options);
    const segments = this.sql
      .exec<{ key: string }>(`SELECT key FROM ${this.#segments} WHERE live > 0 ORDER BY key`)
      .toArray();
    for (const { key } of segments) {
      const object = await this.bucket.get(key);
      if (!object) throw new Error(`Index segment ${key} is missing from R2.`);
      const decoded = decodeSegment(new Uint8Array(await object.arrayBuffer()), this.dims);
      const live = this.sql
        .exec<{ id: number; slot: number }>(`SELECT id, slot FROM ${this.#entries} WHERE segment = ?`, key)
        .toArray();
      for (const { slot } of live) hot.add(decoded[slot]!);
    }
    return hot;
  }

  #filter(hot: HotIndex, filter: BackendFilter) {
    const language = filter.language === undefined ? undefined : languageCode(filter.language);
    if (!filter.pathPrefix) return language === undefined ? {} : { language };
    const below = `${filter.pathPrefix}/`;
    const ids = this.sql
      .exec<{ id: number }>(
        `SELECT id FROM ${this.#entries} WHERE path >= ? AND path < ?`,
        below,
        `${filter.pathPrefix}0`,
      )
      .toArray()
      .map((r) => r.id);
    return { ...hot.filterOf(ids), ...(language === undefined ? {} : { language }) };
  }
}

/** Deletes every object under `prefix/`. */
export async function deletePrefix(bucket: R2Bucket, prefix: string): Promise<void> {
  for (let cursor: string | undefined; ; ) {
    const page = await bucket.list({ prefix: `${prefix}/`, ...(cursor ? { cursor } : {}) });
    if (page.objects.length > 0) await bucket.delete(page.objects.map((o) => o.key));
    if (!page.truncated) break;
    cursor = page.cursor;
  }
}
