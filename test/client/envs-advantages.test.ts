/**
 * GRPO's group-relative advantages against values worked by hand: (r - mean) / (std + 1e-6), with
 * the population standard deviation.
 */
import { describe, expect, it } from "vitest";
import { ADVANTAGE_EPSILON, groupAdvantages, groupStats } from "../../protocol/envs/advantages.js";

describe("groupAdvantages", () => {
  it("one success in four: mean 0.25, std sqrt(0.1875)", () => {
    // Deviations 0.75, -0.25 x3; squares 0.5625 + 3 x 0.0625 = 0.75; / 4 = 0.1875.
    const std = Math.sqrt(0.1875); // 0.4330127...
    expect(groupStats([1, 0, 0, 0])).toEqual({ mean: 0.25, std });
    const [a, b, c, d] = groupAdvantages([1, 0, 0, 0]);
    expect(a).toBeCloseTo(0.75 / (0.4330127 + 1e-6), 6); // 1.7320468
    expect(a).toBeCloseTo(1.7320468, 6);
    for (const x of [b, c, d]) expect(x).toBeCloseTo(-0.5773489, 6);
  });

  it("two and two: ±0.5 / (0.5 + 1e-6)", () => {
    expect(groupAdvantages([1, 0, 1, 0])).toEqual([0.5 / 0.500001, -0.5 / 0.500001, 0.5 / 0.500001, -0.5 / 0.500001]);
  });

  it("the population std, not the sample std: a group of two is ±1 (less epsilon)", () => {
    // mean 2, population std 1 (the sample std would be sqrt(2)).
    expect(groupStats([3, 1])).toEqual({ mean: 2, std: 1 });
    expect(groupAdvantages([3, 1])).toEqual([1 / 1.000001, -1 / 1.000001]);
  });

  it("graded rewards: [0.2, 0.4, 0.9]", () => {
    // mean 0.5; deviations -0.3, -0.1, 0.4; squares 0.09 + 0.01 + 0.16 = 0.26; / 3; std 0.2943920 (0.3 / 0.2943930 = 1.0190459)
    const std = Math.sqrt(0.26 / 3);
    const adv = groupAdvantages([0.2, 0.4, 0.9]);
    expect(adv[0]).toBeCloseTo(-0.3 / (std + ADVANTAGE_EPSILON), 9);
    expect(adv[0]).toBeCloseTo(-1.0190459, 6);
    expect(adv[1]).toBeCloseTo(-0.339682, 6);
    expect(adv[2]).toBeCloseTo(1.3587278, 6);
    expect(adv.reduce((s, x) => s + x, 0)).toBeCloseTo(0, 9);
  });

  it("equal rewards give exactly 0 for every member", () => {
    expect(groupAdvantages([1, 1, 1, 1])).toEqual([0, 0, 0, 0]);
    expect(groupAdvantages([0, 0, 0, 0])).toEqual([0, 0, 0, 0]);
    // 0.1 summed four times is not 0.4 in floating point: still 0, not a rounding error / 1e-6.
    expect(groupAdvantages([0.1, 0.1, 0.1, 0.1])).toEqual([0, 0, 0, 0]);
    expect(groupAdvantages([0.7])).toEqual([0]);
  });

  it("refuses an empty group and a reward that is not a finite number", () => {
    expect(() => groupAdvantages([])).toThrow(RangeError);
    expect(() => groupAdvantages([1, Number.NaN])).toThrow(/finite/);
    expect(() => groupAdvantages([1, Number.POSITIVE_INFINITY])).toThrow(/finite/);
  });
});
