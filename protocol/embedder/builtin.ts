import { Tokenizer } from "./tokens.js";

/**
 * The built-in embedder: no network, no weights. Code-aware tokens are hashed into a fixed number
 * of dimensions (the hashing trick, with a sign bit so collisions cancel rather than pile up),
 * weighted by 1 + log(tf), and L2-normalised, so the dot product of two vectors is a cosine over
 * shared words and names.
 */
export const BUILTIN_DIMS = 512;
export const BUILTIN_MODEL = "sextant-lexical-v1";

/** FNV-1a, 32 bits. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function embedBuiltin(text: string, dims = BUILTIN_DIMS, tokenizer = new Tokenizer()): Float32Array {
  const counts = new Map<string, number>();
  for (const { term, weight } of tokenizer.tokenize(text)) counts.set(term, (counts.get(term) ?? 0) + weight);
  const vector = new Float32Array(dims);
  for (const [term, count] of counts) {
    const h = fnv1a(term);
    vector[h % dims]! += (h & 0x80000000 ? -1 : 1) * (1 + Math.log(count));
  }
  let norm = 0;
  for (const x of vector) norm += x * x;
  norm = Math.sqrt(norm);
  if (norm > 0) for (let i = 0; i < dims; i++) vector[i]! /= norm;
  return vector;
}
