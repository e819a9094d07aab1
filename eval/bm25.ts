/**
 * The baseline: Okapi BM25 as Lucene scores it (idf = ln(1 + (N - n + 0.5) / (n + 0.5)), k1 = 1.2,
 * b = 0.75), over a plain analyzer: lower-case, split on anything that is not a letter or digit,
 * English stop words removed, no stemming, and (unless asked) no identifier splitting. Written out here because the
 * npm packages fall short of that: okapibm25 matches terms as substrings, minisearch measures a
 * document by its distinct words, wink-bm25-text-search installs an NLP model it would not use. The
 * textbook formula fits in a few lines, and nobody has to wonder what the baseline was.
 */
import { splitIdentifier } from "../protocol/embedder/tokens.js";

/** Lucene's English stop set (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`). */
const STOP_WORDS = new Set(
  (
    "a an and are as at be but by for if in into is it no not of on or such that the their then there " +
    "these they this to was will with"
  ).split(" "),
);

export function analyze(text: string, options: { splitIdentifiers?: boolean } = {}): string[] {
  const words = text.split(/[^\p{L}\p{N}]+/u).filter((word) => word !== "");
  const tokens = options.splitIdentifiers
    ? words.flatMap((word) => {
        // The word's parts as Sextant's own tokens split them (camelCase, PascalCase, digits), and the whole word.
        const parts = splitIdentifier(word);
        const whole = word.toLowerCase();
        return parts.length > 1 ? [whole, ...parts] : [whole];
      })
    : words.map((word) => word.toLowerCase());
  return tokens.filter((token) => !STOP_WORDS.has(token));
}

export interface Bm25Options {
  k1?: number;
  b?: number;
  /** Identifiers also count as their words (`parseConfig` as parse and config): the baseline the code-aware index is held to. */
  splitIdentifiers?: boolean;
}

export interface Scored {
  doc: number;
  score: number;
}

export class Bm25Index {
  readonly #postings = new Map<string, Map<number, number>>();
  readonly #lengths: number[] = [];
  readonly #avgLength: number;
  readonly #k1: number;
  readonly #b: number;
  readonly #split: boolean;

  constructor(docs: readonly string[], options: Bm25Options = {}) {
    this.#k1 = options.k1 ?? 1.2;
    this.#b = options.b ?? 0.75;
    this.#split = options.splitIdentifiers ?? false;
    docs.forEach((text, doc) => {
      const tokens = analyze(text, { splitIdentifiers: this.#split });
      this.#lengths.push(tokens.length);
      for (const token of tokens) {
        let posting = this.#postings.get(token);
        if (!posting) this.#postings.set(token, (posting = new Map()));
        posting.set(doc, (posting.get(doc) ?? 0) + 1);
      }
    });
    this.#avgLength = this.#lengths.reduce((a, b) => a + b, 0) / Math.max(1, this.#lengths.length);
  }

  /** Inverse document frequency, Lucene's form (never negative). */
  idf(term: string): number {
    const n = this.#postings.get(term)?.size ?? 0;
    const N = this.#lengths.length;
    return Math.log(1 + (N - n + 0.5) / (n + 0.5));
  }

  /**
   * The `limit` best documents with a positive score, best first; ties go to the earlier
   * document. A word repeated in the query counts once per occurrence, as in a Lucene query.
   */
  search(query: string, limit: number): Scored[] {
    const scores = new Map<number, number>();
    for (const term of analyze(query, { splitIdentifiers: this.#split })) {
      const posting = this.#postings.get(term);
      if (!posting) continue;
      const idf = this.idf(term);
      for (const [doc, tf] of posting) {
        const norm = this.#k1 * (1 - this.#b + (this.#b * this.#lengths[doc]!) / this.#avgLength);
        scores.set(doc, (scores.get(doc) ?? 0) + (idf * tf * (this.#k1 + 1)) / (tf + norm));
      }
    }
    return [...scores]
      .map(([doc, score]) => ({ doc, score }))
      .sort((x, y) => y.score - x.score || x.doc - y.doc)
      .slice(0, limit);
  }
}
