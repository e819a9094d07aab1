/**
 * The workspace's embedding cache: the rotated vector of each keyed chunk id, per model, so a
 * chunk that reaches the edge again (a moved or copied file, the unchanged functions of an edited
 * one, a branch switched back) is not sent to a remote embedder twice. Keys are keyed chunk ids
 * and values rotated vectors, exactly what the index stores, so the cache reveals nothing more.
 * Rows whose chunk is no longer indexed are pruned after a retention period; rows of live chunks
 * stay. Stored int8 with a scale, like the index's segments.
 */
import { quantizeVector } from "./segment.js";

const IN_BATCH = 90;

export class VectorCache {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`CREATE TABLE IF NOT EXISTS vector_cache (
      chunk_id TEXT NOT NULL,
      model TEXT NOT NULL,
      scale REAL NOT NULL,
      vector BLOB NOT NULL,
      used_at INTEGER NOT NULL,
      PRIMARY KEY (chunk_id, model)
    ) WITHOUT ROWID`);
    sql.exec("CREATE INDEX IF NOT EXISTS catalogue_by_chunk ON catalogue (chunk_id)");
  }

  get(model: string, ids: readonly string[]): (Float32Array | null)[] {
    const found = new Map<string, Float32Array>();
    const unique = [...new Set(ids)];
    for (let i = 0; i < unique.length; i += IN_BATCH) {
      const batch = unique.slice(i, i + IN_BATCH);
      const rows = this.sql.exec<{ chunk_id: string; scale: number; vector: ArrayBuffer }>(
        `SELECT chunk_id, scale, vector FROM vector_cache WHERE model = ? AND chunk_id IN (${batch.map(() => "?").join(",")})`,
        model,
        ...batch,
      );
      for (const row of rows) {
        const int8 = new Int8Array(row.vector);
        found.set(
          row.chunk_id,
          Float32Array.from(int8, (x) => x * row.scale),
        );
      }
    }
    return ids.map((id) => found.get(id) ?? null);
  }

  /** Records these chunks' vectors (synchronous, inside the commit's transaction). */
  put(model: string, chunks: readonly { chunkId: string; vector: Float32Array }[]): void {
    const now = Date.now();
    for (const { chunkId, vector } of chunks) {
      const { scale, int8 } = quantizeVector(vector, vector.length);
      this.sql.exec(
        "INSERT OR REPLACE INTO vector_cache (chunk_id, model, scale, vector, used_at) VALUES (?, ?, ?, ?, ?)",
        chunkId,
        model,
        scale,
        int8.buffer,
        now,
      );
    }
  }

  /** Drops rows older than `before` whose chunk is no longer indexed. */
  prune(before: number): void {
    this.sql.exec(
      "DELETE FROM vector_cache WHERE used_at < ? AND chunk_id NOT IN (SELECT chunk_id FROM catalogue)",
      before,
    );
  }
}
