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
