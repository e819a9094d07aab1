/**
 * Index generations. A workspace's vectors are all of one model (recorded in `meta.model`), in one
 * generation: a backend of its own (an R2 prefix and manifest tables, or a turbopuffer namespace)
 * and its rows of the catalogue. When the edge's embedder changes, vectors of the new model cannot
 * join that index, and searching it needs the old model. So the client re-sends every file's chunks;
 * they are embedded by the new model into a second generation while searches keep using the
 * current one, and once every file in the tree has its chunks there, one transaction makes it
 * current and the old generation's storage is deleted (retried by the alarm until it is gone).
 */
import { BUILTIN_DIMS, BUILTIN_MODEL } from "../protocol/embedder/builtin.js";
import { loadIndexConfig } from "../workers/config.js";
import { Catalogue } from "./catalogue.js";
import type { IndexBackend } from "./index-backend.js";
import { R2Backend } from "./r2-backend.js";
import { TurbopufferBackend } from "./turbopuffer-backend.js";
import type { DimensionMismatch, EdgeEmbedder } from "./workspace-rpc.js";

export interface Generation {
  readonly number: number;
  /** The model that made its vectors; null for an index from before models were recorded whose model is unknown. */
  readonly model: string | null;
  readonly dims: number;
  /** The backend kind (`r2`, `turbopuffer`), kept from the workspace's first index for its lifetime. */
  readonly kind: string;
  readonly catalogue: Catalogue;
  readonly backend: IndexBackend;
}

/**
 * One generation's index backend: the first under the workspace's own R2 prefix (and unsuffixed
 * manifest tables) or turbopuffer namespace, each later one under a name of its own, so the old and
 * the new index sit side by side while a re-embed runs. Its kind is chosen by INDEX_BACKEND when the
 * workspace first stores vectors and kept for its lifetime, so changing the setting affects new
 * workspaces only.
 */
export function generationBackend(
  env: Env,
  ctx: DurableObjectState,
  generation: number,
  dims: number,
  kind: string,
): IndexBackend {
  const id = ctx.id.toString();
  if (kind === "turbopuffer") {
    const config = loadIndexConfig(env);
    return new TurbopufferBackend({
      apiKey: config.TURBOPUFFER_API_KEY ?? "",
      ...(config.TURBOPUFFER_BASE_URL ? { baseURL: config.TURBOPUFFER_BASE_URL } : {}),
      ...(config.TURBOPUFFER_REGION ? { region: config.TURBOPUFFER_REGION } : {}),
      namespace: generation === 0 ? `sextant-${id}` : `sextant-${id}-g${generation}`,
      dims,
      // Two retries within 20 s each: a search or commit fails within about a minute when the service
      // is down, inside the client's own timeout, and the client's sync retries later.
      maxRetries: 2,
      timeout: 20_000,
    });
  }
  return new R2Backend(
    ctx.storage.sql,
    (fn) => ctx.storage.transactionSync(fn),
    env.INDEX,
    generation === 0 ? `workspaces/${id}` : `workspaces/${id}/g${generation}`,
    dims,
    generation === 0 ? {} : { tables: `_g${generation}` },
  );
}

export type OpenBackend = (generation: number, dims: number, kind: string) => IndexBackend;

/** Where a commit's vectors go: the current generation, or (`migrating`) the one being built for another model. */
export type WriteTarget = { generation: Generation | null; migrating: boolean } | DimensionMismatch;

interface GenerationRow {
  generation: number;
  dims: number;
  backend: string;
  model: string | null;
  [key: string]: SqlStorageValue;
}

export class Generations {
  current: Generation | null = null;
  /** The generation being built for the edge's model while a re-embed is under way. */
  pending: Generation | null = null;

  constructor(
    private readonly sql: SqlStorage,
    private readonly open: OpenBackend,
    /** The backend kind a workspace's first index uses (INDEX_BACKEND, read when it is needed). */
    private readonly firstKind: () => string,
  ) {
    new Catalogue(sql); // its table exists before any generation does
    const columns = sql.exec<{ name: string }>("PRAGMA table_info(meta)").toArray();
    if (!columns.some((c) => c.name === "model")) sql.exec("ALTER TABLE meta ADD COLUMN model TEXT");
    if (!columns.some((c) => c.name === "generation"))
      sql.exec("ALTER TABLE meta ADD COLUMN generation INTEGER NOT NULL DEFAULT 0");
    sql.exec(`CREATE TABLE IF NOT EXISTS reembed (
      id INTEGER PRIMARY KEY CHECK (id = 1),
      generation INTEGER NOT NULL,
      model TEXT NOT NULL,
      dims INTEGER NOT NULL,
      backend TEXT NOT NULL
    )`);
    // The files (path and hash) whose chunks the pending generation holds.
    sql.exec("CREATE TABLE IF NOT EXISTS reembed_files (path TEXT PRIMARY KEY, hash TEXT NOT NULL) WITHOUT ROWID");
    // Generations switched away from or abandoned, until their backend's storage is deleted.
    sql.exec(`CREATE TABLE IF NOT EXISTS retired_generations (
      generation INTEGER PRIMARY KEY,
      dims INTEGER NOT NULL,
      backend TEXT NOT NULL
    )`);
    const meta = sql.exec<GenerationRow>("SELECT generation, dims, backend, model FROM meta WHERE id = 1").toArray()[0];
    if (meta && typeof meta.dims === "number") this.current = this.#make({ ...meta, backend: meta.backend ?? "r2" });
    const pending = sql.exec<GenerationRow>("SELECT generation, dims, backend, model FROM reembed").toArray()[0];
    if (pending) this.pending = this.#make(pending);
  }

  #make(row: GenerationRow): Generation {
    return {
      number: row.generation,
      model: row.model,
      dims: row.dims,
      kind: row.backend,
      catalogue: new Catalogue(this.sql, row.generation),
      backend: this.open(row.generation, row.dims, row.backend),
    };
  }

  /**
   * The current index's model. An index from before models were recorded takes the edge's model
   * when the sizes match (the edge kept its embedder), else `sextant-lexical-v1` at 512 dimensions
   * (the only built-in embedder then), else stays unknown.
   */
  model(edge?: EdgeEmbedder): string | null {
    const current = this.current;
    if (!current || current.model !== null || !edge) return current?.model ?? null;
    const model = edge.dims === current.dims ? edge.model : current.dims === BUILTIN_DIMS ? BUILTIN_MODEL : null;
    if (model === null) return null;
    this.sql.exec("UPDATE meta SET model = ? WHERE id = 1", model);
    this.current = { ...current, model };
    return model;
  }

  /** Whether the current index's vectors are the edge's (a model under the same name at another size is another). */
  #isEdges(edge: EdgeEmbedder): boolean {
    return this.model(edge) === edge.model && (edge.dims === undefined || this.current!.dims === edge.dims);
  }

  /** Whether the index holds vectors of a model other than the edge's: the client must re-send its files. */
  needsReembed(edge?: EdgeEmbedder): boolean {
    return this.current !== null && edge !== undefined && !this.#isEdges(edge);
  }

  /** The dimensions vectors from the edge's embedder must have (without one: the current index's). */
  dimsFor(edge?: EdgeEmbedder): number | undefined {
    return edge?.dims ?? (edge && !this.#isEdges(edge) ? undefined : this.current?.dims);
  }

  hasRetired(): boolean {
    return this.sql.exec("SELECT 1 FROM retired_generations LIMIT 1").toArray().length > 0;
  }

  /**
   * Where a commit's vectors (`dims` wide, undefined when it carries none) go. The first vectors
   * make the current generation; vectors of another model than the current one's go to the pending
   * generation, started for that model (one for an older model is abandoned). Retires what it
   * abandons: call `sweep` afterwards.
   */
  target(edge: EdgeEmbedder | undefined, dims: number | undefined): WriteTarget {
    const current = this.current;
    if (!current) {
      if (dims === undefined) return { generation: null, migrating: false };
      if (edge?.dims !== undefined && edge.dims !== dims) return { mismatch: { expected: edge.dims, got: dims } };
      const number = Number(this.sql.exec("SELECT generation FROM meta WHERE id = 1").one().generation ?? 0);
      const row = { generation: number, dims, backend: "", model: edge?.model ?? null };
      return { generation: (this.current = this.#create(row)), migrating: false };
    }
    if (!edge || this.#isEdges(edge)) {
      if (dims !== undefined && dims !== current.dims) return { mismatch: { expected: current.dims, got: dims } };
      // The edge went back to the index's model: what was built for another is of no use.
      if (edge && this.pending) this.#retire(this.pending);
      return { generation: current, migrating: false };
    }
    if (dims !== undefined && edge.dims !== undefined && dims !== edge.dims)
      return { mismatch: { expected: edge.dims, got: dims } };
    // An embedder that has not answered yet in the route's isolate does not know its size.
    const size = edge.dims ?? dims;
    if (this.pending && (this.pending.model !== edge.model || (size !== undefined && this.pending.dims !== size)))
      this.#retire(this.pending);
    if (dims !== undefined && this.pending && dims !== this.pending.dims)
      return { mismatch: { expected: this.pending.dims, got: dims } };
    // No vectors and no size: the files are recorded as moved, the generation made by the next vectors.
    if (!this.pending && size === undefined) return { generation: null, migrating: true };
    if (!this.pending) {
      const row = { generation: this.#nextNumber(), dims: size!, backend: current.kind, model: edge.model };
      this.sql.exec(
        "INSERT INTO reembed (id, generation, model, dims, backend) VALUES (1, ?, ?, ?, ?)",
        row.generation,
        row.model,
        row.dims,
        row.backend,
      );
      this.pending = this.#make(row);
    }
    return { generation: this.pending, migrating: true };
  }

  #create(row: GenerationRow): Generation {
    const kind = this.firstKind();
    this.sql.exec(
      "UPDATE meta SET dims = ?, backend = ?, model = ?, generation = ? WHERE id = 1",
      row.dims,
      kind,
      row.model,
      row.generation,
    );
    return this.#make({ ...row, backend: kind });
  }

  #nextNumber(): number {
    const retired = this.sql.exec("SELECT max(generation) AS n FROM retired_generations").one().n;
    return (
      Math.max(this.current?.number ?? 0, this.pending?.number ?? 0, typeof retired === "number" ? retired : 0) + 1
    );
  }

  /**
   * Bookkeeping of a commit into the pending generation, inside its transaction, before the tree is
   * applied: which files it now holds, and the current generation's chunks of files that change or
   * go (their old lines must not be served). Returns the current generation's ids dropped.
   */
  migrate(
    upserts: readonly { path: string; hash: string }[],
    gone: readonly string[],
    replacedDirs: readonly string[],
    unchanged: (path: string, hash: string) => boolean,
  ): number[] {
    const current = this.current!;
    const dropped = current.catalogue.removePaths(gone);
    dropped.push(...current.catalogue.removeExact(replacedDirs));
    const changed = upserts.filter((u) => !unchanged(u.path, u.hash)).map((u) => u.path);
    dropped.push(...current.catalogue.removePaths(changed));
    for (const path of gone)
      this.sql.exec(
        "DELETE FROM reembed_files WHERE path = ? OR (path >= ? AND path < ?)",
        path,
        `${path}/`,
        `${path}0`,
      );
    for (const path of replacedDirs) this.sql.exec("DELETE FROM reembed_files WHERE path = ?", path);
    for (const { path, hash } of upserts)
      this.sql.exec("INSERT OR REPLACE INTO reembed_files (path, hash) VALUES (?, ?)", path, hash);
    return dropped;
  }

  /** Files of the tree whose current hash the pending generation does not hold yet. */
  remaining(files: number): number {
    const held = this.sql
      .exec(
        "SELECT count(*) AS n FROM reembed_files r JOIN nodes n ON n.path = r.path AND n.hash = r.hash AND n.kind = 'f'",
      )
      .one().n;
    return files - Number(held);
  }

  /**
   * The files the pending generation holds at the tree's current hash, in path order after
   * `after`: `limit` of them, and whether more follow. None while no move is under way.
   */
  held(after: string, limit: number): { files: { path: string; hash: string }[]; more: boolean } {
    if (!this.pending) return { files: [], more: false };
    const rows = this.sql
      .exec<{ path: string; hash: string }>(
        `SELECT r.path AS path, r.hash AS hash FROM reembed_files r
         JOIN nodes n ON n.path = r.path AND n.hash = r.hash AND n.kind = 'f'
         WHERE r.path > ? ORDER BY r.path LIMIT ?`,
        after,
        limit + 1,
      )
      .toArray();
    return { files: rows.slice(0, limit).map((r) => ({ path: r.path, hash: r.hash })), more: rows.length > limit };
  }

  /**
   * Makes the pending generation current, inside the transaction of the commit that completed it,
   * and retires the old one, whose storage `sweep` then deletes.
   */
  switchOver(): void {
    const next = this.pending!;
    this.#retire(this.current!);
    this.sql.exec("DELETE FROM reembed");
    this.sql.exec("DELETE FROM reembed_files");
    this.pending = null;
    this.sql.exec(
      "UPDATE meta SET model = ?, dims = ?, backend = ?, generation = ? WHERE id = 1",
      next.model,
      next.dims,
      next.kind,
      next.number,
    );
    this.current = next;
  }

  /** Forgets a generation's rows; its backend's storage stays until `sweep` deletes it. */
  #retire(generation: Generation): void {
    generation.catalogue.clear();
    this.sql.exec(
      "INSERT OR REPLACE INTO retired_generations (generation, dims, backend) VALUES (?, ?, ?)",
      generation.number,
      generation.dims,
      generation.kind,
    );
    if (generation === this.pending) {
      this.sql.exec("DELETE FROM reembed");
      this.pending = null;
    }
    this.sql.exec("DELETE FROM reembed_files");
  }

  /** Deletes retired generations' storage; false when a backend refused (the alarm tries again). */
  async sweep(): Promise<boolean> {
    const retired = this.sql.exec<GenerationRow>("SELECT generation, dims, backend FROM retired_generations").toArray();
    let swept = true;
    for (const row of retired) {
      try {
        await this.open(row.generation, row.dims, row.backend).destroy();
        this.sql.exec("DELETE FROM retired_generations WHERE generation = ?", row.generation);
      } catch {
        swept = false;
      }
    }
    return swept;
  }

  /** Every generation that holds storage: current, pending and retired, for the object's own destroy. */
  all(): IndexBackend[] {
    const retired = this.sql
      .exec<GenerationRow>("SELECT generation, dims, backend FROM retired_generations")
      .toArray()
      .map((row) => this.open(row.generation, row.dims, row.backend));
    return [
      ...(this.current ? [this.current.backend] : []),
      ...(this.pending ? [this.pending.backend] : []),
      ...retired,
    ];
  }
}
