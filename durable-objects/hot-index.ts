/**
 * The in-memory half of the R2 index: what a Durable Object keeps hot to answer queries without
 * touching R2. Per entry it holds a 1-bit code (the sign of each keyed dimension, dims/8 bytes),
 * the vector's mean magnitude, and, while they fit a memory budget, the int8 vector itself.
 *
 * Vector search scans the 1-bit codes with an asymmetric estimate (the float query against the
 * stored signs, through a per-query lookup table of 256 partial sums per byte), keeps the best few
 * hundred, and re-scores those exactly from the int8 vectors when they are held. Small indexes are
 * scanned exactly. At 512 dimensions a million entries take 64 MB of codes, so the largest
 * workspaces stay inside a Durable Object's 128 MB; below the int8 budget results are exact.
 *
 * The lexical channel is an inverted index over keyed 32-bit term ids, scored with BM25 (k1 = 1.2,
 * b = 0.75), kept while its postings fit their budget; very common terms are skipped like stop
 * words (see `commonAt`). Deleted entries are tombstoned and dropped
 * by `compact`, which renumbers slots.
 */

export interface HotEntry {
  id: number;
  language: number;
  scale: number;
  int8: Int8Array;
  termIds: Uint32Array;
  termCounts: Uint16Array;
}

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

export interface HotIndexOptions {
  /** Memory for int8 vectors; past it, scores come from the 1-bit estimate alone. */
  int8BudgetBytes?: number;
  /** Postings kept for BM25 (4 bytes each); past it, the lexical channel is off. */
  maxPostings?: number;
  /** At most this many live entries are scored exactly rather than through the 1-bit codes. */
  exactLimit?: number;
}

const K1 = 1.2;
/**
 * A query term is skipped, as stop words are, when it is in more than a third of all chunks (idf
 * under 0.7), or in more than a tenth and over 5,000 of them (idf under 2.4, and a long list to
 * walk): this keeps BM25 fast in large workspaces and exact in small ones.
 */
const commonAt = (live: number) => Math.min(live / 3, Math.max(live / 10, 5000));
const B = 0.75;
const MAX_SLOTS = 1 << 24;

/**
 * Keeps the `size` best items seen: a binary min-heap on parallel typed arrays. Ties in score go
 * to the smaller key (an entry's id), so results never depend on where an entry happens to sit.
 */
export class TopK {
  readonly scores: Float64Array;
  readonly items: Int32Array;
  length = 0;

  constructor(
    readonly size: number,
    private readonly keys: Uint32Array,
  ) {
    this.scores = new Float64Array(size);
    this.items = new Int32Array(size);
  }

  /** Whether (score a, item a) ranks below (score b, item b). */
  #below(sa: number, ia: number, sb: number, ib: number): boolean {
    return sa < sb || (sa === sb && this.keys[ia]! > this.keys[ib]!);
  }

  push(item: number, score: number): void {
    const { scores, items } = this;
    if (this.length < this.size) {
      let i = this.length++;
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (!this.#below(score, item, scores[parent]!, items[parent]!)) break;
        scores[i] = scores[parent]!;
        items[i] = items[parent]!;
        i = parent;
      }
      scores[i] = score;
      items[i] = item;
      return;
    }
    if (score < scores[0]! || !this.#below(scores[0]!, items[0]!, score, item)) return;
    let i = 0;
    const n = this.length;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && this.#below(scores[right]!, items[right]!, scores[left]!, items[left]!) ? right : left;
      if (!this.#below(scores[child]!, items[child]!, score, item)) break;
      scores[i] = scores[child]!;
      items[i] = items[child]!;
      i = child;
    }
    scores[i] = score;
    items[i] = item;
  }

  /** Items and scores, best first. */
  sorted(): { item: number; score: number }[] {
    const out: { item: number; score: number }[] = [];
    for (let i = 0; i < this.length; i++) out.push({ item: this.items[i]!, score: this.scores[i]! });
    return out.sort((a, b) => b.score - a.score || this.keys[a.item]! - this.keys[b.item]!);
  }
}

export class HotIndex {
  readonly codeBytes: number;
  readonly #int8Limit: number;
  readonly #maxPostings: number;
  readonly #exactLimit: number;

  #n = 0;
  #live = 0;
  #cap = 0;
  #ids = new Uint32Array(0);
  #alive = new Uint8Array(0);
  #language = new Uint8Array(0);
  #codes = new Uint8Array(0);
  #meanAbs = new Float32Array(0);
  #scales = new Float32Array(0);
  #int8: Int8Array | null = new Int8Array(0);
  #lengths = new Uint16Array(0);
  #totalLength = 0;

  #postings: Map<number, { buf: Uint32Array; len: number }> | null = new Map();
  #postingCount = 0;

  /** Per-slot score accumulator for BM25, left zeroed after each query, and the slots it touched. */
  #scratch: Float32Array | null = null;
  #touched: Int32Array | null = null;
  #lut: Float32Array | null = null;

  /** Slots ordered by id, for removal by id; rebuilt when an id arrives out of order. */
  #byId: Uint32Array | null = new Uint32Array(0);

  constructor(
    readonly dims: number,
    options: HotIndexOptions = {},
  ) {
    if (dims % 32 !== 0) throw new Error("Dimensions must be a multiple of 32.");
    this.codeBytes = dims / 8;
    this.#int8Limit = Math.floor((options.int8BudgetBytes ?? 56 * 2 ** 20) / dims);
    this.#maxPostings = options.maxPostings ?? 6_000_000;
    this.#exactLimit = options.exactLimit ?? 4096;
  }

  get size(): number {
    return this.#live;
  }

  /** Whether vector scores are exact (int8 held for every entry). */
  get exact(): boolean {
    return this.#int8 !== null;
  }

  get lexical(): boolean {
    return this.#postings !== null;
  }

  /** Bytes held in typed arrays: the figure that has to fit the object's memory. */
  get bytes(): number {
    let postings = 0;
    if (this.#postings) for (const p of this.#postings.values()) postings += p.buf.byteLength + 48;
    return (
      this.#ids.byteLength +
      this.#alive.byteLength +
      this.#language.byteLength +
      this.#codes.byteLength +
      this.#meanAbs.byteLength +
      this.#scales.byteLength +
      (this.#int8?.byteLength ?? 0) +
      this.#lengths.byteLength +
      (this.#byId?.byteLength ?? 0) +
      postings
    );
  }

  add(entry: HotEntry): void {
    if (this.#n >= MAX_SLOTS) this.compact();
    if (this.#n >= this.#cap) this.#grow();
    const slot = this.#n++;
    const d = this.dims;
    this.#ids[slot] = entry.id;
    this.#alive[slot] = 1;
    this.#language[slot] = entry.language;
    this.#scales[slot] = entry.scale;
    let abs = 0;
    const codes = this.#codes;
    const base = slot * this.codeBytes;
    for (let b = 0; b < this.codeBytes; b++) {
      let byte = 0;
      for (let i = 0; i < 8; i++) {
        const x = entry.int8[b * 8 + i]!;
        if (x >= 0) byte |= 1 << i;
        abs += x < 0 ? -x : x;
      }
      codes[base + b] = byte;
    }
    this.#meanAbs[slot] = (abs / d) * entry.scale;
    if (this.#int8 && (slot + 1) * d > this.#int8.length) this.#int8 = null;
    if (this.#int8) this.#int8.set(entry.int8, slot * d);

    let length = 0;
    for (let t = 0; t < entry.termIds.length; t++) length += entry.termCounts[t]!;
    this.#lengths[slot] = Math.min(0xffff, length);
    this.#totalLength += Math.min(0xffff, length);
    if (this.#postings) {
      for (let t = 0; t < entry.termIds.length; t++) {
        const term = entry.termIds[t]!;
        let list = this.#postings.get(term);
        if (!list) this.#postings.set(term, (list = { buf: new Uint32Array(2), len: 0 }));
        if (list.len === list.buf.length) {
          const bigger = new Uint32Array(Math.ceil(list.buf.length * 1.5));
          bigger.set(list.buf);
          list.buf = bigger;
        }
        list.buf[list.len++] = slot * 256 + Math.min(255, entry.termCounts[t]!);
      }
      this.#postingCount += entry.termIds.length;
      if (this.#postingCount > this.#maxPostings) this.#postings = null;
    }

    if (this.#byId) {
      const last = slot > 0 ? this.#ids[this.#byId[slot - 1]!]! : -Infinity;
      if (entry.id > last) this.#byId[slot] = slot;
      else this.#byId = null;
    }
    this.#live++;
  }

  /** Tombstones an entry; true when it was held. */
  remove(id: number): boolean {
    const slot = this.#slotOf(id);
    if (slot < 0 || !this.#alive[slot]) return false;
    this.#alive[slot] = 0;
    this.#live--;
    this.#totalLength -= this.#lengths[slot]!;
    if (this.#n - this.#live > Math.max(1024, this.#live / 3)) this.compact();
    return true;
  }

  /** A mask over slots holding exactly these ids (for filters computed elsewhere). */
  maskOf(ids: Iterable<number>): Uint8Array {
    const mask = new Uint8Array(this.#n);
    for (const id of ids) {
      const slot = this.#slotOf(id);
      if (slot >= 0) mask[slot] = 1;
    }
    return mask;
  }

  queryVector(query: Float32Array, k: number, filter: HotFilter = {}): HotHit[] {
    if (query.length !== this.dims) throw new Error(`Expected ${this.dims} dimensions, got ${query.length}.`);
    const admit = this.#admit(filter);
    if (this.#int8 && this.#live <= this.#exactLimit) return this.#exactScan(query, k, admit);

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
    const codes = this.#codes;
    const meanAbs = this.#meanAbs;
    const alive = this.#alive;
    const filtered = filter.mask !== undefined || filter.language !== undefined;
    const pool = new TopK(this.#int8 ? Math.max(k * 16, 256) : k, this.#ids);
    let floor = -Infinity;
    // Four code bytes per read: one typed-array load instead of four.
    const words = new Uint32Array(codes.buffer, codes.byteOffset, codes.length >> 2);
    const nw = nb >> 2;
    for (let slot = 0; slot < this.#n; slot++) {
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
    if (!this.#int8) return pool.sorted().map(({ item, score }) => ({ id: this.#ids[item]!, score }));
    const exact = new TopK(k, this.#ids);
    for (let i = 0; i < pool.length; i++) {
      const slot = pool.items[i]!;
      exact.push(slot, this.#dot(query, slot));
    }
    return exact.sorted().map(({ item, score }) => ({ id: this.#ids[item]!, score }));
  }

  /** BM25 over keyed term ids; null when the lexical channel is off for this index. */
  queryTerms(terms: readonly number[], k: number, filter: HotFilter = {}): HotHit[] | null {
    if (!this.#postings) return null;
    if (this.#live === 0) return [];
    const admit = this.#admit(filter);
    const avg = this.#totalLength / this.#live || 1;
    if (!this.#scratch || this.#scratch.length < this.#n) this.#scratch = new Float32Array(this.#cap);
    const scores = this.#scratch;
    if (!this.#touched || this.#touched.length < this.#n) this.#touched = new Int32Array(this.#cap);
    const touched = this.#touched;
    let touchedCount = 0;
    const clean = this.#n === this.#live;
    const common = commonAt(this.#live);
    for (const term of new Set(terms)) {
      const list: { buf: Uint32Array; len: number } | undefined = this.#postings.get(term);
      if (!list) continue;
      let df = list.len;
      if (!clean) {
        df = 0;
        for (let i = 0; i < list.len; i++) if (this.#alive[Math.floor(list.buf[i]! / 256)]) df++;
      }
      // A very common term says little and costs the most: skipped, unless it is all the query has.
      if (df === 0 || (df > common && terms.length > 1)) continue;
      const idf = Math.log(1 + (this.#live - df + 0.5) / (df + 0.5));
      const lengths = this.#lengths;
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
    const top = new TopK(k, this.#ids);
    for (let t = 0; t < touchedCount; t++) {
      const slot = touched[t]!;
      top.push(slot, scores[slot]!);
      scores[slot] = 0;
    }
    return top.sorted().map(({ item, score }) => ({ id: this.#ids[item]!, score }));
  }

  /** Drops tombstoned slots and renumbers the rest, postings included. */
  compact(): void {
    const keep: number[] = [];
    for (let slot = 0; slot < this.#n; slot++) if (this.#alive[slot]) keep.push(slot);
    const remap = new Int32Array(this.#n).fill(-1);
    keep.forEach((slot, i) => (remap[slot] = i));
    const d = this.dims;
    const nb = this.codeBytes;
    const n = keep.length;
    const pick = <T extends Uint16Array | Uint8Array | Float32Array | Uint32Array>(
      src: T,
      make: (len: number) => T,
    ) => {
      const out = make(Math.max(16, n));
      keep.forEach((slot, i) => (out[i] = src[slot]!));
      return out;
    };
    this.#ids = pick(this.#ids, (l) => new Uint32Array(l));
    this.#language = pick(this.#language, (l) => new Uint8Array(l));
    this.#meanAbs = pick(this.#meanAbs, (l) => new Float32Array(l));
    this.#scales = pick(this.#scales, (l) => new Float32Array(l));
    this.#lengths = pick(this.#lengths, (l) => new Uint16Array(l));
    const codes = new Uint8Array(Math.max(16, n) * nb);
    keep.forEach((slot, i) => codes.set(this.#codes.subarray(slot * nb, (slot + 1) * nb), i * nb));
    this.#codes = codes;
    if (this.#int8) {
      const int8 = new Int8Array(Math.max(16, n) * d);
      keep.forEach((slot, i) => int8.set(this.#int8!.subarray(slot * d, (slot + 1) * d), i * d));
      this.#int8 = int8;
    }
    this.#alive = new Uint8Array(Math.max(16, n)).fill(1, 0, n);
    if (this.#postings) {
      this.#postingCount = 0;
      for (const [term, list] of this.#postings) {
        let w = 0;
        for (let i = 0; i < list.len; i++) {
          const slot = remap[Math.floor(list.buf[i]! / 256)]!;
          if (slot >= 0) list.buf[w++] = slot * 256 + (list.buf[i]! & 255);
        }
        if (w === 0) this.#postings.delete(term);
        else list.len = w;
        this.#postingCount += w;
      }
    }
    this.#cap = Math.max(16, n);
    this.#n = n;
    this.#byId = null;
  }

  #admit(filter: HotFilter): (slot: number) => boolean {
    const alive = this.#alive;
    const { mask, language } = filter;
    const lang = this.#language;
    if (mask && language !== undefined) return (s) => alive[s] === 1 && mask[s] === 1 && lang[s] === language;
    if (mask) return (s) => alive[s] === 1 && mask[s] === 1;
    if (language !== undefined) return (s) => alive[s] === 1 && lang[s] === language;
    return (s) => alive[s] === 1;
  }

  #exactScan(query: Float32Array, k: number, admit: (slot: number) => boolean): HotHit[] {
    const top = new TopK(k, this.#ids);
    for (let slot = 0; slot < this.#n; slot++) if (admit(slot)) top.push(slot, this.#dot(query, slot));
    return top.sorted().map(({ item, score }) => ({ id: this.#ids[item]!, score }));
  }

  #dot(query: Float32Array, slot: number): number {
    const v = this.#int8!;
    const d = this.dims;
    const base = slot * d;
    let dot = 0;
    for (let j = 0; j < d; j++) dot += v[base + j]! * query[j]!;
    return dot * this.#scales[slot]!;
  }

  #slotOf(id: number): number {
    if (!this.#byId) {
      const order = new Uint32Array(this.#n).map((_, i) => i);
      const ids = this.#ids;
      order.sort((a, b) => ids[a]! - ids[b]!);
      this.#byId = new Uint32Array(this.#cap);
      this.#byId.set(order);
    }
    let lo = 0;
    let hi = this.#n - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const at = this.#ids[this.#byId[mid]!]!;
      if (at === id) {
        // Equal ids can only be a re-added entry after a tombstone; prefer the live one.
        for (let j = mid; j >= 0 && this.#ids[this.#byId[j]!] === id; j--)
          if (this.#alive[this.#byId[j]!]) return this.#byId[j]!;
        for (let j = mid + 1; j < this.#n && this.#ids[this.#byId[j]!] === id; j++)
          if (this.#alive[this.#byId[j]!]) return this.#byId[j]!;
        return this.#byId[mid]!;
      }
      if (at < id) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }

  #grow(): void {
    // A quarter more each time: little slack in the arrays that dominate the object's memory.
    const cap = Math.max(16, Math.ceil(this.#cap * 1.25));
    const d = this.dims;
    const grow = <T extends Uint16Array | Uint8Array | Float32Array | Uint32Array | Int8Array>(
      src: T,
      len: number,
      make: (l: number) => T,
    ) => {
      const out = make(len);
      out.set(src as never);
      return out;
    };
    this.#ids = grow(this.#ids, cap, (l) => new Uint32Array(l));
    this.#alive = grow(this.#alive, cap, (l) => new Uint8Array(l));
    this.#language = grow(this.#language, cap, (l) => new Uint8Array(l));
    this.#codes = grow(this.#codes, cap * this.codeBytes, (l) => new Uint8Array(l));
    this.#meanAbs = grow(this.#meanAbs, cap, (l) => new Float32Array(l));
    this.#scales = grow(this.#scales, cap, (l) => new Float32Array(l));
    this.#lengths = grow(this.#lengths, cap, (l) => new Uint16Array(l));
    // The int8 copy never grows past its budget: once the slots outgrow it, it goes.
    if (this.#int8)
      this.#int8 = grow(this.#int8, Math.min(cap, Math.max(16, this.#int8Limit)) * d, (l) => new Int8Array(l));
    if (this.#byId) this.#byId = grow(this.#byId, cap, (l) => new Uint32Array(l));
    this.#cap = cap;
  }
}
