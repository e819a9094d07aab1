import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex } from "@noble/hashes/utils.js";

/** One chunk's place in the index: which file (encrypted path), which lines, its keyed id and vector. */
export interface IndexedChunk {
  path: string;
  chunkId: string;
  startLine: number;
  endLine: number;
  /** Already transformed with the client's vector key. */
  vector: Float32Array;
}

export interface VectorHit {
  path: string;
  chunkId: string;
  startLine: number;
  endLine: number;
  score: number;
}

interface Row {
  row: number;
  path: string;
  chunk_id: string;
  start_line: number;
  end_line: number;
  segment: string;
  slot: number;
  [key: string]: SqlStorageValue;
}

const MAGIC = 0x53585631; // "SXV1"

/**
 * Vectors on R2, their catalogue in the Durable Object's SQLite, and a hot copy in memory.
 * Each `add` writes one immutable, content-addressed segment (int8 vectors with a scale each, so
 * 100,000 chunks of 512 dimensions take about 50 MB of memory), then records its rows; a crash
 * between the two leaves only an unreferenced object, never a row without its vector. Deleting a
 * file drops its rows; its segment stays in R2 (there is no compaction yet to rewrite what is live).
 */
export class VectorStore {
  #cache: { rows: Row[]; vectors: Int8Array; scales: Float32Array } | undefined;

  constructor(
    private readonly sql: SqlStorage,
    private readonly bucket: R2Bucket,
    private readonly prefix: string,
    readonly dims: number,
  ) {
    sql.exec(`CREATE TABLE IF NOT EXISTS chunks (
      row INTEGER PRIMARY KEY,
      path TEXT NOT NULL,
      chunk_id TEXT NOT NULL,
      start_line INTEGER NOT NULL,
      end_line INTEGER NOT NULL,
      segment TEXT NOT NULL,
      slot INTEGER NOT NULL
    )`);
    sql.exec("CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (path)");
  }

  /** Writes the segment to R2; returns the rows to record with `record` inside the caller's transaction. */
  async write(chunks: readonly IndexedChunk[]): Promise<{ segment: string; chunks: readonly IndexedChunk[] }> {
    const bytes = encodeSegment(chunks, this.dims);
    const segment = `${this.prefix}/segments/${bytesToHex(sha256(bytes))}`;
    await this.bucket.put(segment, bytes);
    return { segment, chunks };
  }

  /** Records a written segment's rows, replacing whatever the same paths held: synchronous, for a transaction. */
  record(written: { segment: string; chunks: readonly IndexedChunk[] }): void {
    this.removePaths([...new Set(written.chunks.map((c) => c.path))]);
    written.chunks.forEach((chunk, slot) => {
      this.sql.exec(
        "INSERT INTO chunks (path, chunk_id, start_line, end_line, segment, slot) VALUES (?, ?, ?, ?, ?, ?)",
        chunk.path,
        chunk.chunkId,
        chunk.startLine,
        chunk.endLine,
        written.segment,
        slot,
      );
    });
    this.#cache = undefined;
  }

  /** Drops every chunk of these files, and of anything under them when a path is a directory. */
  removePaths(paths: readonly string[]): void {
    for (const path of paths) {
      this.sql.exec("DELETE FROM chunks WHERE path = ? OR (path >= ? AND path < ?)", path, `${path}/`, `${path}0`);
    }
    this.#cache = undefined;
  }

  /** Deletes every segment object of this store from R2. */
  async destroy(): Promise<void> {
    for (let cursor: string | undefined; ; ) {
      const page = await this.bucket.list({ prefix: `${this.prefix}/`, ...(cursor ? { cursor } : {}) });
      if (page.objects.length > 0) await this.bucket.delete(page.objects.map((o) => o.key));
      if (!page.truncated) break;
      cursor = page.cursor;
    }
    this.#cache = undefined;
  }

  count(): number {
    return Number(this.sql.exec("SELECT count(*) AS n FROM chunks").one().n);
  }

  /** Drops the chunks of exactly these paths (a file that a directory now replaces). */
  removeExact(paths: readonly string[]): void {
    for (const path of paths) this.sql.exec("DELETE FROM chunks WHERE path = ?", path);
    this.#cache = undefined;
  }

  /** The k best chunks by inner product with `query` (already transformed with the same key). */
  async search(query: Float32Array, k: number, pathPrefix?: string): Promise<VectorHit[]> {
    const cache = await this.#load();
    const d = this.dims;
    const scores: { i: number; score: number }[] = [];
    const below = pathPrefix ? `${pathPrefix}/` : undefined;
    for (let i = 0; i < cache.rows.length; i++) {
      if (below && !cache.rows[i]!.path.startsWith(below)) continue;
      let dot = 0;
      const base = i * d;
      for (let j = 0; j < d; j++) dot += cache.vectors[base + j]! * query[j]!;
      const score = dot * cache.scales[i]!;
      if (scores.length < k) {
        scores.push({ i, score });
        scores.sort((a, b) => b.score - a.score);
      } else if (score > scores[k - 1]!.score) {
        scores[k - 1] = { i, score };
        scores.sort((a, b) => b.score - a.score);
      }
    }
    return scores.map(({ i, score }) => {
      const row = cache.rows[i]!;
      return { path: row.path, chunkId: row.chunk_id, startLine: row.start_line, endLine: row.end_line, score };
    });
  }

  /** Builds the hot copy from the catalogue and the segments it references, each read from R2 once. */
  async #load() {
    if (this.#cache) return this.#cache;
    const rows = this.sql
      .exec<Row>("SELECT row, path, chunk_id, start_line, end_line, segment, slot FROM chunks")
      .toArray();
    const d = this.dims;
    const vectors = new Int8Array(rows.length * d);
    const scales = new Float32Array(rows.length);
    const segments = new Map<string, { vectors: Int8Array; scales: Float32Array }>();
    for (const key of new Set(rows.map((r) => r.segment))) {
      const object = await this.bucket.get(key);
      if (!object) throw new Error(`Index segment ${key} is missing from R2.`);
      segments.set(key, decodeSegment(new Uint8Array(await object.arrayBuffer()), d));
    }
    rows.forEach((row, i) => {
      const segment = segments.get(row.segment)!;
      vectors.set(segment.vectors.subarray(row.slot * d, (row.slot + 1) * d), i * d);
      scales[i] = segment.scales[row.slot]!;
    });
    this.#cache = { rows, vectors, scales };
    return this.#cache;
  }
}

/** Header (magic, count, dims), then per vector a float32 scale and dims int8 values. */
export function encodeSegment(chunks: readonly IndexedChunk[], dims: number): Uint8Array {
  const stride = 4 + dims;
  const bytes = new Uint8Array(12 + chunks.length * stride);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, MAGIC);
  view.setUint32(4, chunks.length);
  view.setUint32(8, dims);
  chunks.forEach((chunk, i) => {
    if (chunk.vector.length !== dims) throw new Error(`Expected ${dims} dimensions, got ${chunk.vector.length}.`);
    let max = 0;
    for (const x of chunk.vector) max = Math.max(max, Math.abs(x));
    const scale = max > 0 ? max / 127 : 1;
    const at = 12 + i * stride;
    view.setFloat32(at, scale, true);
    for (let j = 0; j < dims; j++) view.setInt8(at + 4 + j, Math.round(chunk.vector[j]! / scale));
  });
  return bytes;
}

export function decodeSegment(bytes: Uint8Array, dims: number): { vectors: Int8Array; scales: Float32Array } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.getUint32(0) !== MAGIC || view.getUint32(8) !== dims) throw new Error("Not an index segment of this shape.");
  const count = view.getUint32(4);
  const stride = 4 + dims;
  const vectors = new Int8Array(count * dims);
  const scales = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const at = 12 + i * stride;
    scales[i] = view.getFloat32(at, true);
    vectors.set(new Int8Array(bytes.buffer, bytes.byteOffset + at + 4, dims), i * dims);
  }
  return { vectors, scales };
}
