/**
 * Where a workspace's vectors live and how they are searched. The Workspace object's SQLite
 * catalogue (encrypted path, line range, keyed chunk id, and an entry id per chunk) is the source of
 * truth for what is live; a backend stores one entry per id and answers nearest-neighbour queries
 * over them. An id the catalogue no longer holds may still come back from a backend that deletes
 * lazily: the object drops such hits, so search never serves a deleted or replaced chunk.
 */

import type { TranslatedTerm } from "./hot-index.js";

/** Keyed lexical terms of one chunk: 32-bit keyed term ids and how often each occurs. */
export interface KeyedTerms {
  ids: Uint32Array;
  counts: Uint16Array;
}

export interface BackendEntry {
  /** The catalogue's row id, in decimal: unique within the workspace and never reused. */
  id: string;
  /** The file's encrypted path, for path-prefix filters. */
  path: string;
  /** A short language code (`typescript`, `python`, `text`, ...), for language filters. */
  language: string;
  /** Already transformed with the client's vector key; length is the workspace's dimensions. */
  vector: Float32Array;
  terms: KeyedTerms;
  /**
   * Its definition pieces' vectors, keyed and sized like `vector`: the entry's vector score is the
   * best of `vector`'s and theirs.
   */
  pieces?: readonly Float32Array[];
}

export interface BackendFilter {
  /** An encrypted directory: only entries whose path lies below it. */
  pathPrefix?: string;
  language?: string;
}

export interface BackendHit {
  id: string;
  score: number;
}

export interface IndexBackend {
  /** Vector dimensions, fixed for the backend's lifetime. */
  readonly dims: number;
  /** Stores the entries durably. Called before the catalogue records them. */
  write(entries: readonly BackendEntry[]): Promise<void>;
  /** Forgets entries the catalogue no longer holds. May be called again with ids already gone. */
  remove(ids: readonly string[]): Promise<void>;
  /** The best `k` entries by inner product with `vector` (already keyed), highest first. */
  queryVector(vector: Float32Array, k: number, filter: BackendFilter): Promise<BackendHit[]>;
  /**
   * The best `k` entries by BM25 over keyed term ids, highest first, each term's part weighted by
   * `weights` (1 where absent): `HotIndex.queryTerms`, and Turbopuffer as a sum of weighted BM25 clauses.
   */
  queryTerms(
    terms: readonly number[],
    k: number,
    filter: BackendFilter,
    weights?: readonly number[],
  ): Promise<BackendHit[]>;
  /**
   * The best `k` entries by the translation channel over keyed terms (`HotIndex.queryTranslated`),
   * each word weighted by `weights`, highest first; Turbopuffer, which ranks by BM25 alone, ranks
   * each word and its heaviest translations by weighted BM25 instead (`translationBm25`).
   */
  queryTranslated?(
    words: readonly TranslatedTerm[],
    k: number,
    filter: BackendFilter,
    weights?: readonly number[],
  ): Promise<BackendHit[]>;
  /** Deletes everything this backend holds for the workspace. */
  destroy(): Promise<void>;
}
