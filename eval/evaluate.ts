import { Bm25Index } from "./bm25.js";
import { buildCorpus, type EvalQuery } from "./corpus.js";
import { indexDirectory, indexedChunks, searchSextant, type EdgeSession } from "./edge.js";
import { firstHit, score, type ScoredResult } from "./metrics.js";
import type { CodebaseResult } from "./report.js";
import { selectSources, type Layout } from "./select.js";

/** Both systems look at this many results, as an editor's agent would. */
export const TOP_K = 10;
/** Searches in flight at once against the local edge. */
const CONCURRENCY = 4;

export interface QueryResult extends EvalQuery {
  sextant: { rank: number | null; results: ScoredResult[] };
  bm25: { rank: number | null; results: ScoredResult[] };
  /** BM25 with each chunk's file path in its text: the words Sextant's keyed path terms give it. */
  bm25Path: { rank: number | null; results: ScoredResult[] };
  /** BM25 with paths whose identifiers also count as their words: the chunks as a code-aware index sees them. */
  bm25Split: { rank: number | null; results: ScoredResult[] };
}

export interface CodebaseReport extends CodebaseResult {
  /** Documented definitions found, and why some gave no query. */
  documented: { queries: number; tooShort: number; verbatim: number; notIndexed: number };
  queries: QueryResult[];
}

/** `limit` queries spread evenly over the codebase (they come in file order), or all of them. */
export function spread<T>(items: readonly T[], limit?: number): T[] {
  if (limit === undefined || limit >= items.length) return [...items];
  return Array.from({ length: limit }, (_, i) => items[Math.floor((i * items.length) / limit)]!);
}

async function mapPool<T, R>(items: readonly T[], width: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  return out;
}

/**
 * One codebase, end to end: its comment-free copy written to `indexedRoot`, indexed through the
 * edge, every query asked of Sextant and of BM25 over the very chunks the edge received.
 */
export async function evaluateCodebase(
  session: EdgeSession,
  codebase: { label: string; dir: string; layout: Layout },
  indexedRoot: string,
  options: { limit?: number; log?: (line: string) => void } = {},
): Promise<CodebaseReport> {
  const log = options.log ?? (() => {});
  const corpus = await buildCorpus(selectSources(codebase.dir, codebase.layout), indexedRoot);
  log(`${codebase.label}: ${corpus.files} files, ${corpus.queries.length} queries; indexing through the edge`);
  const { ws, report } = await indexDirectory(session.sextant, indexedRoot);
  const chunks = await indexedChunks(ws);
  if (chunks.length !== report.sync.chunks)
    throw new Error(`${codebase.label}: rebuilt ${chunks.length} chunks, but the sync sent ${report.sync.chunks}`);
  const indexed = new Set(chunks.map((c) => c.path));
  const answerable = corpus.queries
    .map((q) => ({ ...q, targets: q.targets.filter((t) => indexed.has(t.path)) }))
    .filter((q) => q.targets.length > 0);
  const queries = spread(answerable, options.limit);
  log(`${codebase.label}: ${chunks.length} chunks indexed; asking ${queries.length} queries`);

  const bm25 = new Bm25Index(chunks.map((c) => c.text));
  const bm25Path = new Bm25Index(chunks.map((c) => `${c.path}\n${c.text}`));
  const bm25Split = new Bm25Index(
    chunks.map((c) => `${c.path}\n${c.text}`),
    { splitIdentifiers: true },
  );
  const ranked = (index: Bm25Index, text: string) =>
    index.search(text, TOP_K).map(({ doc, score }) => {
      const { path, startLine, endLine } = chunks[doc]!;
      return { path, startLine, endLine, score };
    });
  const results = await mapPool(queries, CONCURRENCY, async (query): Promise<QueryResult> => {
    const fromSextant = await searchSextant(session.sextant, ws, query.text, TOP_K);
    const fromBm25 = ranked(bm25, query.text);
    const fromBm25Path = ranked(bm25Path, query.text);
    const fromBm25Split = ranked(bm25Split, query.text);
    return {
      ...query,
      sextant: { rank: firstHit(fromSextant, query.targets, TOP_K), results: fromSextant },
      bm25: { rank: firstHit(fromBm25, query.targets, TOP_K), results: fromBm25 },
      bm25Path: { rank: firstHit(fromBm25Path, query.targets, TOP_K), results: fromBm25Path },
      bm25Split: { rank: firstHit(fromBm25Split, query.targets, TOP_K), results: fromBm25Split },
    };
  });
  return {
    label: codebase.label,
    files: report.files,
    chunks: chunks.length,
    sextant: score(results.map((r) => r.sextant.rank)),
    bm25: score(results.map((r) => r.bm25.rank)),
    bm25Path: score(results.map((r) => r.bm25Path.rank)),
    bm25Split: score(results.map((r) => r.bm25Split.rank)),
    documented: {
      queries: corpus.queries.length,
      tooShort: corpus.tooShort,
      verbatim: corpus.verbatim,
      notIndexed: corpus.queries.length - answerable.length,
    },
    queries: results,
  };
}
