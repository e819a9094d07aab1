/**
 * A commit's application to a workspace: its validation, the staged parts it claims, the write of
 * its vectors to the index generation(s), and the one transaction that updates the catalogue, the
 * migration's bookkeeping, the staging area, the vector cache and the Merkle tree together.
 */
import { z } from "zod";
import { parentOf } from "../protocol/merkle.js";
import { MAX_TREE_BYTES } from "../protocol/sync.js";
import type { IndexBackend } from "./index-backend.js";
import { TreeTooLarge, type MerkleStore, type TreeTotals } from "./merkle-store.js";
import type { Generations } from "./migration.js";
import { R2Backend } from "./r2-backend.js";
import type { StagedChunks } from "./staging.js";
import { TurbopufferBackendError } from "./turbopuffer-backend.js";
import type { VectorCache } from "./vector-cache.js";
import {
  EdgeEmbedder,
  InvalidRpcInput,
  parse,
  TreeCommit,
  VectorChunks,
  type BackendFailure,
  type DimensionMismatch,
  type IndexedChunk,
  type StagedMissing,
  type TreeFull,
} from "./workspace-rpc.js";

export interface CommitOptions {
  /** The model whose rotated vectors are kept in the vector cache, when set. */
  cacheModel?: string;
  /** The edge's embedder, which picks the generation the vectors go to. */
  embedder?: EdgeEmbedder;
}

/** A commit's inputs, validated. */
export interface ParsedCommit {
  request: z.output<typeof TreeCommit>;
  sent: z.output<typeof VectorChunks>;
  cacheModel: string | undefined;
  edge: EdgeEmbedder | undefined;
}

/** The workspace's state a commit changes, and the object's upkeep it relies on. */
export interface CommitTarget {
  tree: MerkleStore;
  staging: StagedChunks;
  generations: Generations;
  cache: VectorCache;
  transaction: <T>(fn: () => T) => T;
  /** Removes entries from a backend, keeping whatever it refuses for a retry. */
  remove(backend: IndexBackend, ids: number[]): Promise<void>;
  /** Deletes retired generations' storage, or schedules a retry. */
  sweep(): Promise<void>;
  /** Schedules compaction and the other upkeep of the alarm. */
  scheduleMaintenance(): Promise<void>;
}

export type CommitFailure = DimensionMismatch | BackendFailure | TreeFull | StagedMissing;

export function backendFailure(err: TurbopufferBackendError): BackendFailure["backendFailure"] {
  return { timedOut: err.timedOut, message: err.message };
}

/** Validates a commit's RPC inputs; a chunk of a file the commit does not upsert is refused. */
export function parseCommit(input: TreeCommit, chunks: IndexedChunk[], options: CommitOptions): ParsedCommit {
  const request = parse(TreeCommit, input, "commit");
  const sent = parse(VectorChunks, chunks, "vectors");
  // A chunk of a file the commit does not upsert would be searchable with no file in the tree.
  const upserted = new Set(request.upserts.map((u) => u.path));
  if (sent.some((v) => !upserted.has(v.path)))
    throw new InvalidRpcInput("Invalid vectors: a chunk of a file not upserted");
  const cacheModel = parse(z.string().min(1).max(200).optional(), options.cacheModel, "cache model");
  const edge = parse(EdgeEmbedder.optional(), options.embedder, "embedder");
  return { request, sent, cacheModel, edge };
}

/**
 * Applies a batch of files and deletions. The chunks go to the index backend first (for the
 * embedded backend, an immutable segment on R2); then one transaction records them in the
 * catalogue, drops what they replace and commits the leaves, so the tree never claims a file
 * whose vectors are not stored. Replaying a commit changes nothing that search can see. Vectors of
 * another model than the index's go to the generation being built for it (migration.ts), which
 * becomes current in the transaction of the commit that completes it.
 */
export async function applyCommit(
  target: CommitTarget,
  { request, sent, cacheModel, edge }: ParsedCommit,
): Promise<{ totals: TreeTotals } | CommitFailure> {
  const { tree, staging, generations } = target;
  // Each file's staged parts come first, in order, then the chunks this commit carries.
  const staged: IndexedChunk[] = [];
  const claimed: { path: string; hash: string }[] = [];
  for (const [i, u] of request.upserts.entries()) {
    if (!u.stagedParts) continue;
    const { chunks: parts, missing } = staging.take(u.path, u.hash, u.stagedParts);
    if (missing.length > 0) return { stagedMissing: { upsert: i, parts: missing } };
    staged.push(...parts);
    claimed.push(u);
  }
  const vectors = staged.length > 0 ? [...staged, ...sent] : sent;
  const written = generations.target(edge, vectors[0]?.vector.length);
  if ("mismatch" in written) return written;
  const { generation, migrating } = written;
  const odd = generation && vectors.find((v) => v.vector.length !== generation.dims);
  if (odd) return { mismatch: { expected: generation.dims, got: odd.vector.length } };
  const backend = generation?.backend ?? null;
  const catalogue = generation?.catalogue ?? null;
  const old = migrating ? generations.current : null;
  const first = catalogue && vectors.length > 0 ? catalogue.reserve(vectors.length) : 0;
  const rows = vectors.map((v, i) => ({ ...v, id: first + i }));
  if (backend && rows.length > 0) {
    try {
      await backend.write(
        rows.map((r) => ({
          id: String(r.id),
          path: r.path,
          language: r.language,
          vector: r.vector,
          terms: r.terms,
          ...(r.pieces?.length ? { pieces: r.pieces } : {}),
        })),
      );
    } catch (err) {
      // Nothing is committed: the tree still lacks these files, so the next sync sends them again.
      if (err instanceof TurbopufferBackendError) return { backendFailure: backendFailure(err) };
      throw err;
    }
  }
  let applied;
  try {
    applied = target.transaction(() => {
      // A file that a new file's directory replaces, and the earlier chunks of every file upserted.
      const ancestors = new Set<string>();
      for (const { path } of request.upserts) for (let d = parentOf(path); d !== ""; d = parentOf(d)) ancestors.add(d);
      const dropped = catalogue
        ? [
            ...catalogue.removePaths(request.deletes),
            ...catalogue.removeExact([...ancestors]),
            ...catalogue.removePaths(request.upserts.map((u) => u.path)),
          ]
        : [];
      catalogue?.insert(rows);
      // Before the tree moves on: a file re-sent unchanged keeps its lines in the current generation.
      const droppedOld = migrating
        ? generations.migrate(request.upserts, request.deletes, [...ancestors], (p, h) => tree.fileHash(p) === h)
        : [];
      for (const { path, hash } of claimed) staging.drop(path, hash);
      if (cacheModel) target.cache.put(cacheModel, rows);
      const totals = tree.apply(request.upserts, request.deletes);
      const switched = migrating && generations.pending !== null && generations.remaining(totals.files) === 0;
      if (switched) generations.switchOver();
      return { totals, dropped, droppedOld, switched };
    });
  } catch (err) {
    if (!(err instanceof TreeTooLarge)) throw err;
    // Rolled back; the entries already written to the backend now belong to no file.
    const ids = rows.map((r) => r.id);
    if (backend && ids.length > 0) await target.remove(backend, ids);
    return { treeFull: { limit: MAX_TREE_BYTES } };
  }
  const { totals, dropped, droppedOld, switched } = applied;
  if (backend && dropped.length > 0) await target.remove(backend, dropped);
  if (switched) await target.sweep();
  else if (old && droppedOld.length > 0) await target.remove(old.backend, droppedOld);
  if (generations.hasRetired() || (backend instanceof R2Backend && backend.needsCompaction()))
    await target.scheduleMaintenance();
  return { totals };
}
