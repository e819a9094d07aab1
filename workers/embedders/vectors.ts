/** The vector lengths the Workspace object accepts: powers of two in this range. */
export const MIN_INDEX_DIMS = 8;
export const MAX_INDEX_DIMS = 4096;

/** The power of two a model's `native` dimensions are padded to (1536 → 2048, 768 → 1024). */
export function indexDims(native: number): number {
  let dims = MIN_INDEX_DIMS;
  while (dims < native) dims *= 2;
  return dims;
}

/**
 * `values` scaled to unit length and zero-padded to `dims`. Padding with zeros preserves every
 * inner product and norm (the added coordinates are zero in every vector), so rankings are those
 * of the model's own vectors; the keyed rotation then spreads each vector over all `dims`
 * coordinates. Normalising makes the index's inner product a cosine whatever the service returns
 * (OpenAI's vectors are unit length, a vLLM model's need not be). A zero vector stays zero.
 * Returns null when a value is not a finite number.
 */
export function normalisedAndPadded(values: ArrayLike<number>, dims: number): Float32Array | null {
  let norm = 0;
  for (let i = 0; i < values.length; i++) {
    const x = values[i]!;
    if (typeof x !== "number" || !Number.isFinite(x)) return null;
    norm += x * x;
  }
  const out = new Float32Array(dims);
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let i = 0; i < values.length; i++) out[i] = values[i]! * scale;
  return out;
}
