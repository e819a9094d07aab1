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

/**
 * The translation channel's weight. With it, every channel is scaled to 0..1 between its worst and
 * best candidate (log-likelihoods have no fixed range) and the three are added at weights 1, 1 and
 * this. Chosen on the dev eval (`npm run eval:dev` prints 0.5, 1 and 2: 1.16x, 1.18x and 1.15x the
 * identifier-split BM25's MRR@10 over all queries); HELD-OUT.md's packages are kept out of that choice.
 */
export const TRANSLATION_WEIGHT = 1;

/** Scores scaled to 0..1 between the worst and the best; a lone candidate (or a tie of all) is the best, 1. */
function scaled(hits: readonly ChannelHit[]): ChannelHit[] {
  let [lo, hi] = [Infinity, -Infinity];
  for (const h of hits) [lo, hi] = [Math.min(lo, h.score), Math.max(hi, h.score)];
  const span = hi - lo;
  return hits.map((h) => ({ id: h.id, score: span > 0 ? (h.score - lo) / span : 1 }));
}

/**
 * The vector, lexical and translation channels fused: each scaled to 0..1 over its own candidates,
 * and added (the translation channel at `translationWeight`). Without translation candidates it is
 * `fuseScores`.
 */
export function fuseThree(
  byVector: readonly ChannelHit[],
  byTerms: readonly ChannelHit[],
  byTranslation: readonly ChannelHit[],
  weight = LEXICAL_WEIGHT,
  translationWeight = TRANSLATION_WEIGHT,
): ChannelHit[] {
  if (byTranslation.length === 0 || translationWeight === 0) return fuseScores(byVector, byTerms, weight);
  const scores = new Map<string, number>();
  for (const [hits, w] of [
    [byVector, 1],
    [byTerms, weight],
    [byTranslation, translationWeight],
  ] as const)
    for (const h of scaled(hits)) scores.set(h.id, (scores.get(h.id) ?? 0) + w * h.score);
  return [...scores].map(([id, score]) => ({ id, score })).sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1));
}
