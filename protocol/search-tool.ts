/**
 * `codebase_search` as a tool: its arguments and what a model is told about it. One definition
 * serves both places an agent meets it: `sextant mcp` (an editor's agent, over MCP) and the cloud
 * agent's own tools (`protocol/agents/tools.ts`).
 */
import { z } from "zod";
import { MAX_QUERY_CHARS } from "./sync.js";

/** The most hits one search returns. */
export const CODEBASE_SEARCH_MAX_TOP_K = 50;

export const CodebaseSearchArgs = z.object({
  query: z
    .string()
    .trim()
    .min(1)
    .max(MAX_QUERY_CHARS)
    .describe(
      'What you are looking for: a question or description ("where are API keys revoked"), or identifiers ("parseToken WorkspaceSecret").',
    ),
  topK: z
    .number()
    .int()
    .min(1)
    .max(CODEBASE_SEARCH_MAX_TOP_K)
    .default(10)
    .describe(`How many results to return (1 to ${CODEBASE_SEARCH_MAX_TOP_K}).`),
  path: z
    .string()
    .max(4096)
    .optional()
    .describe('Only search files below this directory, relative to the root (e.g. "src/server").'),
});
export type CodebaseSearchArgs = z.input<typeof CodebaseSearchArgs>;

/** What the tool does and when to use it; `where` names the code searched ("the indexed codebase at /src"). */
export const codebaseSearchDescription = (where: string) =>
  `Semantic search over ${where}. Use it to find where something is implemented, defined ` +
  'or handled when you do not know the file or the exact words: ask in natural language ("where are expired ' +
  'sessions cleaned up") or give identifiers ("RateLimiter refill"). Returns the best-matching chunks, best ' +
  "first, as paths relative to the root with line ranges, scores and the lines as they are now; a hit " +
  "marked stale (changed since indexed) comes from a file edited after the last sync, so re-read it. For an exact " +
  "string, grep is faster and complete.";
