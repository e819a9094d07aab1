import type { Target } from "./corpus.js";

/** A returned chunk: where it is, as either system reports it. */
export interface Ranked {
  path: string;
  startLine: number;
  endLine: number;
}

/** A result with the score its system gave it (the two systems' scores are not comparable). */
export interface ScoredResult extends Ranked {
  score: number;
}

/** A chunk answers a query when it is in a target's file and shares a line with its definition. */
export function isHit(result: Ranked, targets: readonly Target[]): boolean {
  return targets.some((t) => t.path === result.path && result.startLine <= t.endLine && t.startLine <= result.endLine);
}

/** The 1-based rank of the first hit among the first `depth` results, or null. */
export function firstHit(results: readonly Ranked[], targets: readonly Target[], depth = 10): number | null {
  const at = results.slice(0, depth).findIndex((r) => isHit(r, targets));
  return at < 0 ? null : at + 1;
}

export interface Scores {
  queries: number;
  recallAt1: number;
  recallAt5: number;
  recallAt10: number;
  mrrAt10: number;
}

/**
 * Recall@k (each query has one answer, so this is the share of queries answered within the first
 * k results) and MRR@10, from each query's first-hit rank.
 */
export function score(ranks: readonly (number | null)[]): Scores {
  const n = ranks.length;
  const within = (k: number) => (n === 0 ? 0 : ranks.filter((r) => r !== null && r <= k).length / n);
  const mrr = n === 0 ? 0 : ranks.reduce<number>((sum, r) => sum + (r !== null && r <= 10 ? 1 / r : 0), 0) / n;
  return { queries: n, recallAt1: within(1), recallAt5: within(5), recallAt10: within(10), mrrAt10: mrr };
}
