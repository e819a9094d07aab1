import { describe, expect, it } from "vitest";
import { VectorKey } from "../../protocol/vector-key.js";

describe("keyed vector transform inside workerd", () => {
  it("runs in the Worker runtime and preserves inner products there too", () => {
    const key = new VectorKey(crypto.getRandomValues(new Uint8Array(32)), 128);
    const a = Array.from({ length: 128 }, (_, i) => Math.cos(i));
    const b = Array.from({ length: 128 }, (_, i) => Math.sin(i * 3));
    const dot = (x: ArrayLike<number>, y: ArrayLike<number>) => Array.from(x).reduce((s, v, i) => s + v * y[i]!, 0);
    expect(dot(key.apply(a), key.apply(b))).toBeCloseTo(dot(a, b), 3);
  });
});
