/**
 * How much of the exact ranking the hot index's approximate vector search keeps at scale, with and
 * without definition pieces, on real code: the training pairs' definitions (`npm run train:data`
 * writes them) packed into chunks of up to 1,200 characters, a package's definitions side by side as
 * a file holds them, embedded by the shipped model, rotated by a vector key and held in two
 * `HotIndex`es, one that scans exactly and one that scans 1-bit codes past `exactLimit` and re-scores
 * the best from int8 (as the Workspace object does). The questions are training doc sentences.
 *
 *   npx tsx bench/pieces-recall.ts [--pairs <pairs.jsonl>] [--queries 300] [--exact-limit 4096]
 *
 * Prints, for k = 10 and 20, the share of the exact top k the approximate search returns and how often
 * both put the same chunk first; then the same for indexes without pieces, the baseline.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";
import { HotIndex } from "../durable-objects/hot-index.js";
import { quantizeVector } from "../durable-objects/segment.js";
import { definitionPieces } from "../protocol/embedder/names.js";
import { embedStatic, ModelTokenizer, parseStaticModel } from "../protocol/embedder/static.js";
import { VectorKey } from "../protocol/vector-key.js";
import { defaultWorkdir } from "../train/data.js";
import { readPairs, type Pair } from "../train/trainer.js";
import { rng } from "./code-fixture.js";

const MODEL = new URL("../protocol/embedder/model/", import.meta.url);
const CHUNK_CHARS = 1200;

export interface RecallRow {
  k: number;
  /** Share of the exact top k that the approximate search also returns, averaged over questions. */
  recall: number;
  /** Share of questions whose first hit is the same. */
  sameFirst: number;
  /** The same two for indexes without pieces. */
  recallWithoutPieces: number;
  sameFirstWithoutPieces: number;
}

export interface PiecesRecallFigures {
  chunks: number;
  pieces: number;
  queries: number;
  exactLimit: number;
  rows: RecallRow[];
}

/** A package's definitions side by side, cut into chunks of at most `CHUNK_CHARS`. */
function chunksOf(pairs: readonly Pair[]): string[] {
  const chunks: string[] = [];
  let current = "";
  let pkg = "";
  const byPackage = [...pairs].sort((a, b) => (a.package < b.package ? -1 : a.package > b.package ? 1 : 0));
  for (const p of byPackage) {
    if (p.package !== pkg || current.length + p.code.length > CHUNK_CHARS) {
      if (current) chunks.push(current);
      current = "";
      pkg = p.package;
    }
    current += (current ? "\n\n" : "") + p.code.slice(0, CHUNK_CHARS);
  }
  if (current) chunks.push(current);
  return chunks;
}

export function runPiecesRecall(
  pairs: readonly Pair[],
  options: { queries?: number; exactLimit?: number } = {},
): PiecesRecallFigures {
  const model = parseStaticModel(
    readFileSync(new URL("weights.bin", MODEL)),
    readFileSync(new URL("vocab.txt", MODEL), "utf8"),
  );
  const exactLimit = options.exactLimit ?? 4096;
  const key = new VectorKey(new Uint8Array(32).fill(3), model.dims);
  const tokenizer = new ModelTokenizer();
  const embed = (text: string, kind: "document" | "query") => key.apply(embedStatic(model, text, kind, tokenizer));
  const exact = { exactLimit: Number.MAX_SAFE_INTEGER };
  const noPieces = { pieceInt8BudgetBytes: 0 };
  const indexes = {
    approx: new HotIndex(model.dims, { exactLimit }),
    exact: new HotIndex(model.dims, exact),
    approxOwn: new HotIndex(model.dims, { exactLimit, ...noPieces }),
    exactOwn: new HotIndex(model.dims, { ...exact, ...noPieces }),
  };
  const chunks = chunksOf(pairs);
  let pieces = 0;
  chunks.forEach((text, id) => {
    const own = quantizeVector(embed(text, "document"), model.dims);
    const cut = definitionPieces(text).map((p) => quantizeVector(embed(p, "document"), model.dims));
    pieces += cut.length;
    const entry = { id, language: 0, ...own, termIds: new Uint32Array(0), termCounts: new Uint16Array(0), pieces: cut };
    for (const index of Object.values(indexes)) index.add(entry);
  });
  if (indexes.approx.pieceCount !== pieces) throw new Error("The pieces outgrew their budget: use fewer pairs.");
  const random = rng(7);
  const count = options.queries ?? 300;
  const questions = Array.from({ length: count }, () => embed(pairs[random.int(pairs.length)]!.query, "query"));
  const rows = [10, 20].map((k) => {
    const sums = { recall: 0, same: 0, recallOwn: 0, sameOwn: 0 };
    for (const q of questions) {
      const compare = (approx: HotIndex, exactIndex: HotIndex) => {
        const a = approx.queryVector(q, k).map((h) => h.id);
        const e = exactIndex.queryVector(q, k).map((h) => h.id);
        const inExact = new Set(e);
        return { recall: a.filter((id) => inExact.has(id)).length / e.length, same: a[0] === e[0] ? 1 : 0 };
      };
      const withPieces = compare(indexes.approx, indexes.exact);
      const without = compare(indexes.approxOwn, indexes.exactOwn);
      sums.recall += withPieces.recall;
      sums.same += withPieces.same;
      sums.recallOwn += without.recall;
      sums.sameOwn += without.same;
    }
    return {
      k,
      recall: sums.recall / count,
      sameFirst: sums.same / count,
      recallWithoutPieces: sums.recallOwn / count,
      sameFirstWithoutPieces: sums.sameOwn / count,
    };
  });
  return { chunks: chunks.length, pieces, queries: count, exactLimit, rows };
}

export function reportPiecesRecall(f: PiecesRecallFigures): string {
  return [
    `approximate vector search against exact: ${f.chunks.toLocaleString("en-US")} chunks, ${f.pieces.toLocaleString("en-US")} definition pieces, ${f.queries} questions, 1-bit scan past ${f.exactLimit.toLocaleString("en-US")} vectors`,
    ...f.rows.map(
      (r) =>
        `  top ${r.k}: with pieces ${r.recall.toFixed(3)} of the exact top ${r.k}, same first hit ${r.sameFirst.toFixed(3)}; without pieces ${r.recallWithoutPieces.toFixed(3)}, same first hit ${r.sameFirstWithoutPieces.toFixed(3)}`,
    ),
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const { values } = parseArgs({
    options: {
      pairs: { type: "string", default: join(defaultWorkdir(), "pairs.jsonl") },
      queries: { type: "string", default: "300" },
      "exact-limit": { type: "string", default: "4096" },
    },
  });
  const figures = runPiecesRecall(readPairs(values.pairs!), {
    queries: Number(values.queries),
    exactLimit: Number(values["exact-limit"]),
  });
  console.log(reportPiecesRecall(figures));
}
