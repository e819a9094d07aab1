import { Tokenizer } from "../../protocol/embedder/tokens.js";

/** The most of a chunk a result shows: a hit is a pointer into the file, not a copy of it. */
export const SNIPPET_MAX_LINES = 20;
export const SNIPPET_MAX_CHARS = 2000;
/** Ends a snippet that was cut short, on a line of its own. */
export const ELLIPSIS = "…";

/**
 * At most SNIPPET_MAX_LINES lines and SNIPPET_MAX_CHARS characters of `text`, ending in a line of
 * ELLIPSIS when anything was left out. One 47 KB line of a source map otherwise became a 47 KB answer.
 */
export function capSnippet(text: string): string {
  const lines = text.split("\n");
  let kept = lines.slice(0, SNIPPET_MAX_LINES).join("\n");
  if (kept.length > SNIPPET_MAX_CHARS) kept = kept.slice(0, SNIPPET_MAX_CHARS);
  return kept.length < text.length ? `${kept}\n${ELLIPSIS}` : text;
}

/** A line that declares something, in the languages the chunker knows: what a reader looks for first. */
const DEFINITION =
  /^\s*(?:(?:export|default|declare|abstract|async|public|private|protected|static|final|pub(?:\([^)]*\))?)\s+)*(?:function\b|class\b|const\b|let\b|var\b|def\b|fn\b|func\b|interface\b|type\b|struct\b|enum\b|trait\b|impl\b|module\b|namespace\b)/;

const tokenizer = new Tokenizer();

/**
 * The 0-based line of `text` a snippet should start at: the first line holding the most of the
 * query's words (as the lexical channel splits and stems them), else the first definition, else
 * the first line. A chunk often opens with a licence header or a JSDoc @param list, and its first
 * lines alone made a right hit look like a miss.
 */
export function focusLine(text: string, query: string): number {
  const lines = text.split("\n");
  const wanted = new Set(tokenizer.tokenize(query).map((t) => t.term));
  let best = -1;
  let most = 0;
  if (wanted.size > 0) {
    lines.forEach((line, i) => {
      const found = new Set(tokenizer.tokenize(line).flatMap((t) => (wanted.has(t.term) ? [t.term] : []))).size;
      if (found > most) [best, most] = [i, found];
    });
  }
  if (best >= 0) return best;
  return Math.max(
    0,
    lines.findIndex((line) => DEFINITION.test(line)),
  );
}
