/**
 * The in-memory half of the R2 index: what a Durable Object keeps hot to answer queries without
 * touching R2, stored in `HotSlots` (hot-slots.ts), its vectors scored by `HotVectors`
 * (hot-vectors.ts), and here each entry ranked with its definition pieces, and the lexical and
 * translation channels scored.
 *
 * The lexical channel scores the inverted index of keyed 32-bit term ids with BM25 (k1 = 1.2,
 * b = 0.75); very common terms are skipped like stop words (see `commonAt`).
 */
import { MAX_DEFINITION_PIECES } from "../protocol/embedder/names.js";
import { TRANSLATION_MU, TRANSLATION_SELF } from "../protocol/embedder/translation.js";
import type { HotEntry } from "./hot-slots.js";
import { HotVectors, type HotFilter, type HotHit, type HotVectorsOptions } from "./hot-vectors.js";
import { bestPerId, TopK } from "./top-k.js";

export type { HotEntry } from "./hot-slots.js";
export type { HotFilter, HotHit } from "./hot-vectors.js";

/** A question word's keyed term, and the keyed code terms it translates to with their probabilities. */
export interface TranslatedTerm {
  term: number;
  alternatives: readonly number[];
  probabilities: readonly number[];
}

export interface HotIndexOptions extends HotVectorsOptions {
  /**
   * Memory for the definition pieces' int8 vectors (`PIECE_INT8_BUDGET`): pieces are held while their
   * int8 copies fit it, so that they are always scored exactly; past it, they are dropped and entries
   * rank by their own vectors.
   */
  pieceInt8BudgetBytes?: number;
  /** Postings the translation channel walks for alternatives per query (`TRANSLATION_POSTING_BUDGET`). */
  translationBudget?: number;
}

const K1 = 1.2;
/**
 * A query term is skipped, as stop words are, when it is in over 5,000 chunks and over a tenth of
 * them (idf under 2.4, and a long list to walk): this keeps BM25 fast in large workspaces and exact
 * in small ones, where skipping the commonest terms (a third of all chunks, as it once did) cost
 * ranking: the dev eval's keyed lexical channel scored 0.99x the baseline's MRR@10 with it and 1.04x
 * without.
 */
const commonAt = (live: number) => Math.max(5000, live / 10);
const B = 0.75;
/**
 * Postings the translation channel walks for its alternatives, at most, per query, shared equally
 * among the question's words. At 100,000 chunks a translated search then took about 2 ms more than a
 * two-channel one (`npm run bench:scale`; at 50,000 the p95 was 1.13x). The dev eval's codebases
 * never reach it; in larger ones each word's lightest alternatives past its share are skipped.
 */
export const TRANSLATION_POSTING_BUDGET = 25_000;

/**
 * Memory for the definition pieces' int8 copies, and so how many pieces a hot index holds: 262,144
 * at 128 dimensions, a 100,000-chunk workspace's at the 2.5 a chunk the dev eval's codebases reach
 * with at most 3. With their codes and slot arrays (36 bytes a piece) and the entries' own arrays
 * and postings, the index's typed arrays took 83.5 MiB at 100,000 chunks and 250,000 pieces
 * (`npm run bench:scale`), inside a Durable Object's 128 MB; a workspace past the budget ranks by
 * its chunks' own vectors, as one indexed without pieces does (70.7 MiB at 400,000 chunks). Held
 * beyond it with 1-bit codes alone, a million pieces took the index to 106.5 MiB at 400,000 chunks,
 * and their estimated scores would have been merged with the chunks' exact ones.
 */
export const PIECE_INT8_BUDGET = 32 * 2 ** 20;
const NO_TERMS = new Uint32Array(0);
const NO_COUNTS = new Uint16Array(0);

export class HotIndex extends HotVectors {
  readonly #translationBudget: number;
  readonly #maxPieces: number;
  /**
   * The entries' definition pieces: vectors only, each slot under its entry's id and language. Null
   * once they outgrow their budget, for the object's lifetime.
   */
  #pieces: HotVectors | null;

  /** Per-slot score accumulator for BM25, left zeroed after each query, and the slots it touched. */
  #scratch: Float32Array | null = null;
  #touched: Int32Array | null = null;
  /** The translation channel's per-word accumulator and the slots it touched. */
  #wordScratch: Float32Array | null = null;
  #wordTouched: Int32Array | null = null;

  constructor(dims: number, options: HotIndexOptions = {}) {
    super(dims, options);
    this.#translationBudget = options.translationBudget ?? TRANSLATION_POSTING_BUDGET;
    this.#maxPieces = Math.floor((options.pieceInt8BudgetBytes ?? PIECE_INT8_BUDGET) / dims);
    this.#pieces =
      this.#maxPieces > 0
        ? new HotVectors(dims, {
            ...(options.exactLimit !== undefined ? { exactLimit: options.exactLimit } : {}),
            // One piece more than held, so the int8 copy outlives every piece it scores.
            int8BudgetBytes: (this.#maxPieces + 1) * dims,
            maxPostings: 0,
          })
        : null;
  }

  /** Definition pieces held, or null when they outgrew their budget and ranking goes by entries alone. */
  get pieceCount(): number | null {
    return this.#pieces?.size ?? null;
  }

  override get bytes(): number {
    return super.bytes + (this.#pieces?.bytes ?? 0);
  }

  override add(entry: HotEntry): void {
    super.add(entry);
    const pieces = this.#pieces;
    if (!pieces || !entry.pieces?.length) return;
    for (const piece of entry.pieces)
      pieces.add({ id: entry.id, language: entry.language, ...piece, termIds: NO_TERMS, termCounts: NO_COUNTS });
    // Past the budget (or tombstones awaiting compaction pushing the int8 copy out), pieces would be
    // scored by their 1-bit estimate beside the entries' exact scores: dropped instead.
    if (pieces.size > this.#maxPieces || !pieces.exact) this.#pieces = null;
  }

  override remove(id: number): boolean {
    this.#pieces?.remove(id);
    return super.remove(id);
  }

  /** The filter for entries with these ids: a mask over their slots and over their pieces'. */
  filterOf(ids: readonly number[]): Pick<HotFilter, "mask" | "pieceMask"> {
    return { mask: this.maskOf(ids), ...(this.#pieces ? { pieceMask: this.#pieces.maskOf(ids) } : {}) };
  }

  /**
   * The best `k` entries by inner product with `query`, each scored by the best of its own vector
   * and its definition pieces'. Every entry in that top `k` has its own vector among the best `k`
   * own vectors or its best piece among the best `k × MAX_DEFINITION_PIECES` pieces (fewer than `k`
   * entries, with at most that many pieces each, can beat it), so both are asked for that many and
   * merged: exact where the scans are. Past `exactLimit` pieces, the 1-bit scan re-scores as many
   * of the pieces as of the entries (16 per result): re-scoring as many as the bound asks made a
   * search at 100,000 chunks and 300,000 pieces 1.30x the old embedder's at p50 (`npm run
   * bench:scale`, one run of a build with at most 4 pieces; docs/benchmarks.md, "Search at scale"),
   * while at this share the search kept 0.980 of the exact top 10 on real code, against 0.959
   * without pieces (`bench/pieces-recall.ts`).
   */
  queryVector(query: Float32Array, k: number, filter: HotFilter = {}): HotHit[] {
    const own = this.nearest(query, k, filter);
    const pieces = this.#pieces;
    if (!pieces || pieces.size === 0) return own;
    if (filter.mask && !filter.pieceMask) throw new Error("A masked query needs the pieces' mask too (filterOf).");
    const pieceFilter = { ...(filter.pieceMask ? { mask: filter.pieceMask } : {}), language: filter.language };
    const candidates = Math.max(k * 16, 256);
    return bestPerId([...own, ...pieces.nearest(query, k * MAX_DEFINITION_PIECES, pieceFilter, candidates)], k);
  }

  /**
   * BM25 over keyed term ids, each term's part multiplied by its weight in `weights` (1 where none is
   * given; a term given twice counts once, at its first weight); null when the lexical channel is off
   * for this index.
   */
  queryTerms(
    terms: readonly number[],
    k: number,
    filter: HotFilter = {},
    weights?: readonly number[],
  ): HotHit[] | null {
    if (!this.postings) return null;
    if (this.live === 0) return [];
    const admit = this.admit(filter);
    const avg = this.totalLength / this.live || 1;
    if (!this.#scratch || this.#scratch.length < this.n) this.#scratch = new Float32Array(this.cap);
    const scores = this.#scratch;
    if (!this.#touched || this.#touched.length < this.n) this.#touched = new Int32Array(this.cap);
    const touched = this.#touched;
    let touchedCount = 0;
    const common = commonAt(this.live);
    const seen = new Set<number>();
    for (let q = 0; q < terms.length; q++) {
      const term = terms[q]!;
      if (seen.has(term)) continue;
      seen.add(term);
      const list: { buf: Uint32Array; len: number } | undefined = this.postings.get(term);
      if (!list) continue;
      const df = this.#liveDf(list);
      // A very common term says little and costs the most: skipped, unless it is all the query has.
      if (df === 0 || (df > common && terms.length > 1)) continue;
      const idf = Math.log(1 + (this.live - df + 0.5) / (df + 0.5)) * (weights?.[q] ?? 1);
      if (idf <= 0) continue;
      const lengths = this.lengths;
      for (let i = 0; i < list.len; i++) {
        const posting: number = list.buf[i]!;
        const slot = posting >>> 8;
        if (!admit(slot)) continue;
        const tf = posting & 255;
        const norm = tf + K1 * (1 - B + (B * lengths[slot]!) / avg);
        if (scores[slot] === 0) touched[touchedCount++] = slot;
        scores[slot]! += (idf * (tf * (K1 + 1))) / norm;
      }
    }
    const top = new TopK(k, this.ids);
    for (let t = 0; t < touchedCount; t++) {
      const slot = touched[t]!;
      top.push(slot, scores[slot]!);
      scores[slot] = 0;
    }
    return top.sorted().map(({ item, score }) => ({ id: this.ids[item]!, score }));
  }

  /**
   * The translation channel: each question word counts its own occurrences in a chunk and those of
   * the code terms it translates to, weighted by their probability, smoothed by how often the word
   * occurs in the whole index (a translation language model, `protocol/embedder/translation.ts`):
   *   Σ_w ln(1 + (SELF·c(w, d) + (1 − SELF)·Σ_t P(w | t)·c(t, d)) / (MU·P(w))) − |w|·ln(|d| + MU)
   * which ranks as the model's likelihood does. Only chunks holding one of the terms are scored.
   * Alternatives are walked in the order given (the most weight first) while their postings fit the
   * word's share of `TRANSLATION_POSTING_BUDGET`; one that does not fit is skipped, as is one as common
   * as BM25 skips (`commonAt`), and a question word that common counts only through its alternatives.
   * Null when the lexical channel is off for this index.
   */
  queryTranslated(
    words: readonly TranslatedTerm[],
    k: number,
    filter: HotFilter = {},
    weights?: readonly number[],
  ): HotHit[] | null {
    if (!this.postings) return null;
    if (this.live === 0 || words.length === 0) return [];
    const admit = this.admit(filter);
    if (!this.#scratch || this.#scratch.length < this.n) this.#scratch = new Float32Array(this.cap);
    if (!this.#touched || this.#touched.length < this.n) this.#touched = new Int32Array(this.cap);
    if (!this.#wordScratch || this.#wordScratch.length < this.n) this.#wordScratch = new Float32Array(this.cap);
    if (!this.#wordTouched || this.#wordTouched.length < this.n) this.#wordTouched = new Int32Array(this.cap);
    const [total, touched, num, wordTouched] = [this.#scratch, this.#touched, this.#wordScratch, this.#wordTouched];
    let touchedCount = 0;
    let left = this.#translationBudget;
    const common = commonAt(this.live);
    const alive = this.alive;
    const filtered = filter.mask !== undefined || filter.language !== undefined;
    let wordCount = 0;
    let cf = 0;
    // One list's postings into the word's accumulator: a plain loop, no call per posting.
    const add = (buf: Uint32Array, len: number, weight: number, countCf: boolean) => {
      for (let i = 0; i < len; i++) {
        const posting = buf[i]!;
        const slot = posting >>> 8;
        if (filtered ? !admit(slot) : alive[slot] !== 1) continue;
        const tf = posting & 255;
        if (countCf) cf += tf;
        if (num[slot] === 0) wordTouched[wordCount++] = slot;
        num[slot]! += weight * tf;
      }
    };
    for (let w = 0; w < words.length; w++) {
      const word = words[w]!;
      wordCount = 0;
      cf = 0;
      // Each word gets an equal share of what is left, so the first words cannot spend it all.
      let budget = Math.floor(left / (words.length - w));
      const own = this.postings.get(word.term);
      // A word as common as BM25 skips is skipped here too (its chunks are most of the index), and its
      // share of the index counted by its chunks alone.
      if (own && words.length > 1 && this.#liveDf(own) > common) cf = own.len;
      else if (own) add(own.buf, own.len, TRANSLATION_SELF, true);
      for (let i = 0; i < word.alternatives.length; i++) {
        const list = this.postings.get(word.alternatives[i]!);
        const p = word.probabilities[i] ?? 0;
        if (!list || p <= 0 || list.len > budget || this.#liveDf(list) > common) continue;
        budget -= list.len;
        left -= list.len;
        add(list.buf, list.len, (1 - TRANSLATION_SELF) * p, false);
      }
      const background = (TRANSLATION_MU * (cf + 0.5)) / (this.totalLength + 1);
      const wordWeight = weights?.[w] ?? 1;
      for (let t = 0; t < wordCount; t++) {
        const slot = wordTouched[t]!;
        // Each word adds more than 0 to a chunk it touches, so a total of 0 is a chunk not yet seen.
        if (total[slot] === 0) touched[touchedCount++] = slot;
        total[slot]! += wordWeight * Math.log1p(num[slot]! / background);
        num[slot] = 0;
      }
    }
    const top = new TopK(k, this.ids);
    const lengths = this.lengths;
    let weightSum = 0;
    for (let w = 0; w < words.length; w++) weightSum += weights?.[w] ?? 1;
    for (let t = 0; t < touchedCount; t++) {
      const slot = touched[t]!;
      top.push(slot, total[slot]! - weightSum * Math.log(lengths[slot]! + TRANSLATION_MU));
      total[slot] = 0;
    }
    return top.sorted().map(({ item, score }) => ({ id: this.ids[item]!, score }));
  }

  /** Live chunks on a term's postings: the list's length unless tombstones await compaction. */
  #liveDf(list: { buf: Uint32Array; len: number }): number {
    if (this.n === this.live) return list.len;
    let df = 0;
    for (let i = 0; i < list.len; i++) if (this.alive[Math.floor(list.buf[i]! / 256)]) df++;
    return df;
  }
}
