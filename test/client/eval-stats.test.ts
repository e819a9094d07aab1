/**
 * The eval math against hand computations and exact arithmetic: pass@k (Chen et al.'s unbiased
 * estimator) worked by hand on n = 5, c = 2 and checked against exact binomials in BigInt; a run's
 * summary over its unbroken tasks; and the comparison of two runs, whose bootstrap interval is
 * repeatable by seed.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  compareRuns,
  passAtK,
  summarize,
  taskStats,
  type AttemptStats,
  type TaskStatsInput,
} from "../../protocol/evals/stats.js";

function binomial(n: number, k: number): bigint {
  if (k < 0 || k > n) return 0n;
  let out = 1n;
  for (let i = 0; i < k; i++) out = (out * BigInt(n - i)) / BigInt(i + 1);
  return out;
}

/** 1 − C(n−c, k)/C(n, k) in exact integers, then to a double. */
function exactPassAtK(n: number, c: number, k: number): number {
  const all = binomial(n, k);
  const scale = 10n ** 30n;
  return 1 - Number((binomial(n - c, k) * scale) / all) / 1e30;
}

const attempt = (passed: boolean, over: Partial<AttemptStats> = {}): AttemptStats => ({
  reward: passed ? 1 : 0,
  passed,
  tokens: 100,
  costUsd: 0.01,
  durationMs: 1000,
  ...over,
});

/** A task with `passes` passing attempts of `n`. */
const task = (index: number, n: number, passes: number, over: Partial<TaskStatsInput> = {}): TaskStatsInput => ({
  index,
  sha256: index.toString(16).padStart(64, "0"),
  broken: false,
  attempts: Array.from({ length: n }, (_, i) => attempt(i < passes)),
  ...over,
});

describe("passAtK", () => {
  it("n = 5, c = 2, worked by hand", () => {
    // k = 1: 1 − C(3,1)/C(5,1) = 1 − 3/5.
    expect(passAtK(5, 2, 1)).toBeCloseTo(0.4, 15);
    // k = 2: 1 − C(3,2)/C(5,2) = 1 − 3/10.
    expect(passAtK(5, 2, 2)).toBeCloseTo(0.7, 15);
    // k = 3: 1 − C(3,3)/C(5,3) = 1 − 1/10.
    expect(passAtK(5, 2, 3)).toBeCloseTo(0.9, 15);
    // k = 4 and 5: only 3 failures, so every draw of 4 or 5 holds a pass.
    expect(passAtK(5, 2, 4)).toBe(1);
    expect(passAtK(5, 2, 5)).toBe(1);
  });

  it("pass@1 is the share that passed", () => {
    expect(passAtK(10, 3, 1)).toBeCloseTo(0.3, 15);
    expect(passAtK(1, 1, 1)).toBe(1);
    expect(passAtK(1, 0, 1)).toBe(0);
  });

  it("k past n is undefined, and the counts must make sense", () => {
    expect(() => passAtK(3, 1, 4)).toThrow(RangeError);
    expect(() => passAtK(3, 4, 1)).toThrow(RangeError);
    expect(() => passAtK(0, 0, 1)).toThrow(RangeError);
    expect(() => passAtK(3, 1, 0)).toThrow(RangeError);
    expect(() => passAtK(3, -1, 1)).toThrow(RangeError);
    expect(() => passAtK(3.5, 1, 1)).toThrow(RangeError);
  });

  it("holds where the binomials overflow a double (n = 2000, c = 17, k = 1000)", () => {
    // C(2000, 1000) ≈ 2e600: a ratio of binomials in doubles is Infinity / Infinity.
    expect(passAtK(2000, 17, 1000)).toBeCloseTo(exactPassAtK(2000, 17, 1000), 12);
    expect(passAtK(2000, 1, 1000)).toBeCloseTo(0.5, 12);
  });

  const counts = fc
    .integer({ min: 1, max: 120 })
    .chain((n) => fc.tuple(fc.constant(n), fc.integer({ min: 0, max: n }), fc.integer({ min: 1, max: n })));

  it("matches exact binomial arithmetic", () => {
    fc.assert(
      fc.property(counts, ([n, c, k]) => {
        expect(passAtK(n, c, k)).toBeCloseTo(exactPassAtK(n, c, k), 10);
      }),
    );
  });

  it("is within [0, 1], is 0 with no pass, and pass@n is 1 exactly when something passed", () => {
    fc.assert(
      fc.property(counts, ([n, c, k]) => {
        const p = passAtK(n, c, k);
        expect(p).toBeGreaterThanOrEqual(0);
        expect(p).toBeLessThanOrEqual(1);
        if (c === 0) expect(p).toBe(0);
        expect(passAtK(n, c, n)).toBe(c > 0 ? 1 : 0);
      }),
    );
  });

  it("never falls as k or c grows", () => {
    fc.assert(
      fc.property(counts, ([n, c, k]) => {
        if (k < n) expect(passAtK(n, c, k + 1)).toBeGreaterThanOrEqual(passAtK(n, c, k));
        if (c < n) expect(passAtK(n, c + 1, k)).toBeGreaterThanOrEqual(passAtK(n, c, k));
      }),
    );
  });
});

describe("summarize", () => {
  it("counts only unbroken tasks (a report marks one with what oracle and noop scored); pass@k is the mean of the tasks' estimates", () => {
    const tasks = [
      task(0, 5, 2), // pass@1 0.4, pass@3 0.9
      task(1, 5, 0), // 0, 0
      task(2, 5, 5), // 1, 1
      task(3, 5, 5, { broken: { oracle: 1, noop: 1 } }),
      task(4, 5, 5, { broken: null }),
    ];
    const s = summarize(tasks, 3);
    expect(s.tasks).toBe(5);
    expect(s.counted).toBe(4);
    expect(s.attempts).toBe(20);
    expect(s.passed).toBe(12);
    expect(s.passAt1).toBeCloseTo((0.4 + 0 + 1 + 1) / 4, 15);
    expect(s.passAtK).toBeCloseTo((0.9 + 0 + 1 + 1) / 4, 15);
    expect(s.meanReward).toBeCloseTo(12 / 20, 15);
    expect(s.tokens).toBe(2000);
    expect(s.costUsd).toBeCloseTo(0.2, 12);
    expect(s.wallMs).toBe(20_000);
  });

  it("an unverified attempt scores 0; an unknown cost makes the total unknown", () => {
    const t = task(0, 2, 1);
    t.attempts[1] = attempt(false, { reward: null, costUsd: null, durationMs: null });
    expect(taskStats(t, 2)).toMatchObject({ meanReward: 0.5, costUsd: null, wallMs: 1000, passAt1: 0.5, passAtK: 1 });
    expect(summarize([t], 1).costUsd).toBeNull();
    // The unknown cost is a broken task's: the counted cost is known.
    expect(summarize([task(1, 2, 1), { ...t, broken: true }], 1).costUsd).toBeCloseTo(0.02, 12);
  });

  it("a task short of k attempts has no pass@k yet", () => {
    expect(taskStats(task(0, 2, 1), 3).passAtK).toBeNull();
    const s = summarize([task(0, 3, 1), task(1, 2, 1)], 3);
    expect(s.passAtK).toBeNull();
    expect(s.passAt1).toBeCloseTo((1 / 3 + 1 / 2) / 2, 15);
    expect(summarize([task(0, 0, 0)], 1).passAt1).toBeNull();
    expect(summarize([], 1)).toMatchObject({ counted: 0, passAt1: null, passAtK: null, meanReward: null });
  });
});

describe("compareRuns", () => {
  const runA = { tasks: [task(0, 4, 1), task(1, 4, 0), task(2, 4, 4), task(3, 4, 2), task(4, 4, 3)] };

  it("a run against itself: difference 0, an interval holding 0, every task a tie", () => {
    const c = compareRuns(runA, runA, { seed: 7 });
    expect(c.difference).toBe(0);
    expect(c.interval!.low).toBeLessThanOrEqual(0);
    expect(c.interval!.high).toBeGreaterThanOrEqual(0);
    expect([c.wins, c.losses, c.ties, c.counted]).toEqual([0, 0, 5, 5]);
    expect(c.costRatio).toBe(1);
    expect(c.timeRatio).toBe(1);
  });

  it("b solving strictly more: a positive difference whose interval lies above 0", () => {
    // Ten tasks; b passes every attempt of the six a never solves, and ties on the other four.
    const a = { tasks: Array.from({ length: 10 }, (_, i) => task(i, 2, i < 4 ? 2 : 0)) };
    const b = { tasks: Array.from({ length: 10 }, (_, i) => task(i, 2, 2)) };
    const c = compareRuns(a, b, { seed: 1 });
    expect(c.difference).toBeCloseTo(0.6, 15);
    expect(c.passAt1A).toBeCloseTo(0.4, 15);
    expect(c.passAt1B).toBe(1);
    expect([c.wins, c.losses, c.ties]).toEqual([6, 0, 4]);
    expect(c.interval!.low).toBeGreaterThan(0);
    expect(c.interval!.high).toBeLessThanOrEqual(1);
    // The other way round, everything flips.
    const back = compareRuns(b, a, { seed: 1 });
    expect(back.difference).toBeCloseTo(-0.6, 15);
    expect([back.wins, back.losses]).toEqual([0, 6]);
    expect(back.interval!.high).toBeLessThan(0);
  });

  it("two tasks, differences 0 and 1: the bootstrap's 2.5% and 97.5% points are 0 and 1", () => {
    // Resampled means are 0, 0.5, 1 with chances 1/4, 1/2, 1/4: both tails hold far more than 2.5%.
    const c = compareRuns({ tasks: [task(0, 1, 0), task(1, 1, 0)] }, { tasks: [task(0, 1, 0), task(1, 1, 1)] });
    expect(c.difference).toBe(0.5);
    expect(c.interval).toEqual({ low: 0, high: 1, confidence: 0.95, resamples: 10_000, seed: 0 });
  });

  it("is repeatable by seed, and the interval stays within the tasks' differences", () => {
    // Thirty tasks of seven attempts, so that resampled means fall between grid points and seeds show.
    const a = { tasks: Array.from({ length: 30 }, (_, i) => task(i, 7, (i * 3) % 8)) };
    const b = { tasks: Array.from({ length: 30 }, (_, i) => task(i, 7, (i * 5 + 1) % 8)) };
    const one = compareRuns(a, b, { seed: 42, resamples: 2000 });
    expect(compareRuns(a, b, { seed: 42, resamples: 2000 })).toEqual(one);
    const { low, high } = compareRuns(a, b, { seed: 43, resamples: 2000 }).interval!;
    expect([low, high]).not.toEqual([one.interval!.low, one.interval!.high]);
    const diffs = one.tasks.map((t) => t.difference!);
    expect(one.interval!.low).toBeGreaterThanOrEqual(Math.min(...diffs));
    expect(one.interval!.high).toBeLessThanOrEqual(Math.max(...diffs));
    expect(one.interval!.low).toBeLessThanOrEqual(one.interval!.high);
  });

  it("matches tasks by archive, lists the rest apart, and leaves broken tasks out", () => {
    const shaA = "a".repeat(64);
    const shaB = "b".repeat(64);
    const a = { tasks: [task(0, 2, 0), task(1, 2, 2, { broken: true }), task(2, 2, 1, { sha256: shaA })] };
    // b plays task 0 as its index 5, and one task a never played.
    const b = {
      tasks: [task(5, 2, 2, { sha256: task(0, 0, 0).sha256 }), task(1, 2, 0), task(7, 2, 1, { sha256: shaB })],
    };
    const c = compareRuns(a, b);
    expect(c.onlyA).toEqual([{ index: 2, sha256: shaA }]);
    expect(c.onlyB).toEqual([{ index: 7, sha256: shaB }]);
    expect(c.tasks).toEqual([
      { sha256: task(0, 0, 0).sha256, indexA: 0, indexB: 5, passAt1A: 0, passAt1B: 1, difference: 1, result: "win" },
      {
        sha256: task(1, 0, 0).sha256,
        indexA: 1,
        indexB: 1,
        passAt1A: 1,
        passAt1B: 0,
        difference: null,
        result: null,
        excluded: "broken in a",
      },
    ]);
    expect(c.counted).toBe(1);
    expect(c.difference).toBe(1);
  });

  it("cost and time per attempt, b over a; null where a's is unknown or 0", () => {
    const a = { tasks: [task(0, 2, 1), task(1, 2, 1)] };
    const b = {
      tasks: [0, 1].map((i) => ({
        ...task(i, 4, 2),
        attempts: task(i, 4, 2).attempts.map((x) => ({ ...x, costUsd: 0.03, durationMs: 500 })),
      })),
    };
    const c = compareRuns(a, b);
    // Per attempt: cost 0.03 against 0.01, time 500 ms against 1000 ms (b's extra attempts do not count against it).
    expect(c.costRatio).toBeCloseTo(3, 12);
    expect(c.timeRatio).toBeCloseTo(0.5, 12);
    const unpriced = {
      tasks: a.tasks.map((t) => ({ ...t, attempts: t.attempts.map((x) => ({ ...x, costUsd: null })) })),
    };
    expect(compareRuns(unpriced, b).costRatio).toBeNull();
    const free = { tasks: a.tasks.map((t) => ({ ...t, attempts: t.attempts.map((x) => ({ ...x, costUsd: 0 })) })) };
    expect(compareRuns(free, b).costRatio).toBeNull();
  });

  it("nothing shared: no difference and no interval", () => {
    const c = compareRuns({ tasks: [task(0, 1, 1)] }, { tasks: [task(1, 1, 1)] });
    expect(c).toMatchObject({ counted: 0, difference: null, interval: null, costRatio: null, timeRatio: null });
  });

  it("refuses settings that make no interval", () => {
    expect(() => compareRuns(runA, runA, { confidence: 1 })).toThrow(RangeError);
    expect(() => compareRuns(runA, runA, { resamples: 0 })).toThrow(RangeError);
  });
});
