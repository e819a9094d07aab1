/**
 * How the edge's search adds its two channels, here so that the Workspace object and the offline
 * dev eval (train/dev-eval.ts) rank with the same code.
 */

/**
 * The lexical channel's weight, its best score scaled to 1, against the vector channel's cosine.
 * Chosen on the dev eval's six codebases (`npm run eval`) with a first training run of the learned
 * model (130,068 pairs; the shipped one trained on 154,253 scores 1.08x at weight 1): 0.3, 0.5, 0.8, 1
 * and 1.5 scored 1.08x, 1.09x, 1.09x, 1.08x and 1.07x the identifier-split BM25's MRR@10 over
 * all queries, where reciprocal rank fusion scored 1.04x to 1.07x at lexical weights 1 to 3. 1 rather
 * than 0.5: a search for an exact identifier finds it first, where at 0.5 a chunk whose words the model
 * finds close could outrank it. HELD-OUT.md's packages are kept out of that choice.
 */
export const LEXICAL_WEIGHT = 1;

export interface ChannelHit {
  id: string;
  score: number;
}

/**
 * Both channels' candidates with one score each: cosine + weight × (BM25 / the query's best BM25). A
 * candidate only the lexical channel returned counts the lowest cosine the vector channel returned
 * (it ranked below all of those); one only the vector channel returned counts no lexical score.
 */
export function fuseScores(
  byVector: readonly ChannelHit[],
  byTerms: readonly ChannelHit[],
  weight = LEXICAL_WEIGHT,
): ChannelHit[] {
  const floor = byVector.reduce((min, h) => Math.min(min, h.score), byVector.length > 0 ? Infinity : 0);
  const best = byTerms.reduce((max, h) => Math.max(max, h.score), 0) || 1;
  const scores = new Map<string, number>();
  for (const h of byVector) scores.set(h.id, h.score);
  for (const h of byTerms) scores.set(h.id, (scores.get(h.id) ?? floor) + (weight * h.score) / best);
  return [...scores].map(([id, score]) => ({ id, score })).sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1));
}
