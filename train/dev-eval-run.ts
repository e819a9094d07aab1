/**
 * `npm run eval:dev`: the offline dev eval (`train/dev-eval.ts`) of the shipped model, or of the
 * model in `--model <dir>`: MRR@10 of the model alone, of BM25, of their fusion at a few lexical
 * weights, and of the best of either per query, the bound no fusion of the two can pass.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { parseStaticModel } from "../protocol/embedder/static.js";
import { LEXICAL_WEIGHT } from "../protocol/fusion.js";
import { evaluateModel, formatDevScores, loadDevCodebases } from "./dev-eval.js";

const { values: args } = parseArgs({ options: { model: { type: "string", default: "protocol/embedder/model" } } });
const model = parseStaticModel(
  readFileSync(join(args.model, "weights.bin")),
  readFileSync(join(args.model, "vocab.txt"), "utf8"),
);
const dev = await loadDevCodebases();
const weights = [...new Set([0.5, LEXICAL_WEIGHT, 2])].sort((a, b) => a - b);
console.log(`${model.name} (${model.dims} dims), MRR@10 on the dev eval:\n`);
console.log(formatDevScores(dev.map((d) => evaluateModel(model, d, weights))));
