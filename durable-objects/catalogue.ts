/**
 * What is live in a workspace's index: one row per chunk (encrypted path, line range, keyed chunk
 * id, language), whose row number is the entry id the index backend stores it under. Ids are
 * never reused, so a backend that deletes lazily can never answer with a stale entry that now
 * means something else. Synchronous, so that it commits in the same transaction as the tree.
 */
export interface CatalogueChunk {
  path: string;
  chunkId: string;
  startLine: number;
  endLine: number;
  language: string;
}

export interface CatalogueRow extends CatalogueChunk {
  id: number;
}

interface Row {
  id: number;
  path: string;
  chunk_id: string;
  start_line: number;
  end_line: number;
  language: string;
  [key: string]: SqlStorageValue;
}

const IN_BATCH = 90;

/**
 * One index generation's view of the catalogue (see migration.ts): every generation's rows share
 * one table and one id sequence, so the vector cache sees them all and an id means one chunk of
 * one generation for the workspace's lifetime.
 */
export class Catalogue {
  constructor(
    private readonly sql: SqlStorage,
    readonly generation = 0,
  ) {
    sql.exec(`CREATE TABLE IF NOT EXISTS catalogue (
      id INTEGER PRIMARY KEY,
      path TEXT NOT NULL,
      chunk_id TEXT NOT NULL,
      start_line INTEGER NOT NULL,
      end_line INTEGER NOT NULL,
      language TEXT NOT NULL,
      generation INTEGER NOT NULL DEFAULT 0
    )`);
    const columns = sql.exec<{ name: string }>("PRAGMA table_info(catalogue)").toArray();
    if (!columns.some((c) => c.name === "generation"))
      sql.exec("ALTER TABLE catalogue ADD COLUMN generation INTEGER NOT NULL DEFAULT 0");
    sql.exec("CREATE INDEX IF NOT EXISTS catalogue_by_path ON catalogue (path)");
    sql.exec("CREATE TABLE IF NOT EXISTS catalogue_ids (id INTEGER PRIMARY KEY CHECK (id = 1), next INTEGER NOT NULL)");
    sql.exec("INSERT OR IGNORE INTO catalogue_ids (id, next) VALUES (1, 1)");
  }

  /** Reserves `n` fresh ids before the entries are written to the backend. */
  reserve(n: number): number {
    const first = Number(this.sql.exec("SELECT next FROM catalogue_ids WHERE id = 1").one().next);
    this.sql.exec("UPDATE catalogue_ids SET next = ? WHERE id = 1", first + n);
    return first;
  }

  insert(rows: readonly CatalogueRow[]): void {
    for (const row of rows) {
      this.sql.exec(
        "INSERT INTO catalogue (id, path, chunk_id, start_line, end_line, language, generation) VALUES (?, ?, ?, ?, ?, ?, ?)",
        row.id,
        row.path,
        row.chunkId,
        row.startLine,
        row.endLine,
        row.language,
        this.generation,
      );
    }
  }

  /** Drops the chunks of these files and of everything under them; returns the ids dropped. */
  removePaths(paths: readonly string[]): number[] {
    const ids: number[] = [];
    for (const path of paths) {
      const where = "generation = ? AND (path = ? OR (path >= ? AND path < ?))";
      const args = [this.generation, path, `${path}/`, `${path}0`];
      for (const row of this.sql.exec<{ id: number }>(`SELECT id FROM catalogue WHERE ${where}`, ...args))
        ids.push(row.id);
      this.sql.exec(`DELETE FROM catalogue WHERE ${where}`, ...args);
    }
    return ids;
  }

  /** Drops the chunks of exactly these paths (a file that a directory now replaces). */
  removeExact(paths: readonly string[]): number[] {
    const ids: number[] = [];
    for (const path of paths) {
      const where = "generation = ? AND path = ?";
      for (const row of this.sql.exec<{ id: number }>(`SELECT id FROM catalogue WHERE ${where}`, this.generation, path))
        ids.push(row.id);
      this.sql.exec(`DELETE FROM catalogue WHERE ${where}`, this.generation, path);
    }
    return ids;
  }

  /** Which of these paths have chunks in this generation. */
  holds(paths: readonly string[]): Set<string> {
    const held = new Set<string>();
    for (const path of new Set(paths))
      if (
        this.sql
          .exec("SELECT 1 FROM catalogue WHERE generation = ? AND path = ? LIMIT 1", this.generation, path)
          .toArray().length > 0
      )
        held.add(path);
    return held;
  }

  /** The rows for these ids that are still live, by id. */
  lookup(ids: readonly number[]): Map<number, CatalogueRow> {
    const out = new Map<number, CatalogueRow>();
    for (let i = 0; i < ids.length; i += IN_BATCH) {
      const batch = ids.slice(i, i + IN_BATCH);
      const rows = this.sql.exec<Row>(
        `SELECT id, path, chunk_id, start_line, end_line, language FROM catalogue WHERE generation = ? AND id IN (${batch.map(() => "?").join(",")})`,
        this.generation,
        ...batch,
      );
      for (const r of rows) {
        out.set(r.id, {
          id: r.id,
          path: r.path,
          chunkId: r.chunk_id,
          startLine: r.start_line,
          endLine: r.end_line,
          language: r.language,
        });
      }
    }
    return out;
  }

  /** Live chunks. */
  count(): number {
    return Number(this.sql.exec("SELECT count(*) AS n FROM catalogue WHERE generation = ?", this.generation).one().n);
  }

  /** Forgets every row of this generation (once its backend is retired). */
  clear(): void {
    this.sql.exec("DELETE FROM catalogue WHERE generation = ?", this.generation);
  }
}
