/**
 * `npm run eval:dev`: the offline dev eval (`train/dev-eval.ts`) of the shipped model, or of the
 * model in `--model <dir>`: MRR@10 of the model alone, of BM25, of their fusion at a few lexical
 * weights, and of the best of either per query (an oracle's pick, not a strict bound); then, with
 * the model directory's translation table, the dev eval ranked as the edge ranks it, with and without
 * the translation channel.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { parseStaticModel } from "../protocol/embedder/static.js";
import { parseTranslation } from "../protocol/embedder/translation.js";
import { LEXICAL_WEIGHT, TRANSLATION_WEIGHT } from "../protocol/fusion.js";
import { evaluateEdge, evaluateModel, formatDevScores, formatEdgeScores, loadDevCodebases } from "./dev-eval.js";

const { values: args } = parseArgs({ options: { model: { type: "string", default: "protocol/embedder/model" } } });
const model = parseStaticModel(
  readFileSync(join(args.model, "weights.bin")),
  readFileSync(join(args.model, "vocab.txt"), "utf8"),
);
const dev = await loadDevCodebases();
const weights = [...new Set([0.5, LEXICAL_WEIGHT, 2])].sort((a, b) => a - b);
console.log(`${model.name} (${model.dims} dims), MRR@10 on the dev eval:\n`);
console.log(formatDevScores(dev.map((d) => evaluateModel(model, d, weights))));
if (existsSync(join(args.model, "translation.bin"))) {
  const table = parseTranslation(
    readFileSync(join(args.model, "translation.bin")),
    readFileSync(join(args.model, "translation-terms.txt"), "utf8"),
  );
  console.log(`\nAs the edge ranks it, with the translation table (${table.size} words):\n`);
  console.log(formatEdgeScores(dev.map((d) => evaluateEdge(model, d, table, [0.5, TRANSLATION_WEIGHT, 2]))));
} else console.log(`\n${args.model} has no translation table: the edge's ranking with it is not scored.`);
