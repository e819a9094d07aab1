/**
 * The files of a workspace in columns: paths, (size, mtime, inode) in one Float64Array and keyed
 * content hashes in one buffer. A workspace has one row per file, and at 100,000 files a map of
 * small objects costs more to build, keep and collect than the whole warm scan may take.
 */
export interface StatEntry {
  size: number;
  mtimeMs: number;
  ino: number;
  hash: string;
}

const HASH_BYTES = 32;

export class FileTable {
  #lookup: Map<string, number> | undefined;

  constructor(
    readonly paths: string[],
    /** size, mtimeMs, ino per row. */
    readonly meta: Float64Array,
    readonly hashes: Buffer,
  ) {}

  /** Built on first lookup: a warm scan that finds every row in order never needs it. */
  get #index(): Map<string, number> {
    if (!this.#lookup) {
      this.#lookup = new Map();
      for (let i = 0; i < this.paths.length; i++) this.#lookup.set(this.paths[i]!, i);
    }
    return this.#lookup;
  }

  /** Same paths in the same order with the same hashes. */
  sameFiles(other: FileTable): boolean {
    if (other.paths.length !== this.paths.length || !other.hashes.equals(this.hashes)) return false;
    for (let i = 0; i < this.paths.length; i++) if (this.paths[i] !== other.paths[i]) return false;
    return true;
  }

  static empty(): FileTable {
    return new FileTable([], new Float64Array(0), Buffer.alloc(0));
  }

  get size(): number {
    return this.paths.length;
  }

  row(path: string): number | undefined {
    return this.#index.get(path);
  }

  has(path: string): boolean {
    return this.#index.has(path);
  }

  keys(): IterableIterator<string> {
    return this.paths.values();
  }

  hashAt(row: number): string {
    return this.hashes.toString("hex", row * HASH_BYTES, (row + 1) * HASH_BYTES);
  }

  hash(path: string): string | undefined {
    const row = this.#index.get(path);
    return row === undefined ? undefined : this.hashAt(row);
  }

  /** Whether `path` has here the hash that `other` has at `row`, compared as bytes. */
  sameHash(path: string, other: FileTable, row: number): boolean {
    const mine = this.#index.get(path);
    return (
      mine !== undefined &&
      this.hashes.compare(
        other.hashes,
        row * HASH_BYTES,
        (row + 1) * HASH_BYTES,
        mine * HASH_BYTES,
        (mine + 1) * HASH_BYTES,
      ) === 0
    );
  }

  get(path: string): StatEntry | undefined {
    const row = this.#index.get(path);
    if (row === undefined) return undefined;
    return {
      size: this.meta[row * 3]!,
      mtimeMs: this.meta[row * 3 + 1]!,
      ino: this.meta[row * 3 + 2]!,
      hash: this.hashAt(row),
    };
  }

  *[Symbol.iterator](): IterableIterator<[string, StatEntry]> {
    for (const path of this.paths) yield [path, this.get(path)!];
  }
}

export class FileTableBuilder {
  readonly #paths: string[] = [];
  #meta: Float64Array;
  #hashes: Buffer;

  constructor(capacity = 1024) {
    this.#meta = new Float64Array(capacity * 3);
    this.#hashes = Buffer.alloc(capacity * HASH_BYTES);
  }

  #grow(): void {
    const meta = new Float64Array(this.#meta.length * 2 || 3072);
    meta.set(this.#meta);
    this.#meta = meta;
    const hashes = Buffer.alloc(this.#hashes.length * 2 || 1024 * HASH_BYTES);
    this.#hashes.copy(hashes);
    this.#hashes = hashes;
  }

  push(path: string, size: number, mtimeMs: number, ino: number, hash: Buffer | string): void {
    const row = this.#paths.length;
    if ((row + 1) * 3 > this.#meta.length) this.#grow();
    this.#paths.push(path);
    this.#meta[row * 3] = size;
    this.#meta[row * 3 + 1] = mtimeMs;
    this.#meta[row * 3 + 2] = ino;
    if (typeof hash === "string") this.#hashes.write(hash, row * HASH_BYTES, HASH_BYTES, "hex");
    else hash.copy(this.#hashes, row * HASH_BYTES, 0, HASH_BYTES);
  }

  copy(from: FileTable, row: number): void {
    const at = this.#paths.length;
    if ((at + 1) * 3 > this.#meta.length) this.#grow();
    this.#paths.push(from.paths[row]!);
    this.#meta[at * 3] = from.meta[row * 3]!;
    this.#meta[at * 3 + 1] = from.meta[row * 3 + 1]!;
    this.#meta[at * 3 + 2] = from.meta[row * 3 + 2]!;
    from.hashes.copy(this.#hashes, at * HASH_BYTES, row * HASH_BYTES, (row + 1) * HASH_BYTES);
  }

  build(): FileTable {
    const n = this.#paths.length;
    return new FileTable(
      this.#paths,
      this.#meta.slice(0, n * 3),
      Buffer.from(this.#hashes.subarray(0, n * HASH_BYTES)),
    );
  }
}
