/**
 * Search hits as the text an agent reads: `sextant mcp`'s codebase_search and the cloud agent's
 * answer with the same blocks (a head line with path, lines, score and flags, then the snippet fenced).
 */
import { copiesLine } from "./collapse.js";
import type { LocalHit } from "./hits.js";

/** A fence longer than any run of backticks in the snippet, so code containing ``` cannot break out of it. */
export function fenced(snippet: string): string {
  const longest = Math.max(0, ...(snippet.match(/`+/g) ?? []).map((run) => run.length));
  const fence = "`".repeat(Math.max(3, longest + 1));
  return `${fence}\n${snippet}\n${fence}`;
}

/** `hits` found under `root` (a directory, or a name for the tree), optionally `within` a directory of it. */
export function renderHits(root: string, hits: LocalHit[], within: string | undefined): string {
  const scope = within ? ` below ${within}/` : "";
  if (hits.length === 0) return `No results${scope} in ${root}.`;
  const blocks = hits.map((hit) => {
    const flag = hit.stale ? "  (changed since indexed)" : "";
    const from = hit.snippetLine > hit.startLine ? `  (shown from line ${hit.snippetLine})` : "";
    const copies = hit.copies.length > 0 ? `\n(${copiesLine(hit.copies)})` : "";
    const head = `${hit.path}:${hit.startLine}-${hit.endLine}  score ${hit.score.toFixed(3)}${flag}${from}${copies}`;
    return hit.snippet === "" ? `${head}\n(these lines are no longer in the file)` : `${head}\n${fenced(hit.snippet)}`;
  });
  const count = `${hits.length} result${hits.length === 1 ? "" : "s"}`;
  return [`${count}${scope} in ${root} (paths relative to it):`, ...blocks].join("\n\n");
}
