import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Bm25Index, analyze } from "../../eval/bm25.js";
import { queryFromDoc } from "../../eval/doc-text.js";
import { listFiles } from "../../eval/select.js";
import { makeTree } from "../support/fixture.js";

const ROOT = new URL("../../", import.meta.url).pathname;
const TSX = createRequire(import.meta.url).resolve("tsx/cli");

/** A tiny library: documented functions, a class, a CommonJS assignment, a Python docstring, comments to strip. */
const LIBRARY = {
  "src/geometry.ts": `import { hypot } from "./math";

export interface Point { x: number; y: number }

/** Computes the area enclosed by a circle of the given radius. */
export function circleArea(radius: number): number {
  return Math.PI * radius ** 2; // zebra: a line comment that must not reach the index
}

/**
 * Measures the straight-line distance between two points on a plane.
 *
 * @param a The first point.
 * @example distance({ x: 0, y: 0 }, { x: 3, y: 4 }) // 5
 */
export function distance(a: Point, b: Point): number {
  return hypot(b.x - a.x, b.y - a.y);
}

/** Adds. */
export const add = (a: number, b: number) => a + b;
`,
  "src/math.ts": `/* tiger: a block comment */
/** Square root of the sum of squares of its arguments, without overflow. */
export function hypot(...values: number[]): number {
  const largest = Math.max(...values.map(Math.abs));
  if (largest === 0) return 0;
  return largest * Math.sqrt(values.reduce((sum, v) => sum + (v / largest) ** 2, 0));
}
`,
  "src/text.js": `/**
 * Turns a title into a lowercase identifier suitable for web addresses, joined by dashes.
 */
var slugify = function slugify(title) {
  return title.toLowerCase().trim().replace(/[^a-z0-9]+/g, "-");
};

export const HELP = "Reverses the order of the words in a sentence.";

/** Reverses the order of the words in a sentence. */
exports.reverseWords = function reverseWords(sentence) {
  return sentence.split(" ").reverse().join(" ");
};
`,
  "src/stats.py": `def median(values):
    """Find the middle value of a list of numbers once they are sorted.

    :param values: a non-empty list
    """
    ordered = sorted(values)  # lynx: a Python comment to strip
    return ordered[int(len(ordered) / 2)]
`,
  "src/queue.ts": `/** A first-in, first-out queue of pending jobs with a fixed capacity. */
export class JobQueue<T> {
  private items: T[] = [];
  constructor(private readonly capacity: number) {}

  /** Puts a job at the back of the queue, refusing it once the queue is full. */
  enqueue(job: T): boolean {
    if (this.items.length >= this.capacity) return false;
    this.items.push(job);
    return true;
  }

  /** Takes the oldest job off the front of the queue, if there is one. */
  dequeue(): T | undefined {
    return this.items.shift();
  }
}
`,
};

function runEval(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [TSX, "eval/run.ts", ...args], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.once("error", reject);
    child.once("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("npm run eval (smoke)", () => {
  const library = makeTree(LIBRARY, "sextant-eval-lib-");
  const workdir = mkdtempSync(join(tmpdir(), "sextant-eval-work-"));
  afterAll(() => {
    for (const dir of [library, workdir]) rmSync(dir, { recursive: true, force: true });
  });

  it("evaluates a local codebase through the edge and prints Sextant next to BM25", async () => {
    const json = join(workdir, "results.json");
    const run = await runEval(["--from", library, "--json", json, "--workdir", workdir]);
    expect(run.code, run.stderr).toBe(0);

    expect(run.stdout).toContain("Command: npx tsx eval/run.ts --from");
    const header = run.stdout.split("\n").find((line) => line.startsWith("codebase"));
    expect(header).toMatch(
      /Sextant MRR@10.*BM25 R@1.*BM25 MRR@10.*MRR ratio.*BM25\+path MRR@10.*BM25\+path\+split MRR@10/,
    );
    const row = run.stdout.split("\n").find((line) => line.startsWith(basename(library)));

    const results = JSON.parse(readFileSync(json, "utf8"));
    const [codebase] = results.codebases;
    // Its label, queries, files and chunks, as the JSON has them.
    expect(row?.split(/\s+/).slice(0, 4)).toEqual([basename(library), "8", "5", String(codebase.chunks)]);
    expect(codebase.files).toBe(5);
    expect(codebase.chunks).toBeGreaterThan(0);
    expect(codebase.documented).toMatchObject({ tooShort: 1, verbatim: 1 });
    expect(codebase.queries.length).toBe(8);
    for (const system of [codebase.sextant, codebase.bm25]) {
      expect(system.queries).toBe(8);
      for (const key of ["recallAt1", "recallAt5", "recallAt10", "mrrAt10"]) {
        expect(system[key]).toBeGreaterThanOrEqual(0);
        expect(system[key]).toBeLessThanOrEqual(1);
      }
      expect(system.recallAt1).toBeLessThanOrEqual(system.recallAt5);
      expect(system.recallAt5).toBeLessThanOrEqual(system.recallAt10);
    }
    // Both systems answered: a tiny library leaves little room to miss.
    expect(codebase.queries.every((q: { bm25: { results: unknown[] } }) => q.bm25.results.length > 0)).toBe(true);
    expect(codebase.sextant.recallAt10).toBeGreaterThan(0.5);
    expect(codebase.bm25.recallAt10).toBeGreaterThan(0.5);

    const indexedDir = join(workdir, "indexed-0", basename(library));
    const indexed = listFiles(indexedDir).map((path) => readFileSync(join(indexedDir, path), "utf8"));
    expect(indexed).toHaveLength(5);
    const everything = indexed.join("\n");
    for (const comment of [
      "/*",
      "//",
      "zebra",
      "tiger",
      "straight-line",
      "@param",
      "first-in",
      "oldest job",
      '"""',
      "lynx",
    ])
      expect(everything).not.toContain(comment);
    expect(everything).toContain("export function distance(a: Point, b: Point): number {");
    expect(everything).toContain("def median(values):\n    ...\n");
    // Lines are kept, so a definition's range is the same in the indexed copy.
    expect(indexed[0]!.split("\n").length).toBe(LIBRARY["src/geometry.ts"].split("\n").length);
  }, 120_000);

  it("scores BM25 by Lucene's formula over lower-cased alphanumeric words without stop words", () => {
    expect(analyze("The parseURL() of a file_name, 2x")).toEqual(["parseurl", "file", "name", "2x"]);
    const docs = ["apple banana apple", "banana cherry", "cherry date elderberry fig"];
    const index = new Bm25Index(docs);
    const [top] = index.search("apple", 3);
    // N = 3, n = 1, tf = 2, |d| = 3, avgdl = 3.
    const idf = Math.log(1 + (3 - 1 + 0.5) / (1 + 0.5));
    expect(top!.doc).toBe(0);
    expect(top!.score).toBeCloseTo((idf * 2 * 2.2) / (2 + 1.2), 10);
    expect(index.search("banana", 3).map((s) => s.doc)).toEqual([1, 0]);
    expect(index.search("the of", 3)).toEqual([]);
  });

  it("splits identifiers into their words for the code-aware baseline, keeping the whole identifier", () => {
    expect(analyze("The parseURL() of a file_name, 2x", { splitIdentifiers: true })).toEqual([
      "parseurl",
      "parse",
      "url",
      "file",
      "name",
      "2x",
    ]);
    const docs = ["export function readConfigFile(path) {}", "export function parseUrl(text) {}"];
    // A question in plain words finds the camelCase definition only when identifiers are split.
    expect(new Bm25Index(docs).search("read the config file", 2)).toEqual([]);
    expect(new Bm25Index(docs, { splitIdentifiers: true }).search("read the config file", 2)[0]!.doc).toBe(0);
  });

  it("turns a JSDoc comment into a plain question", () => {
    const doc = `/**
 * Like [\`each\`]{@link module:Collections.each}, except that it passes the key as the
 * second argument. See <b>also</b> {@link mapValues}.
 *
 * \`\`\`js
 * each(x)
 * \`\`\`
 * @param {Array} coll A collection.
 */`;
    expect(queryFromDoc(doc)).toBe("Like each, except that it passes the key as the second argument.");
    expect(queryFromDoc("/** Short one. */")).toBeUndefined();
    expect(queryFromDoc("/** @deprecated Use something else instead of this. */")).toBeUndefined();
    expect(queryFromDoc("/** A function. It always returns true for any input. */")).toBe(
      "A function. It always returns true for any input.",
    );
  });
});
