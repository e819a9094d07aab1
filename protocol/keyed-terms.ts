/**
 * The lexical channel without plaintext: each code-aware term of a chunk becomes a 32-bit keyed id
 * (HMAC-SHA-256 under a key derived from the client's vector key, truncated), so the edge can run
 * BM25 over ids that mean nothing without the key. Queries are turned into ids the same way.
 */
import { hkdf } from "@noble/hashes/hkdf.js";
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { definedNames } from "./embedder/names.js";
import { Tokenizer } from "./embedder/tokens.js";
import type { TranslatedWord } from "./embedder/translation.js";

export interface TermCounts {
  ids: Uint32Array;
  counts: Uint16Array;
}

const MAX_COUNT = 0xffff;
/** Distinct terms kept per chunk: the most frequent, which carry most of BM25's weight. */
export const MAX_TERMS_PER_CHUNK = 512;

export class TermKey {
  readonly #key: Uint8Array;
  readonly #memo = new Map<string, number>();
  readonly #tokenizer = new Tokenizer();

  constructor(vectorKey: Uint8Array) {
    this.#key = hkdf(sha256, vectorKey, new Uint8Array(0), new TextEncoder().encode("sextant lexical terms v1"), 32);
  }

  /** The keyed id of one term; memoised, since a commit repeats the same words many times. */
  id(term: string): number {
    let id = this.#memo.get(term);
    if (id === undefined) {
      const mac = hmac(sha256, this.#key, new TextEncoder().encode(term));
      id = ((mac[0]! << 24) | (mac[1]! << 16) | (mac[2]! << 8) | mac[3]!) >>> 0;
      if (this.#memo.size < 200_000) this.#memo.set(term, id);
    }
    return id;
  }

  /** A chunk's keyed terms with their counts (whole-name tokens included, as the embedder sees them). */
  terms(text: string): TermCounts {
    const counts = new Map<number, number>();
    for (const { term } of this.#tokenizer.tokenize(text)) {
      const id = this.id(term);
      counts.set(id, Math.min(MAX_COUNT, (counts.get(id) ?? 0) + 1));
    }
    const entries = [...counts].sort((a, b) => b[1] - a[1]).slice(0, MAX_TERMS_PER_CHUNK);
    return { ids: Uint32Array.from(entries, (e) => e[0]), counts: Uint16Array.from(entries, (e) => e[1]) };
  }

  /**
   * A chunk's keyed terms as the index holds them: its text's, with each term of a name it defines
   * (`definedNames`) counted once more, as BM25F weighs a title field. The dev eval's keyed lexical
   * channel scored 1.059x the identifier-split baseline's MRR@10 with it and 1.038x without.
   */
  chunk(text: string): TermCounts {
    return TermKey.withExtra(this.terms(text), this.query(definedNames(text).join(" ")));
  }

  /** `counts` with each of `extra` counted once more (a file's path terms added to its chunks). */
  static withExtra(counts: TermCounts, extra: readonly number[]): TermCounts {
    if (extra.length === 0) return counts;
    const merged = new Map<number, number>();
    counts.ids.forEach((id, i) => merged.set(id, counts.counts[i]!));
    for (const id of extra) merged.set(id, Math.min(MAX_COUNT, (merged.get(id) ?? 0) + 1));
    return { ids: Uint32Array.from(merged.keys()), counts: Uint16Array.from(merged.values()) };
  }

  /** A question's translated words (`translateQuestion`) as keyed ids, probabilities unchanged. */
  translated(words: readonly TranslatedWord[]): TranslatedWord<number>[] {
    return words.map((w) => ({
      term: this.id(w.term),
      alternatives: w.alternatives.map((t) => this.id(t)),
      probabilities: w.probabilities,
    }));
  }

  /** A query's distinct keyed terms. */
  query(text: string): number[] {
    return [...new Set(this.#tokenizer.tokenize(text).map(({ term }) => this.id(term)))];
  }
}
