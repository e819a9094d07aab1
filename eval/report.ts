import type { Scores } from "./metrics.js";

export interface CodebaseResult {
  /** `name@version`, or the directory's name for `--from`. */
  label: string;
  files: number;
  chunks: number;
  sextant: Scores;
  bm25: Scores;
  /** BM25 that also sees each chunk's file path: a second baseline, beside the one the bar is set on. */
  bm25Path: Scores;
  /** BM25 with paths that also splits identifiers into their words (camelCase, digits): the third baseline. */
  bm25Split: Scores;
}

/** Sextant's MRR@10 over BM25's; null when BM25 answered nothing (a ratio without a meaning). */
export function mrrRatio(result: Pick<CodebaseResult, "sextant" | "bm25">): number | null {
  return result.bm25.mrrAt10 > 0 ? result.sextant.mrrAt10 / result.bm25.mrrAt10 : null;
}

/** Sextant's MRR@10 over the identifier-split BM25's (paths included): the ratio the acceptance bars are set on. */
export function splitRatio(result: Pick<CodebaseResult, "sextant" | "bm25Split">): number | null {
  return result.bm25Split.mrrAt10 > 0 ? result.sextant.mrrAt10 / result.bm25Split.mrrAt10 : null;
}

const f3 = (x: number) => x.toFixed(3);
const SCORE_COLUMNS = ["R@1", "R@5", "R@10", "MRR@10"] as const;
const scoreCells = (s: Scores) => [f3(s.recallAt1), f3(s.recallAt5), f3(s.recallAt10), f3(s.mrrAt10)];

/** A plain-text table, the first column left-aligned and the numbers right-aligned. */
function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  return rows
    .map((row) => row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join("  "))
    .join("\n");
}

/** The scoreboard: one row per codebase and one over all queries. */
export function formatTable(results: readonly CodebaseResult[], overall: CodebaseResult): string {
  const header = [
    "codebase",
    "queries",
    "files",
    "chunks",
    ...SCORE_COLUMNS.map((c) => `Sextant ${c}`),
    ...SCORE_COLUMNS.map((c) => `BM25 ${c}`),
    "MRR ratio",
    "BM25+path MRR@10",
    "ratio",
    "BM25+path+split MRR@10",
    "ratio",
  ];
  const against = (sextant: number, baseline: number) =>
    baseline > 0 ? `${(Math.floor((sextant / baseline) * 100) / 100).toFixed(2)}x` : "n/a";
  const row = (r: CodebaseResult) => {
    const ratio = mrrRatio(r);
    return [
      r.label,
      String(r.sextant.queries),
      String(r.files),
      String(r.chunks),
      ...scoreCells(r.sextant),
      ...scoreCells(r.bm25),
      // Rounded down, so a ratio just under the bar never prints as reaching it.
      ratio === null ? "n/a" : `${(Math.floor(ratio * 100) / 100).toFixed(2)}x`,
      f3(r.bm25Path.mrrAt10),
      against(r.sextant.mrrAt10, r.bm25Path.mrrAt10),
      f3(r.bm25Split.mrrAt10),
      against(r.sextant.mrrAt10, r.bm25Split.mrrAt10),
    ];
  };
  return table([header, ...results.map(row), ...(results.length > 1 ? [row(overall)] : [])]);
}
