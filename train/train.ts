/**
 * `npm run train:embedder`: the built-in embedder, from nothing to the files the Worker ships.
 * Fetches the pinned packages and mines their doc/code pairs (`train/data.ts`), trains the static
 * model (`train/trainer.ts`), scores every epoch on the dev eval's codebases offline, and writes
 * `weights.bin`, `vocab.txt` and `MODEL_CARD.md` to `protocol/embedder/model/`.
 *
 *   npm run train:embedder -- [--workdir <dir>] [--pairs <pairs.jsonl>] [--out <dir>] [--epochs N] [--dims N]
 *                             [--limit-packages N]
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { format, resolveConfig } from "prettier";
import { parseStaticModel, serializeStaticModel } from "../protocol/embedder/static.js";
import { serializeTranslation, tableOf } from "../protocol/embedder/translation.js";
import {
  evaluateEdge,
  evaluateModel,
  formatDevScores,
  formatEdgeScores,
  loadDevCodebases,
  type DevScores,
} from "./dev-eval.js";
import { DEFAULT_TRANSLATION, trainTranslation } from "./translation.js";
import { modelCard } from "./model-card.js";
import { DEFAULT_SETTINGS, quantize, readPairs, train, type TrainSettings } from "./trainer.js";

const { values: args } = parseArgs({
  options: {
    workdir: { type: "string" },
    pairs: { type: "string" },
    out: { type: "string", default: "protocol/embedder/model" },
    epochs: { type: "string" },
    dims: { type: "string" },
    "lexical-weight": { type: "string" },
    temperature: { type: "string" },
    "limit-packages": { type: "string" },
  },
});

const log = (line: string) => process.stderr.write(`${line}\n`);

function commandLine(): string {
  const rest = process.argv.slice(2);
  return ["npm run train:embedder", ...(rest.length ? ["--", ...rest] : [])].join(" ");
}

async function pairsFile(): Promise<{ path: string; stats: unknown }> {
  if (args.pairs) return { path: resolve(args.pairs), stats: { pairs: resolve(args.pairs) } };
  const { prepareData } = await import("./data.js");
  const limit = args["limit-packages"] === undefined ? undefined : Number(args["limit-packages"]);
  const prepared = await prepareData({
    ...(args.workdir ? { workdir: resolve(args.workdir) } : {}),
    ...(limit !== undefined ? { limitPackages: limit } : {}),
  });
  return { path: prepared.pairsPath, stats: prepared.stats };
}

const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex");

async function main(): Promise<void> {
  const started = Date.now();
  const data = await pairsFile();
  const pairs = readPairs(data.path);
  log(`${pairs.length} pairs from ${data.path}; loading the dev eval's codebases`);
  const dev = await loadDevCodebases();
  const settings: TrainSettings = {
    ...DEFAULT_SETTINGS,
    ...(args.epochs ? { epochs: Number(args.epochs) } : {}),
    ...(args.dims ? { dims: Number(args.dims) } : {}),
    ...(args["lexical-weight"] ? { lexicalWeight: Number(args["lexical-weight"]) } : {}),
    ...(args.temperature ? { temperature: Number(args.temperature) } : {}),
  };
  const trainStarted = Date.now();
  let lastLog = 0;
  let finalLoss = NaN;
  let scores: DevScores[] = [];
  const model = train(
    pairs,
    settings,
    (p) => {
      finalLoss = p.loss;
      if (Date.now() - lastLog < 15_000 && p.step !== p.steps) return;
      lastLog = Date.now();
      log(`epoch ${p.epoch}, batch ${p.step}/${p.steps}: loss ${p.loss.toFixed(3)}`);
    },
    (epoch, m) => {
      const { weights, vocab } = serializeStaticModel(quantize(m, settings.name));
      scores = dev.map((d) => evaluateModel(parseStaticModel(weights, vocab), d));
      log(`epoch ${epoch} on the dev eval (MRR@10):\n${formatDevScores(scores)}`);
    },
  );
  const trainSeconds = (Date.now() - trainStarted) / 1000;
  const { weights, vocab } = serializeStaticModel(quantize(model, settings.name));
  const out = resolve(args.out);
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "weights.bin"), weights);
  writeFileSync(join(out, "vocab.txt"), vocab);
  const translationStarted = Date.now();
  const entries = trainTranslation(pairs, DEFAULT_TRANSLATION, (it, entries) =>
    log(`translation table, round ${it}: ${entries} entries`),
  );
  const translationSeconds = (Date.now() - translationStarted) / 1000;
  const written = serializeTranslation(entries);
  writeFileSync(join(out, "translation.bin"), written.table);
  writeFileSync(join(out, "translation-terms.txt"), written.terms);
  const shipped = parseStaticModel(weights, vocab);
  const edge = dev.map((d) => evaluateEdge(shipped, d, tableOf(entries)));
  log(`the dev eval as the edge ranks it (MRR@10):\n${formatEdgeScores(edge)}`);
  const packages = JSON.parse(readFileSync(new URL("./packages.json", import.meta.url), "utf8"));
  const cardPath = join(out, "MODEL_CARD.md");
  const card = modelCard({
    date: new Date().toISOString().slice(0, 10),
    command: commandLine(),
    settings,
    weightsSha256: sha256(weights),
    vocabSha256: sha256(vocab),
    weightsBytes: weights.byteLength,
    vocabSize: model.terms.length,
    pairsUsed: pairs.length,
    trainSeconds,
    totalSeconds: (Date.now() - started) / 1000,
    dataStats: data.stats,
    packages,
    dev: scores,
    finalLoss,
    translation: {
      settings: DEFAULT_TRANSLATION,
      words: entries.size,
      entries: [...entries.values()].reduce((n, e) => n + e.terms.length, 0),
      tableBytes: written.table.byteLength,
      tableSha256: sha256(written.table),
      termsSha256: sha256(written.terms),
      seconds: translationSeconds,
      edge,
    },
  });
  // Formatted as the repository formats Markdown, so the card is committed as written.
  writeFileSync(cardPath, await format(card, { ...(await resolveConfig(cardPath)), filepath: cardPath }));
  log(
    `wrote ${out}/weights.bin (${weights.byteLength} bytes), vocab.txt, translation.bin, translation-terms.txt and MODEL_CARD.md`,
  );
}

main().catch((err: unknown) => {
  console.error(err instanceof Error ? (err.stack ?? err.message) : err);
  process.exit(1);
});
