/**
 * Trains the question-side translation table (`protocol/embedder/translation.ts`): IBM Model 1,
 * P(question word | code term), by expectation-maximisation over the mined (question, code) pairs.
 * Each question word of a pair is explained by one of the pair's code terms (or by none, the null
 * term); EM shares each word out among them by the current probabilities and re-estimates. Both
 * sides are tokenized as the lexical channel tokenizes them, so the table's terms are the ones the
 * client keys. Deterministic: the same pairs give the same table.
 */
import { Tokenizer } from "../protocol/embedder/tokens.js";
import { MAX_ALTERNATIVES, type TranslationEntry } from "../protocol/embedder/translation.js";

export interface TranslationSettings {
  /** A term must occur in this many questions (or code texts) to be in the table. */
  minCount: number;
  iterations: number;
  /** Entries less likely than this are dropped from the table written. */
  keepAbove: number;
}

export const DEFAULT_TRANSLATION: TranslationSettings = { minCount: 5, iterations: 5, keepAbove: 0.01 };

export function trainTranslation(
  pairs: readonly { query: string; code: string }[],
  settings: TranslationSettings = DEFAULT_TRANSLATION,
  onIteration: (iteration: number, entries: number) => void = () => {},
): Map<string, TranslationEntry> {
  const tokenizer = new Tokenizer();
  const distinct = (text: string) => [...new Set(tokenizer.tokenize(text).map((t) => t.term))];
  const questions = pairs.map((p) => distinct(p.query));
  const codes = pairs.map((p) => distinct(p.code));
  const vocabulary = (texts: string[][]) => {
    const df = new Map<string, number>();
    for (const terms of texts) for (const t of terms) df.set(t, (df.get(t) ?? 0) + 1);
    const ids = new Map<string, number>();
    const counts: number[] = [];
    for (const [t, n] of df)
      if (n >= settings.minCount) {
        ids.set(t, ids.size);
        counts.push(n);
      }
    return { ids, counts };
  };
  const { ids: wordIds } = vocabulary(questions);
  const { ids: codeIds, counts: codeDf } = vocabulary(codes);
  const W = wordIds.size;
  const NULL = codeIds.size;
  const qRows = questions.map((ts) => Int32Array.from(ts.filter((t) => wordIds.has(t)).map((t) => wordIds.get(t)!)));
  const cRows = codes.map((ts) =>
    Int32Array.from([...ts.filter((t) => codeIds.has(t)).map((t) => codeIds.get(t)!), NULL]),
  );
  // P(w | c), keyed c * W + w; absent means 0, except before the first iteration (uniform).
  let prob: Map<number, number> | null = null;
  const buf = new Float64Array(1024);
  for (let it = 1; it <= settings.iterations; it++) {
    const counts = new Map<number, number>();
    const totals = new Float64Array(NULL + 1);
    for (let p = 0; p < pairs.length; p++) {
      const ws = qRows[p]!;
      const cs = cRows[p]!.length > buf.length ? cRows[p]!.subarray(0, buf.length) : cRows[p]!;
      if (ws.length === 0 || cs.length < 2) continue;
      for (const w of ws) {
        let z = 0;
        for (let k = 0; k < cs.length; k++) z += buf[k] = prob ? (prob.get(cs[k]! * W + w) ?? 0) : 1;
        if (z === 0) continue;
        for (let k = 0; k < cs.length; k++) {
          if (buf[k] === 0) continue;
          const key = cs[k]! * W + w;
          const share = buf[k]! / z;
          counts.set(key, (counts.get(key) ?? 0) + share);
          totals[cs[k]!]! += share;
        }
      }
    }
    prob = new Map();
    for (const [key, n] of counts) {
      const p = n / totals[Math.floor(key / W)]!;
      if (p > 1e-3) prob.set(key, p);
    }
    onIteration(it, prob.size);
  }
  const wordTerms = [...wordIds.keys()];
  const codeTerms = [...codeIds.keys()];
  // Each word's alternatives, ordered by how much of the word they explain over the pairs (P(w | t)
  // times the code texts holding t): a table cut short keeps what matters most.
  const lists = new Map<number, [string, number, number][]>();
  for (const [key, p] of prob ?? []) {
    const c = Math.floor(key / W);
    if (c === NULL || p < settings.keepAbove) continue;
    const w = key % W;
    let list = lists.get(w);
    if (!list) lists.set(w, (list = []));
    list.push([codeTerms[c]!, p, p * codeDf[c]!]);
  }
  const words = new Map<string, TranslationEntry>();
  wordTerms.forEach((term, w) => {
    const list = (lists.get(w) ?? [])
      .sort((a, b) => b[2] - a[2] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
      .slice(0, MAX_ALTERNATIVES);
    if (list.length > 0)
      words.set(term, { terms: list.map(([t]) => t), probabilities: Float32Array.from(list, ([, p]) => p) });
  });
  return words;
}
