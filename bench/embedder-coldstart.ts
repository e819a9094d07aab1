/**
 * What the learned built-in embedder costs an isolate: from a fresh workerd to the first embedded
 * chunk, and per chunk once warm, beside the lexical embedder it replaces. The two embedders run in
 * one probe Worker (`bench/workers/embedder-probe.js`), bundled with the model as the deployment
 * ships it (weights a Data module, vocabulary a Text module), so both pay the same module loading
 * and the static one alone parses the model on its first call. `EMBEDDER` cannot select the lexical
 * embedder on the edge, hence the probe.
 *
 *   npx tsx bench/embedder-coldstart.ts          # 10 cold starts each, 2,000 chunks warm
 *   BENCH_COLD_RUNS=3 npx tsx bench/embedder-coldstart.ts
 *   BENCH_MODEL_TERMS=20000 npx tsx bench/embedder-coldstart.ts   # a random model of that size instead
 *
 * Start: from `new Miniflare` to ready (workerd started, modules loaded). First embed: the first
 * request, one chunk, on that fresh isolate. Warm: the same request again. Per chunk: a request of
 * 2,000 chunks less a request of none, over 2,000, medians of 5.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { build } from "esbuild";
import { Log, LogLevel, Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { serializeStaticModel } from "../protocol/embedder/static.js";
import { median, timed } from "./stats.js";

const PROBE = fileURLToPath(new URL("./workers/embedder-probe.js", import.meta.url));
const MODEL = new URL("../protocol/embedder/model/", import.meta.url);
/** Real code to cut chunks from: the edge's own workspace routes. */
const SOURCE = new URL("../workers/routes/workspaces.ts", import.meta.url);
const ROOT = "/embedder-probe";
const { workerOptions } = unstable_getMiniflareWorkerOptions("wrangler.toml");

export type ProbeEmbedder = "static" | "lexical";

export interface ColdStartRow {
  embedder: ProbeEmbedder;
  model: string;
  dims: number;
  /** Medians over the cold runs, ms. */
  startMs: number;
  firstEmbedMs: number;
  warmEmbedMs: number;
  /** µs per 1,200-character chunk, warm, its definition pieces included. */
  perChunkUs: number;
  /** Vectors made per chunk: 1, or 1 and its definition pieces'. */
  vectorsPerChunk: number;
}

export interface EmbedderColdStartFigures {
  runs: number;
  chunks: number;
  /** The model's vocabulary and weights file: the shipped one, or a random one of a chosen size. */
  terms: number;
  weightsBytes: number;
  rows: ColdStartRow[];
}

async function probeScript(): Promise<string> {
  const result = await build({
    entryPoints: [PROBE],
    bundle: true,
    format: "esm",
    platform: "neutral",
    write: false,
    // Left as imports, served to workerd as Data and Text modules.
    plugins: [
      {
        name: "model-modules",
        setup(b) {
          b.onResolve({ filter: /\/model\/(weights\.bin|vocab\.txt)$/ }, (args) => ({
            path: `./${args.path.split("/").pop()}`,
            external: true,
          }));
        },
      },
    ],
  });
  return result.outputFiles[0]!.text;
}

interface ModelFiles {
  weights: Uint8Array;
  vocab: string;
}

const shippedModel = (): ModelFiles => ({
  weights: readFileSync(new URL("weights.bin", MODEL)),
  vocab: readFileSync(new URL("vocab.txt", MODEL), "utf8"),
});

/** A random model of `terms` × 128 in the shipped format: the trained model's size before it exists. */
function randomModel(terms: number, dims = 128): ModelFiles {
  const table = new Int8Array(terms * dims).map(() => Math.round((Math.random() * 2 - 1) * 127));
  const column = () => new Float32Array(terms).map(() => Math.random());
  return serializeStaticModel({
    name: "sextant-static-v2",
    dims,
    terms: Array.from({ length: terms }, (_, i) => `term${i}`),
    table,
    scale: column(),
    documentWeight: column(),
    queryWeight: column(),
    nameWeight: column(),
  });
}

async function startProbe(script: string, model: ModelFiles): Promise<Miniflare> {
  const mf = new Miniflare({
    modulesRoot: ROOT,
    modules: [
      { type: "ESModule", path: `${ROOT}/probe.js`, contents: script },
      { type: "Data", path: `${ROOT}/weights.bin`, contents: model.weights },
      { type: "Text", path: `${ROOT}/vocab.txt`, contents: model.vocab },
    ],
    compatibilityDate: workerOptions.compatibilityDate,
    compatibilityFlags: workerOptions.compatibilityFlags,
    bindings: { SOURCE: readFileSync(SOURCE, "utf8") },
    // Nothing here reads `request.cf`: no need to fetch Cloudflare's sample.
    cf: false,
    log: new Log(LogLevel.WARN),
  });
  await mf.ready;
  return mf;
}

async function embed(
  mf: Miniflare,
  embedder: ProbeEmbedder,
  chunks: number,
): Promise<{ model: string; dims: number; vectors: number }> {
  const response = await mf.dispatchFetch(`http://probe/?embedder=${embedder}&chunks=${chunks}`);
  if (!response.ok) throw new Error(`The probe answered ${response.status}: ${await response.text()}`);
  return (await response.json()) as { model: string; dims: number; vectors: number };
}

export async function runEmbedderColdStart(
  runs = 10,
  chunks = 2000,
  modelTerms?: number,
): Promise<EmbedderColdStartFigures> {
  const script = await probeScript();
  const model = modelTerms ? randomModel(modelTerms) : shippedModel();
  // The first workerd of a process starts slower (files not yet cached): not counted.
  await (await startProbe(script, model)).dispose();
  const rows: ColdStartRow[] = [];
  const cold: Record<ProbeEmbedder, { start: number[]; first: number[]; warm: number[] }> = {
    static: { start: [], first: [], warm: [] },
    lexical: { start: [], first: [], warm: [] },
  };
  // Interleaved, so that whatever else the machine does falls on both alike.
  for (let r = 0; r < runs; r++) {
    for (const embedder of ["static", "lexical"] as const) {
      const [mf, start] = await timed(() => startProbe(script, model));
      try {
        cold[embedder].start.push(start);
        cold[embedder].first.push((await timed(() => embed(mf, embedder, 1)))[1]);
        cold[embedder].warm.push((await timed(() => embed(mf, embedder, 1)))[1]);
      } finally {
        await mf.dispose();
      }
    }
  }
  const mf = await startProbe(script, model);
  try {
    for (const embedder of ["static", "lexical"] as const) {
      const { model, dims } = await embed(mf, embedder, 10);
      const none: number[] = [];
      const many: number[] = [];
      let vectors = 0;
      for (let i = 0; i < 5; i++) {
        none.push((await timed(() => embed(mf, embedder, 0)))[1]);
        const [answer, ms] = await timed(() => embed(mf, embedder, chunks));
        many.push(ms);
        vectors = answer.vectors;
      }
      const c = cold[embedder];
      rows.push({
        embedder,
        model,
        dims,
        startMs: median(c.start),
        firstEmbedMs: median(c.first),
        warmEmbedMs: median(c.warm),
        perChunkUs: ((median(many) - median(none)) * 1000) / chunks,
        vectorsPerChunk: vectors / chunks,
      });
    }
  } finally {
    await mf.dispose();
  }
  return { runs, chunks, terms: model.vocab.split("\n").length - 1, weightsBytes: model.weights.length, rows };
}

export function reportEmbedderColdStart(f: EmbedderColdStartFigures): string {
  const ms = (x: number) => `${x.toFixed(1)} ms`;
  return [
    `embedder cold start: a fresh workerd to the first embedded chunk, median of ${f.runs} each (model of ${f.terms.toLocaleString("en-US")} terms, weights ${(f.weightsBytes / 1024).toFixed(0)} KiB); per chunk over ${f.chunks.toLocaleString("en-US")} chunks of 1,200 characters, warm`,
    ...f.rows.map(
      (r) =>
        `  ${r.embedder.padEnd(8)} ${`${r.model} (${r.dims} dims)`.padEnd(30)} start ${ms(r.startMs)}, first embed ${ms(r.firstEmbedMs)} (warm ${ms(r.warmEmbedMs)}, so ${ms(r.firstEmbedMs - r.warmEmbedMs)} on first use), start to first chunk ${ms(r.startMs + r.firstEmbedMs)}; ${r.perChunkUs.toFixed(0)} µs per chunk (${r.vectorsPerChunk.toFixed(2)} vectors)`,
    ),
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const terms = Number(process.env.BENCH_MODEL_TERMS ?? 0);
  const runs = Number(process.env.BENCH_COLD_RUNS ?? 10);
  console.log(reportEmbedderColdStart(await runEmbedderColdStart(runs, 2000, terms > 0 ? terms : undefined)));
}
