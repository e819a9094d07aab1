import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { guessLayout } from "../eval/packages.js";
import { listFiles, selectSources, type Layout, type SourceFile } from "../eval/select.js";
import { isExcludedFromTraining } from "./exclusions.js";
import { extractFile } from "./extract.js";
import { codeKey, contamination, normalizeWords, queryKey, type Fingerprints } from "./fingerprint.js";
import type { FetchedPackage } from "./fetch.js";
import type { Pair } from "./trainer.js";

/** Larger files are generated tables or bundles, whatever their name says. */
export const MAX_FILE_BYTES = 512 * 1024;
/** Per package, so that a generated SDK with thousands of documented methods does not dominate. */
export const MAX_PAIRS_PER_PACKAGE = 400;
/** Per package, to bound the parsing time a single huge package can take. */
export const MAX_FILES_PER_PACKAGE = 1_500;

export interface MinedPackage {
  name: string;
  pairs: Pair[];
  files: number;
  /** Files left out by path: held-out or dev-eval code vendored inside the package. */
  excludedFiles: string[];
  /** Files left out because their content is a held-out package's, and why. */
  contaminatedFiles: { path: string; reason: string }[];
  /** Pairs whose question or code is a held-out one's. */
  contaminatedPairs: number;
}

/** `count` items chosen evenly through `items`, in their order. */
export function evenly<T>(items: readonly T[], count: number): T[] {
  if (items.length <= count) return [...items];
  return Array.from({ length: count }, (_, i) => items[Math.floor((i * items.length) / count)]!);
}

const DECLARATIONS = /\.d\.[mc]?ts$/;
const TEST_PATH = /(^|\/)(__tests__|__mocks__|tests?|specs?|fixtures?|examples?)\//;
/** Builds that bundle or minify a package (and usually its dependencies) into one file. */
const BUNDLE = /(^|\/)(min|umd|bundles?|vendor|browser|node_modules)\//;

/**
 * The source files of a package as the eval selects them (`selectSources`: no tests, builds,
 * minified files or duplicates), without files over MAX_FILE_BYTES and without excluded paths. A
 * package of type declarations only (`@types/*`) has no other source: its `.d.ts` files are read.
 */
export function trainingSources(pkg: Pick<FetchedPackage, "dir" | "roots">): {
  sources: SourceFile[];
  excluded: string[];
} {
  const paths = listFiles(pkg.dir);
  const layout: Layout = pkg.roots ? { roots: pkg.roots, exclude: [] } : guessLayout(paths);
  const excluded = paths.filter((p) => isExcludedFromTraining(p));
  const keep = (p: string) => !isExcludedFromTraining(p) && statSync(join(pkg.dir, p)).size <= MAX_FILE_BYTES;
  let sources = selectSources(pkg.dir, layout).filter((s) => keep(s.path));
  // Many npm packages ship only their build (`dist/`, `build/`), which keeps the JSDoc of the
  // source it was compiled from; bundles and minified builds are still left out.
  if (sources.length === 0 && !pkg.roots)
    sources = selectSources(pkg.dir, { roots: [""], exclude: [] }).filter((s) => keep(s.path) && !BUNDLE.test(s.path));
  if (sources.length === 0)
    sources = paths
      .filter((p) => DECLARATIONS.test(p) && !TEST_PATH.test(p) && keep(p))
      .map((path) => ({ path, text: readFileSync(join(pkg.dir, path), "utf8") }));
  return { sources: evenly(sources, MAX_FILES_PER_PACKAGE), excluded };
}

/**
 * The (question, code) pairs of one package: each documented definition with a question, its code
 * with every comment gone. A file sharing a held-out doc sentence or enough of its code is dropped
 * whole; a pair whose question or code is a held-out one's is dropped; a pair whose question is
 * written out in its code is dropped as the eval drops it (it would teach copying, not search), and
 * a question asked twice in a package is kept once.
 */
export async function minePackage(
  pkg: Pick<FetchedPackage, "name" | "dir" | "roots">,
  held: Fingerprints,
  maxPairs = MAX_PAIRS_PER_PACKAGE,
): Promise<MinedPackage> {
  const { sources, excluded } = trainingSources(pkg);
  const pairs: Pair[] = [];
  const contaminatedFiles: MinedPackage["contaminatedFiles"] = [];
  let contaminatedPairs = 0;
  const questions = new Set<string>();
  for (const source of sources) {
    const file = await extractFile(source.path, source.text);
    if (!file) continue;
    const reason = contamination(file, held);
    if (reason) {
      contaminatedFiles.push({ path: source.path, reason });
      continue;
    }
    for (const { query, code } of file.definitions) {
      if (!query || !code) continue;
      if (held.queries.has(queryKey(query)) || held.codes.has(codeKey(code))) {
        contaminatedPairs++;
        continue;
      }
      if (normalizeWords(code).includes(normalizeWords(query))) continue;
      // One question twice in a package (an ESM and a CommonJS build of the same function) would
      // make its two answers each other's negatives in a batch of that package.
      if (questions.has(queryKey(query))) continue;
      questions.add(queryKey(query));
      pairs.push({ query, code, language: file.language, package: pkg.name });
    }
  }
  return {
    name: pkg.name,
    pairs: evenly(pairs, maxPairs),
    files: sources.length,
    excludedFiles: excluded,
    contaminatedFiles,
    contaminatedPairs,
  };
}
