import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";
import { languageOf } from "../client/index/languages.js";
import { DEFAULT_MAX_FILE_BYTES } from "../client/workspace/scanner.js";
import { DOC_STYLES } from "./doc-styles.js";

export interface SourceFile {
  /** Relative to the package root, with `/`. */
  path: string;
  text: string;
}

export interface Layout {
  roots: readonly string[];
  exclude: readonly string[];
}

const TEST_PATH =
  /(^|\/)(__tests__|__mocks__|tests?|specs?|fixtures?|benchmarks?|benches|examples?|testdata)\/|\.(test|spec)\.[^/]+$|_test\.(go|py)$|(^|\/)(test_[^/]*\.py|conftest\.py)$/;
const DECLARATIONS = /\.d\.[mc]?ts$/;
const MINIFIED_NAME = /[.-]min\.[mc]?js$/;

/** Minified or generated: a very long line, or long lines throughout. */
function looksMinified(text: string): boolean {
  const lines = text.split("\n");
  return lines.some((line) => line.length > 1000) || text.length / lines.length > 250;
}

/** Every regular file below `dir`, relative and with `/`, in a stable order. */
export function listFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)).split(sep).join("/"))
    .sort();
}

/**
 * The sources of a package worth searching, in the languages the eval reads docs of (JavaScript,
 * TypeScript, Python, Go, Rust): under its source roots,
 * without type declarations, tests, minified files or files the scanner would skip for size. Files
 * with identical content (async ships `every.js` and `all.js` as two copies) are kept once, by the
 * first path, since a query could not tell them apart.
 */
export function selectSources(dir: string, layout: Layout): SourceFile[] {
  const seen = new Set<string>();
  const files: SourceFile[] = [];
  for (const path of listFiles(dir)) {
    const language = languageOf(path);
    if (!language || !DOC_STYLES[language]) continue;
    if (!layout.roots.some((root) => path.startsWith(root))) continue;
    if (layout.exclude.some((prefix) => path.startsWith(prefix))) continue;
    if (DECLARATIONS.test(path) || MINIFIED_NAME.test(path) || TEST_PATH.test(path)) continue;
    if (statSync(join(dir, path)).size > DEFAULT_MAX_FILE_BYTES) continue;
    const text = readFileSync(join(dir, path), "utf8");
    if (looksMinified(text)) continue;
    const digest = createHash("sha256").update(text).digest("hex");
    if (seen.has(digest)) continue;
    seen.add(digest);
    files.push({ path, text });
  }
  return files;
}
