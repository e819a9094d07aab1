import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { VectorKey } from "../../protocol/vector-key.js";

const DIMS = 64;
const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
};
const vector = fc.array(fc.float({ min: -1, max: 1, noNaN: true }), { minLength: DIMS, maxLength: DIMS });
const ranking = (query: ArrayLike<number>, docs: ArrayLike<number>[]) =>
  docs
    .map((d, i) => [i, dot(query, d)] as const)
    .sort((a, b) => b[1] - a[1])
    .map(([i]) => i);

describe("keyed vector transform", () => {
  it("preserves every inner product, so rankings with the key are the rankings without the transform", () => {
    const key = new VectorKey(randomBytes(32), DIMS);
    fc.assert(
      fc.property(vector, fc.array(vector, { minLength: 2, maxLength: 20 }), (query, docs) => {
        const q = key.apply(query);
        const stored = docs.map((d) => key.apply(d));
        for (let i = 0; i < docs.length; i++) expect(dot(q, stored[i]!)).toBeCloseTo(dot(query, docs[i]!), 3);
        const plain = docs.map((d) => dot(query, d));
        const keyed = stored.map((d) => dot(q, d));
        // Same order wherever the raw scores are not within rounding of each other.
        for (let i = 0; i < docs.length; i++)
          for (let j = 0; j < docs.length; j++)
            if (plain[i]! - plain[j]! > 1e-3) expect(keyed[i]!).toBeGreaterThan(keyed[j]!);
      }),
      { numRuns: 100 },
    );
  });

  it("is the same transform for the same key, and an unrelated one for another key", () => {
    const bytes = randomBytes(32);
    const v = Array.from({ length: DIMS }, (_, i) => Math.sin(i));
    expect(new VectorKey(bytes, DIMS).apply(v)).toEqual(new VectorKey(Buffer.from(bytes), DIMS).apply(v));
    const other = new VectorKey(randomBytes(32), DIMS).apply(v);
    expect(Math.abs(dot(other, new VectorKey(bytes, DIMS).apply(v)))).toBeLessThan(0.8 * dot(v, v));
  });

  it("leaves rankings unrelated when a query is transformed under the wrong key", () => {
    // 200 documents, each query's true best match: with the key it ranks first, with a wrong key it is
    // found first about as often as chance would have it.
    const rightKey = new VectorKey(randomBytes(32), DIMS);
    const wrongKey = new VectorKey(randomBytes(32), DIMS);
    const random = () => Array.from({ length: DIMS }, () => Math.random() * 2 - 1);
    const docs = Array.from({ length: 200 }, random);
    const stored = docs.map((d) => rightKey.apply(d));
    let right = 0;
    let wrong = 0;
    for (let t = 0; t < 50; t++) {
      const target = t;
      const query = docs[target]!.map((x) => x + (Math.random() - 0.5) * 0.2);
      if (ranking(rightKey.apply(query), stored)[0] === target) right++;
      if (ranking(wrongKey.apply(query), stored)[0] === target) wrong++;
    }
    expect(right).toBe(50);
    expect(wrong).toBeLessThan(5);
  });

  it("refuses a key of the wrong size and a vector of the wrong dimensions", () => {
    expect(() => new VectorKey(randomBytes(16), DIMS)).toThrow();
    expect(() => new VectorKey(randomBytes(32), DIMS).apply([1, 2, 3])).toThrow();
  });
});
