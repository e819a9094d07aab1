/**
 * Reciprocal rank fusion (Cormack, Clarke and Büttcher, 2009): each channel contributes
 * weight / (K + rank) for every entry it returns, so entries that rank well in both the vector
 * and the lexical channel rise, and neither channel's score scale has to be calibrated against
 * the other's. K = 60 is the value from the paper and common practice.
 */
export const RRF_K = 60;

export interface RankedList {
  ids: readonly string[];
  weight: number;
}

export function fuse(lists: readonly RankedList[], k = RRF_K): { id: string; score: number }[] {
  const scores = new Map<string, number>();
  for (const { ids, weight } of lists) {
    ids.forEach((id, rank) => scores.set(id, (scores.get(id) ?? 0) + weight / (k + rank + 1)));
  }
  return [...scores].map(([id, score]) => ({ id, score })).sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : 1));
}
