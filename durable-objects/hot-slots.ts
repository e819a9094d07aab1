/**
 * The storage of the R2 index's in-memory half (`HotIndex` scores over it): one slot per entry in
 * parallel typed arrays. Per entry it holds a 1-bit code (the sign of each keyed dimension, dims/8
 * bytes), the vector's mean magnitude and scale, and, while they fit a memory budget, the int8
 * vector itself; and an inverted index of keyed 32-bit term ids with their counts, kept while its
 * postings fit their budget. Deleted entries are tombstoned and dropped by `compact`, which
 * renumbers slots. Several slots may share an id (the pieces of one chunk): removal and masks then
 * take them all.
 */

export interface HotEntry {
  id: number;
  language: number;
  scale: number;
  int8: Int8Array;
  termIds: Uint32Array;
  termCounts: Uint16Array;
  /** Its definition pieces' vectors, int8 with a scale each (`HotIndex` holds them apart). */
  pieces?: readonly { scale: number; int8: Int8Array }[];
}

export interface HotSlotsOptions {
  /** Memory for int8 vectors; past it, scores come from the 1-bit estimate alone. */
  int8BudgetBytes?: number;
  /** Postings kept for BM25 (4 bytes each); past it, the lexical channel is off. */
  maxPostings?: number;
}

const MAX_SLOTS = 1 << 24;

export class HotSlots {
  readonly codeBytes: number;
  readonly #int8Limit: number;
  readonly #maxPostings: number;

  // The slot arrays, read by the scoring in `HotIndex`; only this class writes them.
  /** Slots in use, tombstones included. */
  protected n = 0;
  protected live = 0;
  protected cap = 0;
  protected ids = new Uint32Array(0);
  protected alive = new Uint8Array(0);
  protected language = new Uint8Array(0);
  protected codes = new Uint8Array(0);
  protected meanAbs = new Float32Array(0);
  protected scales = new Float32Array(0);
  protected int8: Int8Array | null = new Int8Array(0);
  protected lengths = new Uint16Array(0);
  protected totalLength = 0;
  /** Per term, its postings: slot * 256 + the term's count in the entry (at most 255). */
  protected postings: Map<number, { buf: Uint32Array; len: number }> | null = new Map();
  #postingCount = 0;

  /** Slots ordered by id, for removal by id; rebuilt when an id arrives out of order. */
  #byId: Uint32Array | null = new Uint32Array(0);

  constructor(
    readonly dims: number,
    options: HotSlotsOptions = {},
  ) {
    if (dims % 32 !== 0) throw new Error("Dimensions must be a multiple of 32.");
    this.codeBytes = dims / 8;
    this.#int8Limit = Math.floor((options.int8BudgetBytes ?? 56 * 2 ** 20) / dims);
    this.#maxPostings = options.maxPostings ?? 6_000_000;
  }

  get size(): number {
    return this.live;
  }

  /** Whether vector scores are exact (int8 held for every entry). */
  get exact(): boolean {
    return this.int8 !== null;
  }

  get lexical(): boolean {
    return this.postings !== null;
  }

  /** Bytes held in typed arrays: the figure that has to fit the object's memory. */
  get bytes(): number {
    let postings = 0;
    if (this.postings) for (const p of this.postings.values()) postings += p.buf.byteLength + 48;
    return (
      this.ids.byteLength +
      this.alive.byteLength +
      this.language.byteLength +
      this.codes.byteLength +
      this.meanAbs.byteLength +
      this.scales.byteLength +
      (this.int8?.byteLength ?? 0) +
      this.lengths.byteLength +
      (this.#byId?.byteLength ?? 0) +
      postings
    );
  }

  add(entry: HotEntry): void {
    if (this.n >= MAX_SLOTS) this.compact();
    if (this.n >= this.cap) this.#grow();
    const slot = this.n++;
    const d = this.dims;
    this.ids[slot] = entry.id;
    this.alive[slot] = 1;
    this.language[slot] = entry.language;
    this.scales[slot] = entry.scale;
    let abs = 0;
    const codes = this.codes;
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
    this.meanAbs[slot] = (abs / d) * entry.scale;
    if (this.int8 && (slot + 1) * d > this.int8.length) this.int8 = null;
    if (this.int8) this.int8.set(entry.int8, slot * d);

    let length = 0;
    for (let t = 0; t < entry.termIds.length; t++) length += entry.termCounts[t]!;
    this.lengths[slot] = Math.min(0xffff, length);
    this.totalLength += Math.min(0xffff, length);
    if (this.postings) {
      for (let t = 0; t < entry.termIds.length; t++) {
        const term = entry.termIds[t]!;
        let list = this.postings.get(term);
        if (!list) this.postings.set(term, (list = { buf: new Uint32Array(2), len: 0 }));
        if (list.len === list.buf.length) {
          const bigger = new Uint32Array(Math.ceil(list.buf.length * 1.5));
          bigger.set(list.buf);
          list.buf = bigger;
        }
        list.buf[list.len++] = slot * 256 + Math.min(255, entry.termCounts[t]!);
      }
      this.#postingCount += entry.termIds.length;
      if (this.#postingCount > this.#maxPostings) this.postings = null;
    }

    if (this.#byId) {
      const last = slot > 0 ? this.ids[this.#byId[slot - 1]!]! : -Infinity;
      if (entry.id >= last) this.#byId[slot] = slot;
      else this.#byId = null;
    }
    this.live++;
  }

  /** Tombstones every live slot of an id; true when it held one. */
  remove(id: number): boolean {
    const slots = this.#slotsOf(id).filter((slot) => this.alive[slot]);
    for (const slot of slots) {
      this.alive[slot] = 0;
      this.live--;
      this.totalLength -= this.lengths[slot]!;
    }
    if (this.n - this.live > Math.max(1024, this.live / 3)) this.compact();
    return slots.length > 0;
  }

  /** A mask over slots holding exactly these ids (for filters computed elsewhere). */
  maskOf(ids: Iterable<number>): Uint8Array {
    const mask = new Uint8Array(this.n);
    for (const id of ids) for (const slot of this.#slotsOf(id)) mask[slot] = 1;
    return mask;
  }

  /** Drops tombstoned slots and renumbers the rest, postings included. */
  compact(): void {
    const keep: number[] = [];
    for (let slot = 0; slot < this.n; slot++) if (this.alive[slot]) keep.push(slot);
    const remap = new Int32Array(this.n).fill(-1);
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
    this.ids = pick(this.ids, (l) => new Uint32Array(l));
    this.language = pick(this.language, (l) => new Uint8Array(l));
    this.meanAbs = pick(this.meanAbs, (l) => new Float32Array(l));
    this.scales = pick(this.scales, (l) => new Float32Array(l));
    this.lengths = pick(this.lengths, (l) => new Uint16Array(l));
    const codes = new Uint8Array(Math.max(16, n) * nb);
    keep.forEach((slot, i) => codes.set(this.codes.subarray(slot * nb, (slot + 1) * nb), i * nb));
    this.codes = codes;
    if (this.int8) {
      const int8 = new Int8Array(Math.max(16, n) * d);
      keep.forEach((slot, i) => int8.set(this.int8!.subarray(slot * d, (slot + 1) * d), i * d));
      this.int8 = int8;
    }
    this.alive = new Uint8Array(Math.max(16, n)).fill(1, 0, n);
    if (this.postings) {
      this.#postingCount = 0;
      for (const [term, list] of this.postings) {
        let w = 0;
        for (let i = 0; i < list.len; i++) {
          const slot = remap[Math.floor(list.buf[i]! / 256)]!;
          if (slot >= 0) list.buf[w++] = slot * 256 + (list.buf[i]! & 255);
        }
        if (w === 0) this.postings.delete(term);
        else list.len = w;
        this.#postingCount += w;
      }
    }
    this.cap = Math.max(16, n);
    this.n = n;
    this.#byId = null;
  }

  /** Every slot holding `id`, tombstones included (a re-added entry leaves its old slots behind). */
  #slotsOf(id: number): number[] {
    if (!this.#byId) {
      const order = new Uint32Array(this.n).map((_, i) => i);
      const ids = this.ids;
      order.sort((a, b) => ids[a]! - ids[b]! || a - b);
      this.#byId = new Uint32Array(this.cap);
      this.#byId.set(order);
    }
    // The first position in id order whose id is not below `id`.
    let lo = 0;
    let hi = this.n;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.ids[this.#byId[mid]!]! < id) lo = mid + 1;
      else hi = mid;
    }
    const slots: number[] = [];
    for (let j = lo; j < this.n && this.ids[this.#byId[j]!] === id; j++) slots.push(this.#byId[j]!);
    return slots;
  }

  #grow(): void {
    // A quarter more each time: little slack in the arrays that dominate the object's memory.
    const cap = Math.max(16, Math.ceil(this.cap * 1.25));
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
    this.ids = grow(this.ids, cap, (l) => new Uint32Array(l));
    this.alive = grow(this.alive, cap, (l) => new Uint8Array(l));
    this.language = grow(this.language, cap, (l) => new Uint8Array(l));
    this.codes = grow(this.codes, cap * this.codeBytes, (l) => new Uint8Array(l));
    this.meanAbs = grow(this.meanAbs, cap, (l) => new Float32Array(l));
    this.scales = grow(this.scales, cap, (l) => new Float32Array(l));
    this.lengths = grow(this.lengths, cap, (l) => new Uint16Array(l));
    // The int8 copy never grows past its budget: once the slots outgrow it, it goes.
    if (this.int8)
      this.int8 = grow(this.int8, Math.min(cap, Math.max(16, this.#int8Limit)) * d, (l) => new Int8Array(l));
    if (this.#byId) this.#byId = grow(this.#byId, cap, (l) => new Uint32Array(l));
    this.cap = cap;
  }
}
