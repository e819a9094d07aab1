import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { BUILTIN_DIMS } from "../protocol/embedder/builtin.js";
import { parentOf } from "../protocol/merkle.js";
import {
  DiffRequest,
  EncryptedPath,
  Hash,
  SYNC_PROTOCOL,
  type CommitResponse,
  type DiffResponse,
  type SearchResponse,
  type TreeStatus,
} from "../protocol/sync.js";
import { MerkleStore } from "./merkle-store.js";
import { VectorStore, type IndexedChunk } from "./vector-store.js";

const WorkspaceMeta = z.object({
  workspaceId: z.string().min(1),
  orgId: z.string().min(1),
  createdAt: z.iso.datetime(),
});
export type WorkspaceMeta = z.infer<typeof WorkspaceMeta>;

/** A commit as the object receives it: leaves without text, and the chunks' vectors, already keyed. */
const TreeCommit = z.object({
  upserts: z.array(z.object({ path: EncryptedPath, hash: Hash, size: z.number().int().nonnegative() })).max(2000),
  deletes: z.array(EncryptedPath).max(2000),
});
export type TreeCommit = z.infer<typeof TreeCommit>;

const VectorChunks = z
  .array(
    z.object({
      path: EncryptedPath,
      chunkId: Hash,
      startLine: z.number().int().positive(),
      endLine: z.number().int().positive(),
      vector: z.instanceof(Float32Array).refine((v) => v.length === BUILTIN_DIMS, "wrong dimensions"),
    }),
  )
  .max(100_000);

/** Thrown for RPC input that fails validation; routes validate first, so reaching it means a bug. */
class InvalidRpcInput extends TypeError {}

function parse<S extends z.ZodType>(schema: S, input: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(input);
  if (!parsed.success) throw new InvalidRpcInput(`Invalid ${what}: ${parsed.error.message}`);
  return parsed.data;
}

/**
 * One object per workspace: its metadata and the Merkle tree of what is indexed. SQLite-backed;
 * every RPC input is validated, because any code holding the binding can call a stub.
 */
export class Workspace extends DurableObject<Env> {
  /** Null until `init` and again after `destroy`: an object never writes state it was not asked to hold. */
  #tree: MerkleStore | null = null;
  #vectors: VectorStore | null = null;

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
         last_sync_at TEXT
       )`,
    );
    this.#tree = new MerkleStore(this.ctx.storage.sql, (fn) => this.ctx.storage.transactionSync(fn));
    this.#vectors = new VectorStore(
      this.ctx.storage.sql,
      this.env.INDEX,
      `workspaces/${this.ctx.id.toString()}`,
      BUILTIN_DIMS,
    );
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
  async status(): Promise<TreeStatus | null> {
    if (!this.#tree) return null;
    const { root, files, bytes } = this.#tree.totals();
    return { protocol: SYNC_PROTOCOL, root, files, bytes, lastSyncAt: this.#lastSyncAt() };
  }

  async diff(input: DiffRequest): Promise<DiffResponse | null> {
    const request = parse(DiffRequest, input, "diff request");
    if (!this.#tree) return null;
    const { nodes, truncated } = this.#tree.descendants(request.dirs, request.budget);
    return { protocol: SYNC_PROTOCOL, root: this.#tree.totals().root, nodes, truncated };
  }

  /**
   * Applies a batch of files and deletions. The vectors go to R2 first (immutable segments); then
   * one transaction records them and commits the leaves, so the tree never claims a file whose
   * vectors are not stored. Replaying a commit changes nothing.
   */
  async commit(input: TreeCommit, chunks: IndexedChunk[] = []): Promise<CommitResponse | null> {
    const request = parse(TreeCommit, input, "commit");
    const vectors = parse(VectorChunks, chunks, "vectors");
    if (!this.#tree || !this.#vectors) return null;
    const tree = this.#tree;
    const store = this.#vectors;
    const written = vectors.length > 0 ? await store.write(vectors) : undefined;
    const { root, files, bytes } = this.ctx.storage.transactionSync(() => {
      store.removePaths(request.deletes);
      // A file that a new file's directory replaces, and files with no chunks left.
      const ancestors = new Set<string>();
      for (const { path } of request.upserts) for (let d = parentOf(path); d !== ""; d = parentOf(d)) ancestors.add(d);
      store.removeExact([...ancestors]);
      store.removePaths(request.upserts.map((u) => u.path));
      if (written) store.record(written);
      return tree.apply(request.upserts, request.deletes);
    });
    const now = new Date().toISOString();
    this.ctx.storage.sql.exec("UPDATE meta SET last_sync_at = ? WHERE id = 1", now);
    return {
      protocol: SYNC_PROTOCOL,
      root,
      files,
      bytes,
      lastSyncAt: now,
      applied: request.upserts.length + request.deletes.length,
    };
  }

  /** The best chunks for a query vector (keyed by the client, like the stored ones). */
  async search(query: Float32Array, topK: number, pathPrefix?: string): Promise<SearchResponse | null> {
    parse(z.instanceof(Float32Array), query, "query");
    if (!this.#tree || !this.#vectors) return null;
    const results = await this.#vectors.search(query, Math.min(Math.max(1, topK), 100), pathPrefix);
    return { protocol: SYNC_PROTOCOL, root: this.#tree.totals().root, results };
  }

  /** Wipes every byte this object holds; later capabilities keep all their state here too. */
  async destroy(): Promise<void> {
    await this.ctx.storage.deleteAlarm();
    await this.#vectors?.destroy();
    await this.ctx.storage.deleteAll();
    this.#tree = null;
    this.#vectors = null;
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
