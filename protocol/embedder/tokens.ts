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

export function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let defining = false;
  for (const match of text.matchAll(/[A-Za-z_$][A-Za-z0-9_$]*/g)) {
    const word = match[0];
    const lower = word.toLowerCase();
    const weight = defining ? 2 : 1;
    defining = DEFINES.has(lower);
    if (STOP.has(lower)) continue;
    const parts = splitIdentifier(word);
    for (const part of parts) if (!STOP.has(part)) tokens.push({ term: stem(part), weight });
    if (parts.length > 1) tokens.push({ term: `#${lower}`, weight });
  }
  return tokens;
}
