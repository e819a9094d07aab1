/**
 * The Workspace object's RPC contract: the shapes its methods accept, validated on arrival because
 * any code holding the binding can call a stub, and the outcomes a route maps to problems.
 */
import { z } from "zod";
import { MAX_DEFINITION_PIECES } from "../protocol/embedder/names.js";
import { MAX_ALTERNATIVES, MAX_TRANSLATED_WORDS } from "../protocol/embedder/translation.js";
import {
  checkCommitPaths,
  EncryptedPath,
  FileSize,
  Hash,
  Language,
  MAX_STAGED_PARTS,
  StagedPartNumber,
} from "../protocol/sync.js";

export const WorkspaceMeta = z.object({
  workspaceId: z.string().min(1),
  orgId: z.string().min(1),
  createdAt: z.iso.datetime(),
});
export type WorkspaceMeta = z.infer<typeof WorkspaceMeta>;

/** A commit as the object receives it: leaves without text, and the chunks' vectors, already keyed. */
export const TreeCommit = z
  .object({
    upserts: z
      .array(
        z.object({
          path: EncryptedPath,
          hash: Hash,
          size: FileSize,
          /** Parts of this file's chunks staged before the commit (0 to n-1), committed with it. */
          stagedParts: z.number().int().min(0).max(MAX_STAGED_PARTS).optional(),
        }),
      )
      .max(2000),
    deletes: z.array(EncryptedPath).max(2000),
  })
  .superRefine(checkCommitPaths);
export type TreeCommit = z.input<typeof TreeCommit>;

/** Vector dimensions an index accepts: a power of two (the keyed rotation needs one). */
export const Vector = z
  .custom<Float32Array>((v) => v instanceof Float32Array, "must be a Float32Array")
  .refine(
    (v) => v.length >= 32 && v.length <= 4096 && (v.length & (v.length - 1)) === 0,
    "dimensions must be a power of two",
  );
const KeyedTerms = z.object({
  ids: z.custom<Uint32Array>((v) => v instanceof Uint32Array),
  counts: z.custom<Uint16Array>((v) => v instanceof Uint16Array),
});

const IndexedChunkShape = z
  .object({
    path: EncryptedPath,
    chunkId: Hash,
    startLine: z.number().int().positive(),
    endLine: z.number().int().positive(),
    language: Language,
    vector: Vector,
    terms: KeyedTerms,
    /** Its definition pieces' vectors, keyed like `vector`: the chunk ranks by the best of them all. */
    pieces: z.array(Vector).max(MAX_DEFINITION_PIECES).optional(),
  })
  .refine(
    (c) => (c.pieces ?? []).every((p) => p.length === c.vector.length),
    "a chunk's pieces must have its vector's dimensions",
  );
export const VectorChunks = z.array(IndexedChunkShape).max(100_000);
export type IndexedChunk = z.input<typeof IndexedChunkShape>;

/** One staged part of a file's chunks, embedded and keyed: held until a commit claims it. */
export const StagedPart = z
  .object({
    path: EncryptedPath,
    hash: Hash,
    part: StagedPartNumber,
    chunks: z.array(IndexedChunkShape).min(1).max(2000),
  })
  .refine((p) => p.chunks.every((c) => c.path === p.path), "every chunk must be of the staged file");
export type StagedPart = z.input<typeof StagedPart>;

/** The edge's embedder, named by the route with each commit, stage, status and search. */
export const EdgeEmbedder = z.object({
  model: z.string().min(1).max(200),
  /** Unknown until a remote embedder has answered once in the route's isolate. */
  dims: z.number().int().min(32).max(4096).optional(),
});
export type EdgeEmbedder = z.infer<typeof EdgeEmbedder>;

/** A question term's weight: what `questionTermWeights` gives, 0 to 4, with room. */
const TermWeight = z.number().min(0).max(16);

export const SearchInput = z.object({
  /** Absent: the keyed lexical channel alone (an index whose model the edge no longer has). */
  vector: Vector.optional(),
  /** The model that made `vector`; the object answers `OtherModel` when its index holds another. */
  model: z.string().min(1).max(200).optional(),
  terms: z.array(z.number().int().nonnegative()).max(512),
  /** Each term's weight in the lexical channel (`questionTermWeights`), in `terms`' order; 1 where absent. */
  termWeights: z.array(TermWeight).max(512).optional(),
  /** The question's words and their translations, keyed (`HotIndex.queryTranslated`). */
  translated: z
    .array(
      z.object({
        term: z.number().int().nonnegative(),
        alternatives: z.array(z.number().int().nonnegative()).max(MAX_ALTERNATIVES),
        probabilities: z.array(z.number().min(0).max(1)).max(MAX_ALTERNATIVES),
      }),
    )
    .max(MAX_TRANSLATED_WORDS)
    .optional(),
  /** Each translated word's weight, in `translated`'s order; 1 where absent. */
  translatedWeights: z.array(TermWeight).max(MAX_TRANSLATED_WORDS).optional(),
  topK: z.number().int().min(1).max(100),
  pathPrefix: EncryptedPath.optional(),
  language: Language.optional(),
  /**
   * The question as the edge's embedder sees it, while the index moves to that model: files that
   * changed or arrived since the move began are only in the new generation, and are searched there.
   */
  pending: z.object({ vector: Vector, model: z.string().min(1).max(200) }).optional(),
});
export type SearchInput = z.input<typeof SearchInput>;

/** A commit or search whose vectors do not match the dimensions the workspace was indexed with. */
export interface DimensionMismatch {
  mismatch: { expected: number; got: number };
}

/** A search whose vector is of another model than the index's (null: a model this object cannot name). */
export interface OtherModel {
  otherModel: { model: string | null; dims: number };
}

/** A hosted index backend failed; the route answers 502 or 504, and nothing was committed. */
export interface BackendFailure {
  backendFailure: { timedOut: boolean; message: string };
}

/** A commit refused because the tree's total would pass MAX_TREE_BYTES; nothing was committed. */
export interface TreeFull {
  treeFull: { limit: number };
}

/** A commit naming staged parts the object does not hold (never staged, or dropped); nothing was committed. */
export interface StagedMissing {
  stagedMissing: { upsert: number; parts: number[] };
}

/** A part refused because the workspace already holds as many staged bytes as it may. */
export interface StagingFull {
  stagingFull: { limit: number };
}

/** Thrown for RPC input that fails validation; routes validate first, so reaching it means a bug. */
export class InvalidRpcInput extends TypeError {}

export function parse<S extends z.ZodType>(schema: S, input: unknown, what: string): z.output<S> {
  const parsed = schema.safeParse(input);
  if (!parsed.success) throw new InvalidRpcInput(`Invalid ${what}: ${parsed.error.message}`);
  return parsed.data;
}
