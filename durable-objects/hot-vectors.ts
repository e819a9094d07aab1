/**
 * The vector scoring of the R2 index's in-memory half, over `HotSlots`: the best entries by inner
 * product with a query. It scans the 1-bit codes with an asymmetric estimate (the float query
 * against the stored signs, through a per-query lookup table of 256 partial sums per byte), keeps
 * the best few hundred, and re-scores those exactly from the int8 vectors when they are held. Small
 * indexes are scanned exactly. At 512 dimensions a million entries take 64 MB of codes, so the
 * largest workspaces stay inside a Durable Object's 128 MB; below the int8 budget results are exact.
 */
import { HotSlots, type HotSlotsOptions } from "./hot-slots.js";
import { TopK } from "./top-k.js";

export interface HotFilter {
  /** Only these slots (a mask over slots), when set: `filterOf` makes it, with `pieceMask`. */
  mask?: Uint8Array;
  /** The same entries' slots among the definition pieces. */
  pieceMask?: Uint8Array;
  /** Only this language code, when set. */
  language?: number;
}

export interface HotHit {
  id: number;
  score: number;
}

export interface HotVectorsOptions extends HotSlotsOptions {
  /** At most this many live entries are scored exactly rather than through the 1-bit codes. */
  exactLimit?: number;
}

export class HotVectors extends HotSlots {
  readonly #exactLimit: number;
  #lut: Float32Array | null = null;

  constructor(dims: number, options: HotVectorsOptions = {}) {
    super(dims, options);
    this.#exactLimit = options.exactLimit ?? 4096;
  }

  /**
   * The best `k` slots' ids by their own vectors: exact up to `exactLimit` live slots, else the
   * 1-bit scan's best `candidates` (default 16 per result, at least 256) re-scored from int8.
   */
  nearest(query: Float32Array, k: number, filter: HotFilter, candidates = Math.max(k * 16, 256)): HotHit[] {
    if (query.length !== this.dims) throw new Error(`Expected ${this.dims} dimensions, got ${query.length}.`);
    const admit = this.admit(filter);
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
    const pool = new TopK(this.int8 ? Math.max(candidates, k) : k, this.ids);
    let floor = -Infinity;
    // Four code bytes per read: one typed-array load instead of four.
    const words = new Uint32Array(codes.buffer, codes.byteOffset, codes.length >> 2);
    const nw = nb >> 2;
    // 128 dimensions (the built-in model's, and its pieces'): four words, unrolled, so the loop's own
    // bookkeeping does not cost as much as the lookups it steps through.
    const four = nw === 4;
    for (let slot = 0; slot < this.n; slot++) {
      if (filtered ? !admit(slot) : alive[slot] !== 1) continue;
      let s0 = 0;
      let s1 = 0;
      if (four) {
        const at = slot << 2;
        const a = words[at]!;
        const b = words[at + 1]!;
        const c = words[at + 2]!;
        const d = words[at + 3]!;
        s0 =
          lut[a & 255]! +
          lut[256 | ((a >>> 8) & 255)]! +
          lut[1024 | (b & 255)]! +
          lut[1280 | ((b >>> 8) & 255)]! +
          lut[2048 | (c & 255)]! +
          lut[2304 | ((c >>> 8) & 255)]! +
          lut[3072 | (d & 255)]! +
          lut[3328 | ((d >>> 8) & 255)]!;
        s1 =
          lut[512 | ((a >>> 16) & 255)]! +
          lut[768 | (a >>> 24)]! +
          lut[1536 | ((b >>> 16) & 255)]! +
          lut[1792 | (b >>> 24)]! +
          lut[2560 | ((c >>> 16) & 255)]! +
          lut[2816 | (c >>> 24)]! +
          lut[3584 | ((d >>> 16) & 255)]! +
          lut[3840 | (d >>> 24)]!;
      } else
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

  /** Whether a slot passes the filter: alive, in the mask and of the language, where they are set. */
  protected admit(filter: HotFilter): (slot: number) => boolean {
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
