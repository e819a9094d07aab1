import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { loadIndexConfig } from "../workers/config.js";
import {
  DiffRequest,
  Hash,
  ReembedRequest,
  SYNC_PROTOCOL,
  type CommitResponse,
  type DiffResponse,
  type ReembedResponse,
  type SearchResponse,
  type StageResponse,
  type TreeStatus,
} from "../protocol/sync.js";
import { applyCommit, backendFailure, parseCommit, type CommitFailure, type CommitOptions } from "./commit.js";
import { VectorCache } from "./vector-cache.js";
import { hybridSearch } from "./fusion.js";
import { MerkleStore } from "./merkle-store.js";
import type { IndexBackend } from "./index-backend.js";
import { generationBackend, Generations } from "./migration.js";
import { R2Backend, deletePrefix } from "./r2-backend.js";
import { maxStagedBytes, STAGING_RETENTION_MS, StagedChunks } from "./staging.js";
import { TurbopufferBackend, TurbopufferBackendError } from "./turbopuffer-backend.js";
import {
  EdgeEmbedder,
  parse,
  SearchInput,
  StagedPart,
  TreeCommit,
  WorkspaceMeta,
  type BackendFailure,
  type DimensionMismatch,
  type IndexedChunk,
  type OtherModel,
  type StagingFull,
} from "./workspace-rpc.js";

export type * from "./workspace-rpc.js";

/** Compaction waits for a burst of commits to settle. */
const COMPACTION_DELAY_MS = 30_000;
/** Cached vectors of chunks no longer indexed are kept this long (a file moved back, a reverted edit). */
const CACHE_RETENTION_MS = 14 * 24 * 3600 * 1000;
/** A removal a backend refused is tried again after this long. */
const REMOVAL_RETRY_MS = 60_000;

/**
 * One object per workspace: its metadata and the Merkle tree of what is indexed. SQLite-backed;
 * every RPC input is validated, because any code holding the binding can call a stub.
 */
export class Workspace extends DurableObject<Env> {
  /** Null until `init` and again after `destroy`: an object never writes state it was not asked to hold. */
  #tree: MerkleStore | null = null;
  #cache: VectorCache | null = null;
  #staging: StagedChunks | null = null;
  #generations: Generations | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.blockConcurrencyWhile(async () => {
      const initialized = ctx.storage.sql
        .exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'")
        .toArray().length;
      if (initialized) this.#open();
    });
  }

  #open(): void {
    this.ctx.storage.sql.exec(
      `CREATE TABLE IF NOT EXISTS meta (
         id INTEGER PRIMARY KEY CHECK (id = 1),
         workspace_id TEXT NOT NULL,
         org_id TEXT NOT NULL,
         created_at TEXT NOT NULL,
         last_sync_at TEXT,
         dims INTEGER,
         backend TEXT
       )`,
    );
    const sql = this.ctx.storage.sql;
    const columns = sql.exec<{ name: string }>("PRAGMA table_info(meta)").toArray();
    if (!columns.some((c) => c.name === "dims")) sql.exec("ALTER TABLE meta ADD COLUMN dims INTEGER");
    if (!columns.some((c) => c.name === "backend")) sql.exec("ALTER TABLE meta ADD COLUMN backend TEXT");
    // Entries a lazily deleting backend still holds: removal is retried until it succeeds.
    sql.exec("CREATE TABLE IF NOT EXISTS backend_removals (id INTEGER PRIMARY KEY)");
    // Index format 1 kept one table of chunks with their segments; its files are indexed again.
    if (sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'chunks'").toArray().length) {
      sql.exec("DROP TABLE chunks");
      sql.exec("DROP TABLE IF EXISTS nodes");
    }
    this.#tree = new MerkleStore(sql, (fn) => this.ctx.storage.transactionSync(fn));
    // Before the vector cache, which indexes the catalogue's table.
    this.#generations = new Generations(
      sql,
      (generation, dims, kind) => generationBackend(this.env, this.ctx, generation, dims, kind),
      () => loadIndexConfig(this.env).INDEX_BACKEND,
    );
    this.#cache = new VectorCache(sql);
    this.#staging = new StagedChunks(sql);
  }

  /** Idempotent: a retried create after a dropped connection leaves the same state. */
  async init(input: WorkspaceMeta): Promise<WorkspaceMeta> {
    const meta = parse(WorkspaceMeta, input, "workspace metadata");
    if (!this.#tree) this.#open();
    const existing = this.#meta();
    if (existing) return existing;
    this.ctx.storage.sql.exec(
      "INSERT INTO meta (id, workspace_id, org_id, created_at) VALUES (1, ?, ?, ?)",
      meta.workspaceId,
      meta.orgId,
      meta.createdAt,
    );
    return meta;
  }

  async describe(): Promise<WorkspaceMeta | null> {
    return this.#tree ? this.#meta() : null;
  }

  /** Null when the workspace does not exist (never created, or deleted). */
  async status(embedder?: EdgeEmbedder): Promise<TreeStatus | null> {
    const edge = parse(EdgeEmbedder.optional(), embedder, "embedder");
    if (!this.#tree) return null;
    const { root, files, bytes } = this.#tree.totals();
    return { protocol: SYNC_PROTOCOL, root, files, bytes, lastSyncAt: this.#lastSyncAt(), ...this.#models(edge) };
  }

  /** The index's model, and whether the edge's embedder (when named) must re-embed it. */
  #models(edge: EdgeEmbedder | undefined): Pick<TreeStatus, "model" | "embedder" | "reembed"> {
    const generations = this.#generations!;
    const model = generations.model(edge);
    return edge ? { model, embedder: edge.model, reembed: generations.needsReembed(edge) } : { model };
  }

  async diff(input: DiffRequest): Promise<DiffResponse | null> {
    const request = parse(DiffRequest, input, "diff request");
    if (!this.#tree) return null;
    const { nodes, truncated } = this.#tree.descendants(request.dirs, request.budget);
    return { protocol: SYNC_PROTOCOL, root: this.#tree.totals().root, nodes, truncated };
  }

  /** The files already moved to the edge's embedder (`POST …/tree/reembed`); null without a workspace. */
  async reembedded(input: ReembedRequest): Promise<ReembedResponse | null> {
    const request = parse(ReembedRequest, input, "re-embed request");
    if (!this.#tree || !this.#generations) return null;
    const { files, more } = this.#generations.held(request.after ?? "", request.limit);
    return { protocol: SYNC_PROTOCOL, files, next: more ? files.at(-1)!.path : null };
  }

  /** Applies a batch of files and deletions (`applyCommit`, in commit.ts) and records the sync. */
  async commit(
    input: TreeCommit,
    chunks: IndexedChunk[] = [],
    options: CommitOptions = {},
  ): Promise<CommitResponse | CommitFailure | null> {
    const parsed = parseCommit(input, chunks, options);
    if (!this.#tree || !this.#staging || !this.#generations) return null;
    const outcome = await applyCommit(
      {
        tree: this.#tree,
        staging: this.#staging,
        generations: this.#generations,
        cache: this.#cache!,
        transaction: (fn) => this.ctx.storage.transactionSync(fn),
        remove: (backend, ids) => this.#remove(backend, ids),
        sweep: () => this.#sweep(),
        scheduleMaintenance: () => this.#scheduleMaintenance(),
      },
      parsed,
    );
    if (!("totals" in outcome)) return outcome;
    const { totals } = outcome;
    const now = new Date().toISOString();
    this.ctx.storage.sql.exec("UPDATE meta SET last_sync_at = ? WHERE id = 1", now);
    return {
      protocol: SYNC_PROTOCOL,
      root: totals.root,
      files: totals.files,
      bytes: totals.bytes,
      lastSyncAt: now,
      applied: parsed.request.upserts.length + parsed.request.deletes.length,
      ...this.#models(parsed.edge),
    };
  }

  /**
   * Holds one part of a file's chunks until a commit upserts the file with `stagedParts` covering
   * it. Nothing becomes searchable and the tree does not change: a sync that stops between parts
   * leaves the workspace as it was, and its next run stages them again.
   */
  async stage(
    input: StagedPart,
    options: { embedder?: EdgeEmbedder } = {},
  ): Promise<StageResponse | DimensionMismatch | StagingFull | null> {
    const part = parse(StagedPart, input, "staged part");
    const edge = parse(EdgeEmbedder.optional(), options.embedder, "embedder");
    if (!this.#staging || !this.#generations) return null;
    const dims = this.#generations.dimsFor(edge) ?? part.chunks[0]!.vector.length;
    const odd = part.chunks.find((c) => c.vector.length !== dims);
    if (odd) return { mismatch: { expected: dims, got: odd.vector.length } };
    const staging = this.#staging;
    const bytes = part.chunks.reduce(
      (n, c) => n + c.vector.byteLength + (c.pieces ?? []).reduce((m, p) => m + p.byteLength, 0),
      0,
    );
    const limit = maxStagedBytes(this.env);
    if (staging.bytesBesides(part.path, part.hash, part.part) + bytes > limit) return { stagingFull: { limit } };
    this.ctx.storage.transactionSync(() => staging.put(part.path, part.hash, part.part, part.chunks));
    await this.#scheduleMaintenance(STAGING_RETENTION_MS);
    return { protocol: SYNC_PROTOCOL, path: part.path, hash: part.hash, part: part.part, chunks: part.chunks.length };
  }

  /**
   * Hybrid search (`hybridSearch`) over the current generation, with the Merkle root it was served
   * from. A vector of another model than the index's is answered `otherModel`, for the route to
   * embed the question with the index's model or search without a vector (keyed terms alone).
   */
  async search(input: SearchInput): Promise<SearchResponse | DimensionMismatch | BackendFailure | OtherModel | null> {
    const query = parse(SearchInput, input, "search");
    if (!this.#tree || !this.#generations) return null;
    const root = this.#tree.totals().root;
    const current = this.#generations.current;
    if (!current) return { protocol: SYNC_PROTOCOL, root, results: [] };
    const vector = query.vector;
    if (vector && query.model !== undefined) {
      const model = this.#generations.model({ model: query.model, dims: vector.length });
      if (model !== query.model || vector.length !== current.dims) return { otherModel: { model, dims: current.dims } };
    }
    if (vector && vector.length !== current.dims) return { mismatch: { expected: current.dims, got: vector.length } };
    try {
      const results = await hybridSearch(current.backend, current.catalogue, query);
      const moved = await this.#movedMeanwhile(query);
      if (moved.length > 0) {
        results.push(...moved);
        results.sort((a, b) => b.score - a.score);
        results.splice(query.topK);
      }
      const ranked = vector ? { mode: "hybrid" as const, ...(current.model ? { model: current.model } : {}) } : {};
      return { protocol: SYNC_PROTOCOL, root, results, ...(vector ? ranked : { mode: "lexical" as const }) };
    } catch (err) {
      if (err instanceof TurbopufferBackendError) return { backendFailure: backendFailure(err) };
      throw err;
    }
  }

  /**
   * While the index moves to another model, the hits of files that changed or arrived since the move
   * began: the old generation no longer holds them, the new one does, searched with the question in
   * its model. Ranked among the old generation's hits by their fused scores.
   */
  async #movedMeanwhile(query: z.output<typeof SearchInput>) {
    const pending = this.#generations!.pending;
    const current = this.#generations!.current!;
    if (!query.pending || !pending || pending.model !== query.pending.model) return [];
    if (query.pending.vector.length !== pending.dims) return [];
    const hits = await hybridSearch(pending.backend, pending.catalogue, { ...query, vector: query.pending.vector });
    const held = current.catalogue.holds(hits.map((h) => h.path));
    return hits.filter((h) => !held.has(h.path));
  }

  /**
   * The cached rotated vectors for these keyed chunk ids and model, null where there is none (or
   * null for all when the workspace does not exist).
   */
  async cachedVectors(model: string, ids: string[], dims?: number): Promise<(Float32Array | null)[] | null> {
    const parsed = parse(
      z.object({ model: z.string().min(1).max(200), ids: z.array(Hash).max(100_000), dims: z.number().optional() }),
      { model, ids, dims },
      "cache lookup",
    );
    if (!this.#cache) return null;
    // A model whose size changed under the same name is a miss, not a mismatch.
    const size = parsed.dims ?? this.#generations?.current?.dims;
    return this.#cache
      .get(parsed.model, parsed.ids)
      .map((v) => (v && size !== undefined && v.length !== size ? null : v));
  }

  /** Index and memory figures, for operators and benchmarks. */
  async indexStats() {
    const current = this.#generations?.current;
    if (!this.#tree || !this.#generations) return null;
    const backend = current?.backend;
    return {
      chunks: current?.catalogue.count() ?? 0,
      kind: backend instanceof TurbopufferBackend ? "turbopuffer" : backend ? "r2" : null,
      backend: backend instanceof R2Backend ? backend.stats() : null,
      pendingRemovals: Number(this.ctx.storage.sql.exec("SELECT count(*) AS n FROM backend_removals").one().n),
    };
  }

  /**
   * Drops staged parts nobody claimed, deletes retired generations, retries removals a backend
   * refused, and compacts.
   */
  override async alarm(): Promise<void> {
    const oldest = this.#staging?.prune(Date.now() - STAGING_RETENTION_MS) ?? null;
    if (oldest !== null) await this.#scheduleMaintenance(Math.max(1000, oldest + STAGING_RETENTION_MS - Date.now()));
    if (!this.#generations) return;
    await this.#sweep();
    const { current, pending } = this.#generations;
    const pendingIds = this.ctx.storage.sql
      .exec<{ id: number }>("SELECT id FROM backend_removals LIMIT 10000")
      .toArray()
      .map((r) => r.id);
    // Ids are unique across generations: removing one a backend never held changes nothing.
    for (const generation of [current, pending]) {
      if (!generation) continue;
      if (pendingIds.length > 0) await this.#remove(generation.backend, pendingIds);
      if (generation.backend instanceof R2Backend) await generation.backend.compact();
    }
    this.#cache?.prune(Date.now() - CACHE_RETENTION_MS);
  }

  /** Deletes retired generations' storage, or tries again later. */
  async #sweep(): Promise<void> {
    if (!(await this.#generations!.sweep())) await this.#scheduleMaintenance(REMOVAL_RETRY_MS);
  }

  /** Removes entries from the backend; whatever it refuses is kept and retried by the alarm. */
  async #remove(backend: IndexBackend, ids: number[]): Promise<void> {
    try {
      await backend.remove(ids.map(String));
      for (let i = 0; i < ids.length; i += 90) {
        const batch = ids.slice(i, i + 90);
        this.ctx.storage.sql.exec(
          `DELETE FROM backend_removals WHERE id IN (${batch.map(() => "?").join(",")})`,
          ...batch,
        );
      }
    } catch {
      // Search already ignores these ids (the catalogue no longer holds them); only storage lingers.
      for (const id of ids) this.ctx.storage.sql.exec("INSERT OR IGNORE INTO backend_removals (id) VALUES (?)", id);
      await this.#scheduleMaintenance(REMOVAL_RETRY_MS);
    }
  }

  async #scheduleMaintenance(delay = COMPACTION_DELAY_MS): Promise<void> {
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current > Date.now() + delay) await this.ctx.storage.setAlarm(Date.now() + delay);
  }

  /** Wipes every byte this object holds; later capabilities keep all their state here too. */
  async destroy(): Promise<void> {
    await this.ctx.storage.deleteAlarm();
    for (const backend of this.#generations?.all() ?? [])
      if (backend instanceof TurbopufferBackend) await backend.destroy();
    // Every object under the workspace's prefix, whichever embedder or index format wrote it.
    await deletePrefix(this.env.INDEX, `workspaces/${this.ctx.id.toString()}`);
    await this.ctx.storage.deleteAll();
    this.#tree = null;
    this.#cache = null;
    this.#staging = null;
    this.#generations = null;
  }

  #meta(): WorkspaceMeta | null {
    const row = this.ctx.storage.sql
      .exec("SELECT workspace_id, org_id, created_at FROM meta WHERE id = 1")
      .toArray()[0];
    if (!row) return null;
    return WorkspaceMeta.parse({ workspaceId: row.workspace_id, orgId: row.org_id, createdAt: row.created_at });
  }

  #lastSyncAt(): string | null {
    const row = this.ctx.storage.sql.exec("SELECT last_sync_at FROM meta WHERE id = 1").toArray()[0];
    return row?.last_sync_at ? String(row.last_sync_at) : null;
  }
}
