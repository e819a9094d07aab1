/** Summary statistics shared by the benchmarks. */
export function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

export const median = (values: number[]) => quantile(values, 0.5);

export async function timed<T>(fn: () => Promise<T> | T): Promise<[T, number]> {
  const started = performance.now();
  const result = await fn();
  return [result, performance.now() - started];
}

export const fmt = (ms: number) => ms.toFixed(ms < 10 ? 2 : 0);

/** Two bounds, in the values' unit. */
export interface Interval {
  lo: number;
  hi: number;
}

/**
 * A confidence interval for the `q`-quantile of whatever `values` sample, without assuming their
 * distribution: two of the sorted values, chosen so that the count of samples below the true
 * quantile (binomial, n and q) puts it between them with at least `confidence`. `lo` is -Infinity
 * or `hi` Infinity when even the smallest or largest value is not a safe bound: too few samples
 * for that quantile at that confidence. At 500 samples, a p99's interval runs from the 490th
 * value to the largest.
 */
export function quantileInterval(values: number[], q: number, confidence = 0.95): Interval {
  if (!(q > 0 && q < 1)) throw new RangeError(`a quantile strictly between 0 and 1, not ${q}`);
  const n = values.length;
  if (n === 0) return { lo: Number.NaN, hi: Number.NaN };
  const sorted = [...values].sort((a, b) => a - b);
  const tail = (1 - confidence) / 2;
  // below[k]: the chance that at most k samples fall below the quantile. Each binomial term is
  // built in log space, so that large n does not underflow before the terms that matter.
  const below: number[] = [];
  let logP = n * Math.log1p(-q);
  let sum = 0;
  for (let k = 0; k <= n; k++) {
    sum += Math.exp(logP);
    below.push(Math.min(1, sum));
    logP += Math.log((n - k) / (k + 1)) + Math.log(q / (1 - q));
  }
  // The r-th smallest value (1-based) lies above the quantile when fewer than r samples fall below
  // it (chance below[r - 1]), and under it when r or more do (chance 1 - below[r - 1]).
  let lo = 0;
  while (lo < n && below[lo]! <= tail) lo++;
  let hi = 1;
  while (hi <= n && 1 - below[hi - 1]! > tail) hi++;
  return { lo: lo >= 1 ? sorted[lo - 1]! : -Infinity, hi: hi <= n ? sorted[hi - 1]! : Infinity };
}
