/**
 * Parts of a file's chunks that arrived ahead of the commit that upserts the file, because they do
 * not fit one request body with it. Each row is what the index itself holds of a chunk (encrypted
 * path, keyed id and terms, rotated vector), never text. A commit claims a file's parts and drops
 * them in its own transaction; parts nobody claims are dropped after `STAGING_RETENTION_MS`.
 */
import type { IndexedChunk } from "./workspace-rpc.js";

/** How long an unclaimed part is kept: a sync that stops between staging and committing resends it. */
export const STAGING_RETENTION_MS = 24 * 3600 * 1000;
/** Staged vector bytes a workspace may hold at once, unless `MAX_STAGED_BYTES` says otherwise. */
export const DEFAULT_MAX_STAGED_BYTES = 256 * 1024 * 1024;

/**
 * Staged vector bytes a workspace may hold at once (`MAX_STAGED_BYTES`, default 256 MiB): a bound on
 * what never-committed parts can occupy of its object's storage. A value that is not a whole number
 * of at least 1 KiB falls back to the default.
 */
export function maxStagedBytes(env: { MAX_STAGED_BYTES?: string }): number {
  const bytes = Number(env.MAX_STAGED_BYTES ?? DEFAULT_MAX_STAGED_BYTES);
  return Number.isInteger(bytes) && bytes >= 1024 ? bytes : DEFAULT_MAX_STAGED_BYTES;
}

interface Row {
  seq: number;
  part: number;
  chunk_id: string;
  start_line: number;
  end_line: number;
  language: string;
  vector: ArrayBuffer;
  pieces: ArrayBuffer | null;
  term_ids: ArrayBuffer;
  term_counts: ArrayBuffer;
  [key: string]: SqlStorageValue;
}

export class StagedChunks {
  constructor(private readonly sql: SqlStorage) {
    sql.exec(`CREATE TABLE IF NOT EXISTS staged_chunks (
      path TEXT NOT NULL,
      hash TEXT NOT NULL,
      part INTEGER NOT NULL,
      seq INTEGER NOT NULL,
      chunk_id TEXT NOT NULL,
      start_line INTEGER NOT NULL,
      end_line INTEGER NOT NULL,
      language TEXT NOT NULL,
      vector BLOB NOT NULL,
      term_ids BLOB NOT NULL,
      term_counts BLOB NOT NULL,
      staged_at INTEGER NOT NULL,
      PRIMARY KEY (path, hash, part, seq)
    ) WITHOUT ROWID`);
    // The chunk's definition pieces' vectors, one after another; null for a chunk without pieces.
    const columns = sql.exec<{ name: string }>("PRAGMA table_info(staged_chunks)").toArray();
    if (!columns.some((c) => c.name === "pieces")) sql.exec("ALTER TABLE staged_chunks ADD COLUMN pieces BLOB");
  }

  /** Bytes the vectors of every staged part take, but for one part (which a retry of it replaces). */
  bytesBesides(path: string, hash: string, part: number): number {
    return Number(
      this.sql
        .exec(
          "SELECT coalesce(sum(length(vector) + coalesce(length(pieces), 0)), 0) AS n FROM staged_chunks WHERE NOT (path = ? AND hash = ? AND part = ?)",
          path,
          hash,
          part,
        )
        .one().n,
    );
  }

  /** Stores one part, replacing an earlier copy of it (a retried request). Synchronous: call in a transaction. */
  put(path: string, hash: string, part: number, chunks: readonly IndexedChunk[], now = Date.now()): void {
    this.sql.exec("DELETE FROM staged_chunks WHERE path = ? AND hash = ? AND part = ?", path, hash, part);
    chunks.forEach((chunk, seq) => {
      this.sql.exec(
        `INSERT INTO staged_chunks (path, hash, part, seq, chunk_id, start_line, end_line, language, vector, pieces, term_ids, term_counts, staged_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        path,
        hash,
        part,
        seq,
        chunk.chunkId,
        chunk.startLine,
        chunk.endLine,
        chunk.language,
        copy(chunk.vector),
        chunk.pieces?.length ? joined(chunk.pieces) : null,
        copy(chunk.terms.ids),
        copy(chunk.terms.counts),
        now,
      );
    });
  }

  /** Parts 0 to `parts - 1` of a file, in order; `missing` lists those the object does not hold. */
  take(path: string, hash: string, parts: number): { chunks: IndexedChunk[]; missing: number[] } {
    const rows = this.sql
      .exec<Row>(
        `SELECT part, seq, chunk_id, start_line, end_line, language, vector, pieces, term_ids, term_counts
         FROM staged_chunks WHERE path = ? AND hash = ? AND part < ? ORDER BY part, seq`,
        path,
        hash,
        parts,
      )
      .toArray();
    const present = new Set(rows.map((r) => r.part));
    const missing = Array.from({ length: parts }, (_, i) => i).filter((i) => !present.has(i));
    const chunks = rows.map((r): IndexedChunk => {
      const vector = new Float32Array(r.vector);
      return {
        path,
        chunkId: r.chunk_id,
        startLine: r.start_line,
        endLine: r.end_line,
        language: r.language as IndexedChunk["language"],
        vector,
        terms: { ids: new Uint32Array(r.term_ids), counts: new Uint16Array(r.term_counts) },
        ...(r.pieces ? { pieces: split(new Float32Array(r.pieces), vector.length) } : {}),
      };
    });
    return { chunks, missing };
  }

  /** Drops a file's parts once a commit has claimed them. */
  drop(path: string, hash: string): void {
    this.sql.exec("DELETE FROM staged_chunks WHERE path = ? AND hash = ?", path, hash);
  }

  /** Drops parts staged before `before`; returns when the oldest remaining part was staged, or null. */
  prune(before: number): number | null {
    this.sql.exec("DELETE FROM staged_chunks WHERE staged_at < ?", before);
    const oldest = this.sql.exec("SELECT min(staged_at) AS t FROM staged_chunks").one().t;
    return typeof oldest === "number" ? oldest : null;
  }
}

/** The bytes of a typed array as a buffer of their own (a view may share a larger one). */
const copy = (view: ArrayBufferView): ArrayBuffer =>
  view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength) as ArrayBuffer;

/** Vectors of one length, one after another in one buffer. */
function joined(vectors: readonly Float32Array[]): ArrayBuffer {
  const out = new Float32Array(vectors.reduce((n, v) => n + v.length, 0));
  let at = 0;
  for (const v of vectors) {
    out.set(v, at);
    at += v.length;
  }
  return out.buffer;
}

/** `joined`'s vectors again. */
function split(all: Float32Array, dims: number): Float32Array[] {
  return Array.from({ length: all.length / dims }, (_, i) => all.slice(i * dims, (i + 1) * dims));
}
