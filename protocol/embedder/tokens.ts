/**
 * Code-aware tokens: identifiers split into their words (camelCase, PascalCase, snake_case,
 * kebab-case, digits), lower-cased and lightly stemmed, with stop words and keywords removed. The
 * whole identifier is kept too (as `#name`), so an exact name still outranks its parts.
 */
const STOP = new Set(
  (
    "a an and are as at be by for from has have in is it its of on or that the this to was were will with " +
    "const let var function return if else elif while do switch case break continue import export default " +
    "class def fn func public private protected static void new true false null nil none undefined self " +
    "async await try catch except finally throw throws raise type interface struct impl pub use package " +
    "mod crate int str bool string number any get set"
  ).split(" "),
);
const DEFINES = new Set([
  "function",
  "class",
  "def",
  "fn",
  "func",
  "interface",
  "type",
  "struct",
  "enum",
  "trait",
  "impl",
]);

export interface Token {
  term: string;
  /** Weight multiplier: names being defined count double. */
  weight: number;
}

/** A light suffix stemmer: enough to meet "parsing" with "parse" and "files" with "file". */
export function stem(word: string): string {
  if (word.length <= 3) return word;
  const rules: [string, string][] = [
    ["ational", "ate"],
    ["ization", "ize"],
    ["ations", "ate"],
    ["ation", "ate"],
    ["ness", ""],
    ["ments", ""],
    ["ment", ""],
    ["ings", ""],
    ["ing", ""],
    ["ies", "y"],
    ["ied", "y"],
    ["ers", ""],
    ["er", ""],
    ["ed", ""],
    ["es", ""],
    ["ly", ""],
    ["s", ""],
  ];
  let stemmed = word;
  for (const [suffix, replacement] of rules) {
    if (word.endsWith(suffix) && word.length - suffix.length >= 3 && !(suffix === "s" && word.endsWith("ss"))) {
      stemmed = word.slice(0, word.length - suffix.length) + replacement;
      break;
    }
  }
  // A final silent e goes too, so that "parse", "parses" and "parsing" meet.
  return stemmed.length >= 4 && stemmed.endsWith("e") ? stemmed.slice(0, -1) : stemmed;
}

export function splitIdentifier(identifier: string): string[] {
  return identifier
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
    .replace(/([A-Za-z])([0-9])/g, "$1 $2")
    .split(/[\s_$\-]+/)
    .map((part) => part.toLowerCase())
    .filter((part) => part.length >= 2);
}

const isStart = (c: number) => (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95 || c === 36;
const isPart = (c: number) => isStart(c) || (c >= 48 && c <= 57);

/**
 * Calls `fn` with each identifier-like word of `text` in order: [A-Za-z_$][A-Za-z0-9_$]*, found by
 * character code, without a match object per word. Both tokenizers (the lexical channel's and the
 * model's) read text through it.
 */
export function forEachWord(text: string, fn: (word: string) => void): void {
  const n = text.length;
  for (let i = 0; i < n; ) {
    if (!isStart(text.charCodeAt(i))) {
      i++;
      continue;
    }
    let end = i + 1;
    while (end < n && isPart(text.charCodeAt(end))) end++;
    fn(text.slice(i, end));
    i = end;
  }
}

/**
 * Tokenizes many texts, remembering how each distinct word splits and stems: a commit's chunks
 * repeat the same identifiers thousands of times. Scoped to one batch (one request), so no text
 * outlives it.
 */
export class Tokenizer {
  readonly #words = new Map<string, { terms: string[]; defines: boolean; stop: boolean }>();

  tokenize(text: string): Token[] {
    const tokens: Token[] = [];
    let defining = false;
    forEachWord(text, (word) => {
      let known = this.#words.get(word);
      if (!known) {
        const lower = word.toLowerCase();
        const parts = splitIdentifier(word);
        const terms = parts.filter((part) => !STOP.has(part)).map(stem);
        if (parts.length > 1) terms.push(`#${lower}`);
        known = { terms, defines: DEFINES.has(lower), stop: STOP.has(lower) };
        if (this.#words.size < 100_000) this.#words.set(word, known);
      }
      const weight = defining ? 2 : 1;
      defining = known.defines;
      if (known.stop) return;
      for (const term of known.terms) tokens.push({ term, weight });
    });
    return tokens;
  }
}

export function tokenize(text: string): Token[] {
  return new Tokenizer().tokenize(text);
}
