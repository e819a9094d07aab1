import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { Bm25Index } from "../../eval/bm25.js";
import { parseStaticModel } from "../../protocol/embedder/static.js";
import { parseTranslation } from "../../protocol/embedder/translation.js";
import { evaluateEdge, formatEdgeScores, type DevCodebase } from "../../train/dev-eval.js";

const MODEL = new URL("../../protocol/embedder/model/", import.meta.url);
const model = parseStaticModel(
  readFileSync(new URL("weights.bin", MODEL)),
  readFileSync(new URL("vocab.txt", MODEL), "utf8"),
);
const table = parseTranslation(
  readFileSync(new URL("translation.bin", MODEL)),
  readFileSync(new URL("translation-terms.txt", MODEL), "utf8"),
);

/** A small made-up codebase: one definition a file, each with the question its doc comment would ask. */
function codebase(): DevCodebase {
  const defs: [string, string, string][] = [
    [
      "src/parseDuration.ts",
      "export function parseDuration(text) {\n  const [n, unit] = text.split(' ');\n  return Number(n) * UNITS[unit];\n}",
      "Turns a written length of time into milliseconds.",
    ],
    [
      "src/retry.ts",
      "export async function retry(task, times) {\n  for (let i = 0; i < times; i++) {\n    try { return await task(); } catch (e) { last = e; }\n  }\n  throw last;\n}",
      "Runs a task again until it succeeds or gives up.",
    ],
    [
      "src/chunk.ts",
      "export function chunk(list, size) {\n  const out = [];\n  for (let i = 0; i < list.length; i += size) out.push(list.slice(i, i + size));\n  return out;\n}",
      "Splits an array into groups of the given length.",
    ],
    [
      "src/debounce.ts",
      "export function debounce(fn, wait) {\n  let timer;\n  return (...args) => {\n    clearTimeout(timer);\n    timer = setTimeout(() => fn(...args), wait);\n  };\n}",
      "Delays calling a function until calls stop arriving.",
    ],
    [
      "src/unique.ts",
      "export function unique(items) {\n  return [...new Set(items)];\n}",
      "Removes duplicate values from a list.",
    ],
    [
      "src/sum.ts",
      "export function sum(numbers) {\n  return numbers.reduce((a, b) => a + b, 0);\n}",
      "Adds up every number in an array.",
    ],
  ];
  const chunks = defs.map(([path, text]) => ({ path, startLine: 1, endLine: text.split("\n").length, text }));
  return {
    label: "made-up@1.0.0",
    chunks,
    queries: defs.map(([path, text, question]) => ({
      text: question,
      targets: [{ path, name: path.slice(4, -3), startLine: 1, endLine: text.split("\n").length }],
    })),
    bm25: new Bm25Index(
      chunks.map((c) => `${c.path}\n${c.text}`),
      { splitIdentifiers: true },
    ),
  };
}

describe("the dev eval as the edge ranks it", () => {
  it("scores the best ranking per question at least as high as the fusion and each channel, and R@50 at least R@10", () => {
    const scores = evaluateEdge(model, codebase(), table);
    expect(scores.queries).toBe(6);
    for (const ranking of [scores.pieces, scores.lexical, scores.translation])
      expect(scores.bestRanking).toBeGreaterThanOrEqual(ranking);
    expect(scores.bestRanking).toBeLessThanOrEqual(1);
    // Six chunks: every answer is among the first 50 of the fused ranking.
    expect(scores.recallAtCandidates).toBe(1);
    const [head, row] = formatEdgeScores([scores]).split("\n");
    expect(head).toMatch(/best ranking per question\s+R@50\s+vectors\/chunk/);
    expect(row).toContain(`${scores.bestRanking.toFixed(3)} (${(scores.bestRanking / scores.bm25).toFixed(2)}x)`);
  });
});
