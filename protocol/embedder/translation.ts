import { Tokenizer } from "./tokens.js";

/**
 * The question-side translation model: for each word a question uses, the code terms that stand for
 * it and how likely each is to (IBM Model 1's P(question word | code term), learned from doc/code
 * pairs by `train/translation.ts`). "remove" finds code that says `delete`, "first" finds `head`.
 *
 * It runs on the client, never on the edge: the lexical channel's terms are keyed with the
 * workspace's key, so only the client can turn a code term into the id the index holds. The client
 * sends each question word with its keyed alternatives and their probabilities, and the edge scores
 * them as a translation language model over the same postings as BM25 (`HotIndex.queryTranslated`).
 *
 * The table file (`SXTM`, little-endian):
 *   magic "SXTM" | u32 format (1) | u32 words W | u32 code terms C | u32 entries E |
 *   u32 start[W + 1] | u32 codeTerm[E] | u16 probability[E] (× 65535)
 * Word w's entries are start[w]..start[w+1], the most weight first. The terms file lists the W words and
 * then the C code terms, one per line, as the lexical channel's tokenizer spells them.
 */
export const TRANSLATION_FORMAT = 1;
const MAGIC = 0x4d545853; // "SXTM" read as a little-endian u32

/**
 * How the edge scores a chunk d for question words w (a translation language model with Dirichlet
 * smoothing, over the chunks that hold at least one of the terms):
 *   Σ_w ln(SELF × c(w, d) + (1 − SELF) × Σ_t P(w | t) × c(t, d) + MU × P(w | workspace)) − |w| × ln(|d| + MU)
 * Chosen on the dev eval (`npm run eval:dev`); HELD-OUT.md's packages are kept out of that choice.
 */
export const TRANSLATION_SELF = 0.5;
export const TRANSLATION_MU = 20;
/** At most this many question words are translated, and this many alternatives each. */
export const MAX_TRANSLATED_WORDS = 32;
export const MAX_ALTERNATIVES = 128;
/** Longer terms are left out of a search request (a name that long is matched by the lexical channel). */
export const MAX_TRANSLATION_TERM_CHARS = 100;

export interface TranslationEntry {
  /** The code terms the word translates to, the most weight first, and P(word | term) for each. */
  terms: string[];
  probabilities: Float32Array;
}

export interface TranslationTable {
  /** Words the table translates. */
  size: number;
  lookup(word: string): TranslationEntry | undefined;
}

/** Every word's entry, as the trainer builds it and `serializeTranslation` writes it. */
export type TranslationEntries = ReadonlyMap<string, TranslationEntry>;

export interface TranslatedWord<T = string> {
  term: T;
  alternatives: T[];
  probabilities: number[];
}

export class TranslationError extends Error {
  override readonly name = "TranslationError";
}

export function serializeTranslation(all: TranslationEntries): { table: Uint8Array; terms: string } {
  const words = [...all.keys()];
  const codeIndex = new Map<string, number>();
  for (const { terms } of all.values()) for (const t of terms) if (!codeIndex.has(t)) codeIndex.set(t, codeIndex.size);
  const entries = words.reduce((n, w) => n + all.get(w)!.terms.length, 0);
  const bytes = new Uint8Array(20 + 4 * (words.length + 1) + 6 * entries);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, MAGIC, true);
  view.setUint32(4, TRANSLATION_FORMAT, true);
  view.setUint32(8, words.length, true);
  view.setUint32(12, codeIndex.size, true);
  view.setUint32(16, entries, true);
  const starts = 20;
  const codes = starts + 4 * (words.length + 1);
  const probs = codes + 4 * entries;
  let at = 0;
  words.forEach((w, i) => {
    view.setUint32(starts + 4 * i, at, true);
    const { terms, probabilities } = all.get(w)!;
    terms.forEach((t, k) => {
      view.setUint32(codes + 4 * at, codeIndex.get(t)!, true);
      view.setUint16(probs + 2 * at, Math.round(Math.min(1, Math.max(0, probabilities[k]!)) * 65535), true);
      at++;
    });
  });
  view.setUint32(starts + 4 * words.length, at, true);
  const names = [...words, ...codeIndex.keys()];
  if (names.some((t) => t === "" || t.includes("\n")))
    throw new TranslationError("A term is empty or holds a newline.");
  return { table: bytes, terms: names.join("\n") + "\n" };
}

/**
 * The table, read lazily: the word list is indexed at once, a word's entries are decoded when a
 * question asks for it (a search reads a few of 7,000 words, so a CLI start does not pay for all).
 */
export function parseTranslation(bytes: Uint8Array, termsText: string): TranslationTable {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.byteLength < 20 || view.getUint32(0, true) !== MAGIC)
    throw new TranslationError("Not a translation table.");
  if (view.getUint32(4, true) !== TRANSLATION_FORMAT)
    throw new TranslationError(`Translation table format ${view.getUint32(4, true)} is not ${TRANSLATION_FORMAT}.`);
  const [w, c, e] = [view.getUint32(8, true), view.getUint32(12, true), view.getUint32(16, true)];
  const starts = 20;
  const codes = starts + 4 * (w + 1);
  const probs = codes + 4 * e;
  if (bytes.byteLength !== probs + 2 * e)
    throw new TranslationError(
      `A translation table of ${w} words and ${e} entries cannot be ${bytes.byteLength} bytes.`,
    );
  const terms = termsText.split("\n");
  if (terms.at(-1) === "") terms.pop();
  if (terms.length !== w + c)
    throw new TranslationError(`The terms file has ${terms.length} terms; the table ${w + c}.`);
  const index = new Map<string, number>();
  for (let i = 0; i < w; i++) index.set(terms[i]!, i);
  const decoded = new Map<number, { terms: string[]; probabilities: Float32Array }>();
  return {
    size: w,
    lookup(word) {
      const i = index.get(word);
      if (i === undefined) return undefined;
      let entry = decoded.get(i);
      if (entry) return entry;
      const [from, to] = [view.getUint32(starts + 4 * i, true), view.getUint32(starts + 4 * (i + 1), true)];
      if (from > to || to > e) throw new TranslationError(`Word ${i}'s entries are out of range.`);
      const list: string[] = [];
      const p = new Float32Array(to - from);
      for (let k = from; k < to; k++) {
        const code = view.getUint32(codes + 4 * k, true);
        if (code >= c) throw new TranslationError(`Entry ${k} names code term ${code} of ${c}.`);
        list.push(terms[w + code]!);
        p[k - from] = view.getUint16(probs + 2 * k, true) / 65535;
      }
      decoded.set(i, (entry = { terms: list, probabilities: p }));
      return entry;
    },
  };
}

/** Entries built in memory (by the trainer), read as a parsed table is. */
export function tableOf(words: TranslationEntries): TranslationTable {
  return { size: words.size, lookup: (word) => words.get(word) };
}

/**
 * A question's distinct words, each with the code terms the table translates it to (at most
 * `MAX_ALTERNATIVES`, the most weight first; none for a word the table does not know, which then counts
 * by its own occurrences alone).
 */
export function translateQuestion(
  table: TranslationTable,
  text: string,
  tokenizer = new Tokenizer(),
): TranslatedWord[] {
  const fits = (term: string) => term.length <= MAX_TRANSLATION_TERM_CHARS;
  const words = [...new Set(tokenizer.tokenize(text).map((t) => t.term))].filter(fits).slice(0, MAX_TRANSLATED_WORDS);
  return words.map((term) => {
    const entry = table.lookup(term);
    const alternatives: string[] = [];
    const probabilities: number[] = [];
    for (let i = 0; entry && i < entry.terms.length && alternatives.length < MAX_ALTERNATIVES; i++) {
      if (!fits(entry.terms[i]!)) continue;
      alternatives.push(entry.terms[i]!);
      probabilities.push(entry.probabilities[i]!);
    }
    return { term, alternatives, probabilities };
  });
}
