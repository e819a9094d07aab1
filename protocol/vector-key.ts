/**
 * The keyed, distance-preserving transform applied to every stored vector and every query: a
 * random orthogonal matrix derived from a 32-byte key that the client holds and sends per request.
 * Orthogonal maps preserve inner products and norms exactly, so search with the key ranks exactly
 * as search on the raw vectors would; without the key, stored vectors live in a rotated space that
 * queries embedded from known code do not line up with. SECURITY.md states the limits.
 *
 * Synchronous (@noble/hashes) so that the edge can use it inside a storage transaction, and
 * shared with the client, which can verify it.
 */
import { hkdf } from "@noble/hashes/hkdf.js";
import { sha256 } from "@noble/hashes/sha2.js";

/** Deterministic standard normal samples from a key: SHA-256 in counter mode, Box-Muller. */
function gaussianStream(seed: Uint8Array): () => number {
  let counter = 0;
  let block = new Uint32Array(0);
  let at = 0;
  const nextUint = (): number => {
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
  let spare: number | undefined;
  return () => {
    if (spare !== undefined) {
      const s = spare;
      spare = undefined;
      return s;
    }
    const u1 = (nextUint() + 1) / 4294967297;
    const u2 = nextUint() / 4294967296;
    const r = Math.sqrt(-2 * Math.log(u1));
    spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  };
}

/** A Haar-random orthogonal matrix, row-major: Gram-Schmidt (twice, for stability) on Gaussian rows. */
function orthogonal(dims: number, seed: Uint8Array): Float64Array {
  const next = gaussianStream(seed);
  const m = new Float64Array(dims * dims);
  for (let i = 0; i < m.length; i++) m[i] = next();
  for (let i = 0; i < dims; i++) {
    const row = m.subarray(i * dims, (i + 1) * dims);
    for (let pass = 0; pass < 2; pass++) {
      for (let j = 0; j < i; j++) {
        const other = m.subarray(j * dims, (j + 1) * dims);
        let dot = 0;
        for (let k = 0; k < dims; k++) dot += row[k]! * other[k]!;
        for (let k = 0; k < dims; k++) row[k]! -= dot * other[k]!;
      }
    }
    let norm = 0;
    for (let k = 0; k < dims; k++) norm += row[k]! * row[k]!;
    norm = Math.sqrt(norm);
    for (let k = 0; k < dims; k++) row[k]! /= norm;
  }
  return m;
}

const cache = new Map<string, Float64Array>();
const CACHE_LIMIT = 16;

export class VectorKey {
  readonly #matrix: Float64Array;

  /** `key` is the client's 32-byte vector key; `dims` the embedder's dimensions. */
  constructor(
    key: Uint8Array,
    readonly dims: number,
  ) {
    if (key.length !== 32) throw new Error("A vector key is 32 bytes.");
    const seed = hkdf(
      sha256,
      key,
      new Uint8Array(0),
      new TextEncoder().encode(`sextant vector rotation v1 ${dims}`),
      32,
    );
    const id = `${dims}:${Array.from(seed.subarray(0, 16)).join(",")}`;
    let matrix = cache.get(id);
    if (!matrix) {
      matrix = orthogonal(dims, seed);
      cache.set(id, matrix);
      if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value!);
    }
    this.#matrix = matrix;
  }

  /** The rotated vector. Inner products and norms are preserved up to rounding. */
  apply(vector: ArrayLike<number>): Float32Array {
    const d = this.dims;
    if (vector.length !== d) throw new Error(`Expected a vector of ${d} dimensions, got ${vector.length}.`);
    const out = new Float32Array(d);
    const m = this.#matrix;
    for (let i = 0; i < d; i++) {
      let sum = 0;
      const row = i * d;
      for (let k = 0; k < d; k++) sum += m[row + k]! * vector[k]!;
      out[i] = sum;
    }
    return out;
  }
}
