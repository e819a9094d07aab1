/** A pseudo-random unit vector of `dims` per seed (mulberry32, then normalised): the same in Node and workerd. */
export function seededUnit(seed: number, dims: number): Float32Array {
  let a = seed * 2654435761;
  const next = () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32 - 0.5;
  };
  const v = new Float32Array(dims).map(next);
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
}
