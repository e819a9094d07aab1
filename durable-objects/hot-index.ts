/**
 * The in-memory half of the R2 index: what a Durable Object keeps hot to answer queries without
 * touching R2, stored in `HotSlots` (hot-slots.ts) and scored here.
 *
 * Vector search scans the 1-bit codes with an asymmetric estimate (the float query against the
 * stored signs, through a per-query lookup table of 256 partial sums per byte), keeps the best few
 * hundred, and re-scores those exactly from the int8 vectors when they are held. Small indexes are
 * scanned exactly. At 512 dimensions a million entries take 64 MB of codes, so the largest
 * workspaces stay inside a Durable Object's 128 MB; below the int8 budget results are exact.
 *
 * The lexical channel scores the inverted index of keyed 32-bit term ids with BM25 (k1 = 1.2,
 * b = 0.75); very common terms are skipped like stop words (see `commonAt`).
 */
import { TRANSLATION_MU, TRANSLATION_SELF } from "../protocol/embedder/translation.js";
import { HotSlots, type HotSlotsOptions } from "./hot-slots.js";
import { TopK } from "./top-k.js";

export type { HotEntry } from "./hot-slots.js";

export interface HotFilter {
  /** Only these slots (a mask over slots), when set. */
  mask?: Uint8Array;
  /** Only this language code, when set. */
  language?: number;
}

export interface HotHit {
  id: number;
  score: number;
}

/** A question word's keyed term, and the keyed code terms it translates to with their probabilities. */
export interface TranslatedTerm {
  term: number;
  alternatives: readonly number[];
  probabilities: readonly number[];
}

export interface HotIndexOptions extends HotSlotsOptions {
  /** At most this many live entries are scored exactly rather than through the 1-bit codes. */
  exactLimit?: number;
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
 * two-channel one, its p50 and p95 within the old embedder's (`npm run bench:scale`; at 50,000 the
 * p95 was 1.13x). The dev eval's codebases never reach it; in larger ones each word's lightest
 * alternatives past its share are skipped.
 */
export const TRANSLATION_POSTING_BUDGET = 25_000;

export class HotIndex extends HotSlots {
  readonly #exactLimit: number;
  readonly #translationBudget: number;

  /** Per-slot score accumulator for BM25, left zeroed after each query, and the slots it touched. */
  #scratch: Float32Array | null = null;
  #touched: Int32Array | null = null;
  #lut: Float32Array | null = null;
  /** The translation channel's per-word accumulator and the slots it touched. */
  #wordScratch: Float32Array | null = null;
  #wordTouched: Int32Array | null = null;

  constructor(dims: number, options: HotIndexOptions = {}) {
    super(dims, options);
    this.#exactLimit = options.exactLimit ?? 4096;
    this.#translationBudget = options.translationBudget ?? TRANSLATION_POSTING_BUDGET;
  }

  queryVector(query: Float32Array, k: number, filter: HotFilter = {}): HotHit[] {
    if (query.length !== this.dims) throw new Error(`Expected ${this.dims} dimensions, got ${query.length}.`);
    const admit = this.#admit(filter);
    if (this.int8 && this.live <= this.#exactLimit) return this.#exactScan(query, k, admit);

    // Asymmetric 1-bit scan: per byte of code, the sum of ±query over its 8 dimensions.
    const nb = this.codeBytes;
    // Reused across queries: a search allocates almost nothing, so the collector rarely interrupts one.
    const lut = (this.#lut ??= new Float32Array(nb * 256));
    for (let b = 0; b < nb; b++) {
      const at = b * 256;
      let all = 0;
      for (let i = 0; i < 8; i++) all -= query[b * 8 + i]!;
      lut[at] = all;
      for (let v = 1; v < 256; v++) {
        const low = v & -v;
        lut[at + v] = lut[at + (v ^ low)]! + 2 * query[b * 8 + (31 - Math.clz32(low))]!;
      }
    }
    const codes = this.codes;
    const meanAbs = this.meanAbs;
    const alive = this.alive;
    const filtered = filter.mask !== undefined || filter.language !== undefined;
    const pool = new TopK(this.int8 ? Math.max(k * 16, 256) : k, this.ids);
    let floor = -Infinity;
    // Four code bytes per read: one typed-array load instead of four.
    const words = new Uint32Array(codes.buffer, codes.byteOffset, codes.length >> 2);
    const nw = nb >> 2;
    for (let slot = 0; slot < this.n; slot++) {
      if (filtered ? !admit(slot) : alive[slot] !== 1) continue;
      let s0 = 0;
      let s1 = 0;
      for (let w = 0, at = slot * nw, t = 0; w < nw; w++, at++, t += 1024) {
        const x = words[at]!;
        s0 += lut[t | (x & 255)]! + lut[(t + 256) | ((x >>> 8) & 255)]!;
        s1 += lut[(t + 512) | ((x >>> 16) & 255)]! + lut[(t + 768) | (x >>> 24)]!;
      }
      const score = (s0 + s1) * meanAbs[slot]!;
      if (score < floor) continue;
      pool.push(slot, score);
      if (pool.length === pool.size) floor = pool.scores[0]!;
    }
    if (!this.int8) return pool.sorted().map(({ item, score }) => ({ id: this.ids[item]!, score }));
    const exact = new TopK(k, this.ids);
    for (let i = 0; i < pool.length; i++) {
      const slot = pool.items[i]!;
      exact.push(slot, this.#dot(query, slot));
    }
    return exact.sorted().map(({ item, score }) => ({ id: this.ids[item]!, score }));
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
    const admit = this.#admit(filter);
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
    const admit = this.#admit(filter);
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

  #admit(filter: HotFilter): (slot: number) => boolean {
    const alive = this.alive;
    const { mask, language } = filter;
    const lang = this.language;
    if (mask && language !== undefined) return (s) => alive[s] === 1 && mask[s] === 1 && lang[s] === language;
    if (mask) return (s) => alive[s] === 1 && mask[s] === 1;
    if (language !== undefined) return (s) => alive[s] === 1 && lang[s] === language;
    return (s) => alive[s] === 1;
  }

  #exactScan(query: Float32Array, k: number, admit: (slot: number) => boolean): HotHit[] {
    const top = new TopK(k, this.ids);
    for (let slot = 0; slot < this.n; slot++) if (admit(slot)) top.push(slot, this.#dot(query, slot));
    return top.sorted().map(({ item, score }) => ({ id: this.ids[item]!, score }));
  }

  #dot(query: Float32Array, slot: number): number {
    const v = this.int8!;
    const d = this.dims;
    const base = slot * d;
    let dot = 0;
    for (let j = 0; j < d; j++) dot += v[base + j]! * query[j]!;
    return dot * this.scales[slot]!;
  }
}
