import type { FetchedPackage } from "./fetch.js";
import { pairKey } from "./fingerprint.js";
import type { MinedPackage } from "./mine.js";
import { prng, shuffle, type Pair } from "./trainer.js";

/** The shuffle's seed: fixed, so that the same packages always give the same file, byte for byte. */
export const SHUFFLE_SEED = 26;

export interface DataStats {
  packages: {
    fetched: number;
    failed: { name: string; reason: string }[];
    excludedByName: string[];
    withPairs: number;
    withoutPairs: number;
  };
  heldOut: { sources: unknown[]; failed: string[] };
  droppedByContent: {
    files: number;
    pairs: number;
    /** Packages that lost files to the content check, most first, with one reason each. */
    packages: { name: string; files: number; pairs: number; example: string }[];
  };
  /** Files inside otherwise trainable packages left out by path (vendored held-out or dev-eval code). */
  excludedPaths: { files: number; packages: string[] };
  pairs: {
    total: number;
    duplicates: number;
    byLanguage: Record<string, number>;
    bySource: { npm: number; debian: number };
    topPackages: { name: string; pairs: number }[];
  };
  seconds: { fetch: number; fingerprint: number; mine: number; total: number };
}

export interface AssembleInput {
  fetched: readonly FetchedPackage[];
  mined: readonly (MinedPackage | undefined)[];
  failed: DataStats["packages"]["failed"];
  excludedByName: string[];
  heldOut: DataStats["heldOut"];
  seconds: DataStats["seconds"];
}

/** The language a pair is counted under: TypeScript and TSX are JavaScript's ecosystem, npm. */
const group = (language: string | undefined) =>
  language === "typescript" || language === "tsx" ? "javascript" : (language ?? "unknown");

/**
 * The pairs of every package, in package order, with exact duplicates (same question and code,
 * whitespace and case aside) kept once, then shuffled with a fixed seed; and the run's counts.
 */
export function assemble(input: AssembleInput): { pairs: Pair[]; lines: string[]; stats: DataStats } {
  const seen = new Set<string>();
  const pairs: Pair[] = [];
  let duplicates = 0;
  const perPackage = new Map<string, number>();
  const bySource = { npm: 0, debian: 0 };
  input.mined.forEach((mined, i) => {
    if (!mined) return;
    const source = input.fetched[i]?.roots ? "debian" : "npm";
    for (const pair of mined.pairs) {
      const key = pairKey(pair.query, pair.code);
      if (seen.has(key)) {
        duplicates++;
        continue;
      }
      seen.add(key);
      pairs.push(pair);
      bySource[source]++;
      perPackage.set(mined.name, (perPackage.get(mined.name) ?? 0) + 1);
    }
  });
  shuffle(pairs, prng(SHUFFLE_SEED));
  const byLanguage: Record<string, number> = {};
  for (const p of pairs) byLanguage[group(p.language)] = (byLanguage[group(p.language)] ?? 0) + 1;
  const mined = input.mined.filter((m): m is MinedPackage => m !== undefined);
  const contaminated = mined
    .filter((m) => m.contaminatedFiles.length > 0 || m.contaminatedPairs > 0)
    .map((m) => ({
      name: m.name,
      files: m.contaminatedFiles.length,
      pairs: m.contaminatedPairs,
      example: m.contaminatedFiles[0] ? `${m.contaminatedFiles[0].path}: ${m.contaminatedFiles[0].reason}` : "",
    }))
    .sort((a, b) => b.files - a.files || b.pairs - a.pairs || a.name.localeCompare(b.name));
  const stats: DataStats = {
    packages: {
      fetched: input.fetched.length,
      failed: input.failed,
      excludedByName: input.excludedByName,
      withPairs: perPackage.size,
      withoutPairs: input.fetched.length - perPackage.size,
    },
    heldOut: input.heldOut,
    droppedByContent: {
      files: contaminated.reduce((n, c) => n + c.files, 0),
      pairs: contaminated.reduce((n, c) => n + c.pairs, 0),
      packages: contaminated,
    },
    excludedPaths: {
      files: mined.reduce((n, m) => n + m.excludedFiles.length, 0),
      packages: mined.filter((m) => m.excludedFiles.length > 0).map((m) => m.name),
    },
    pairs: {
      total: pairs.length,
      duplicates,
      byLanguage,
      bySource,
      topPackages: [...perPackage]
        .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
        .slice(0, 20)
        .map(([name, n]) => ({ name, pairs: n })),
    },
    seconds: input.seconds,
  };
  const lines = pairs.map(
    (p) => JSON.stringify({ query: p.query, code: p.code, language: p.language, package: p.package }) + "\n",
  );
  return { pairs, lines, stats };
}
