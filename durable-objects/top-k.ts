/**
 * Keeps the `size` best items seen: a binary min-heap on parallel typed arrays. Ties in score go
 * to the smaller key (an entry's id), so results never depend on where an entry happens to sit.
 */
export class TopK {
  readonly scores: Float64Array;
  readonly items: Int32Array;
  length = 0;

  constructor(
    readonly size: number,
    private readonly keys: Uint32Array,
  ) {
    this.scores = new Float64Array(size);
    this.items = new Int32Array(size);
  }

  /** Whether (score a, item a) ranks below (score b, item b). */
  #below(sa: number, ia: number, sb: number, ib: number): boolean {
    return sa < sb || (sa === sb && this.keys[ia]! > this.keys[ib]!);
  }

  push(item: number, score: number): void {
    const { scores, items } = this;
    if (this.length < this.size) {
      let i = this.length++;
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (!this.#below(score, item, scores[parent]!, items[parent]!)) break;
        scores[i] = scores[parent]!;
        items[i] = items[parent]!;
        i = parent;
      }
      scores[i] = score;
      items[i] = item;
      return;
    }
    if (score < scores[0]! || !this.#below(scores[0]!, items[0]!, score, item)) return;
    let i = 0;
    const n = this.length;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && this.#below(scores[right]!, items[right]!, scores[left]!, items[left]!) ? right : left;
      if (!this.#below(scores[child]!, items[child]!, score, item)) break;
      scores[i] = scores[child]!;
      items[i] = items[child]!;
      i = child;
    }
    scores[i] = score;
    items[i] = item;
  }

  /** Items and scores, best first. */
  sorted(): { item: number; score: number }[] {
    const out: { item: number; score: number }[] = [];
    for (let i = 0; i < this.length; i++) out.push({ item: this.items[i]!, score: this.scores[i]! });
    return out.sort((a, b) => b.score - a.score || this.keys[a.item]! - this.keys[b.item]!);
  }
}

/**
 * Hits of rankings over the same ids taken as one (an entry's own vector and its pieces'): each id
 * at its best score, the best `k`, highest first, ties to the smaller id.
 */
export function bestPerId<Id extends number | string>(
  hits: Iterable<{ id: Id; score: number }>,
  k: number,
): { id: Id; score: number }[] {
  const best = new Map<Id, number>();
  for (const { id, score } of hits) if (score > (best.get(id) ?? -Infinity)) best.set(id, score);
  return [...best]
    .map(([id, score]) => ({ id, score }))
    .sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .slice(0, k);
}
