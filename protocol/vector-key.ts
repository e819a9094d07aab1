/**
 * The keyed, distance-preserving transform applied to every stored vector and every query: a
 * pseudo-random rotation derived from a 32-byte key that the client holds and sends per request:
 * three rounds of random signs and a Walsh-Hadamard transform, then a random permutation (the
 * structured random rotation of fast Johnson-Lindenstrauss transforms), O(d log d) per vector.
 * Orthogonal maps preserve inner products and norms exactly, so search with the key ranks exactly
 * as search on the raw vectors would; without the key, stored vectors live in a rotated space that
 * queries embedded from known code do not line up with. SECURITY.md states the limits.
 *
 * Synchronous (@noble/hashes) so that the edge can use it inside a storage transaction, and
 * shared with the client, which can verify it.
 */
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";

/** A deterministic stream of 32-bit words from a seed: SHA-256 in counter mode. */
function wordStream(seed: Uint8Array): () => number {
  let counter = 0;
  let block = new Uint32Array(0);
  let at = 0;
  return () => {
    if (at >= block.length) {
      const input = new Uint8Array(seed.length + 4);
      input.set(seed);
      new DataView(input.buffer).setUint32(seed.length, counter++);
      const digest = sha256(input);
      block = new Uint32Array(digest.buffer, digest.byteOffset, 8);
      at = 0;
    }
    return block[at++]!;
  };
}

/** In-place fast Walsh-Hadamard transform, scaled to be orthogonal. */
function hadamard(x: Float64Array): void {
  const n = x.length;
  for (let h = 1; h < n; h *= 2) {
    for (let i = 0; i < n; i += h * 2) {
      for (let j = i; j < i + h; j++) {
        const a = x[j]!;
        const b = x[j + h]!;
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const scale = 1 / Math.sqrt(n);
  for (let i = 0; i < n; i++) x[i]! *= scale;
}

const ROUNDS = 3;

/** Random signs for each round and a random permutation: the whole key schedule. */
interface Schedule {
  signs: Float64Array;
  permutation: Uint32Array;
}

function schedule(dims: number, seed: Uint8Array): Schedule {
  const next = wordStream(seed);
  const signs = new Float64Array(ROUNDS * dims);
  for (let i = 0; i < signs.length; i++) signs[i] = next() & 1 ? 1 : -1;
  const permutation = new Uint32Array(dims).map((_, i) => i);
  for (let i = dims - 1; i > 0; i--) {
    const j = next() % (i + 1);
    [permutation[i], permutation[j]] = [permutation[j]!, permutation[i]!];
  }
  return { signs, permutation };
}

const cache = new Map<string, Schedule>();
const CACHE_LIMIT = 16;

export class VectorKey {
  readonly #schedule: Schedule;

  /** `key` is the client's 32-byte vector key; `dims` the embedder's dimensions. */
  constructor(
    key: Uint8Array,
    readonly dims: number,
  ) {
    if (key.length !== 32) throw new Error("A vector key is 32 bytes.");
    if (dims < 2 || (dims & (dims - 1)) !== 0) throw new Error("Vector dimensions must be a power of two.");
    const seed = hkdf(
      sha256,
      key,
      new Uint8Array(0),
      new TextEncoder().encode(`sextant vector rotation v1 ${dims}`),
      32,
    );
    const id = `${dims}:${Array.from(seed.subarray(0, 16)).join(",")}`;
    let entry = cache.get(id);
    if (!entry) {
      entry = schedule(dims, seed);
      cache.set(id, entry);
      if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value!);
    }
    this.#schedule = entry;
  }

  /** The rotated vector. Inner products and norms are preserved up to rounding. */
  apply(vector: ArrayLike<number>): Float32Array {
    const d = this.dims;
    if (vector.length !== d) throw new Error(`Expected a vector of ${d} dimensions, got ${vector.length}.`);
    const { signs, permutation } = this.#schedule;
    const x = Float64Array.from(vector);
    for (let r = 0; r < ROUNDS; r++) {
      for (let i = 0; i < d; i++) x[i]! *= signs[r * d + i]!;
      hadamard(x);
    }
    const out = new Float32Array(d);
    for (let i = 0; i < d; i++) out[i] = x[permutation[i]!]!;
    return out;
  }
}
