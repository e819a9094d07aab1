/**
 * The dev eval's codebases (ramda, rxjs, async, and the Debian Python, Go and Rust ones), scored
 * offline: the same questions and comment-free chunks `npm run eval` builds, ranked by the model
 * alone, by the identifier-split BM25 baseline, and by the two fused as the Workspace object fuses
 * its channels (`fuseScores`, at its lexical weight and either side of it). It runs in seconds, not through the edge, so training can report it after every
 * epoch; `npm run eval` remains the figure of record. Never a training set: these codebases are
 * only ever evaluated.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chunkFile } from "../client/index/chunker.js";
import { uploadable } from "../client/workspace/upload.js";
import { Bm25Index } from "../eval/bm25.js";
import { buildCorpus, type EvalQuery } from "../eval/corpus.js";
import { extractDeb, fetchDeb } from "../eval/debian.js";
import { extractTarball, fetchTarball } from "../eval/fetch.js";
import { firstHit, score } from "../eval/metrics.js";
import { fuseScores, fuseThree, LEXICAL_WEIGHT, TRANSLATION_WEIGHT, type ChannelHit } from "../protocol/fusion.js";
import { TermKey } from "../protocol/keyed-terms.js";
import { MAX_PATH_TERMS } from "../protocol/sync.js";
import { translateQuestion, type TranslationTable } from "../protocol/embedder/translation.js";
import { HotIndex } from "../durable-objects/hot-index.js";
import { translationBm25 } from "../durable-objects/turbopuffer-ranking.js";
import { DEBIAN_PACKAGES, EVAL_PACKAGES } from "../eval/packages.js";
import { listFiles, selectSources, type Layout } from "../eval/select.js";
import { embedStatic, ModelTokenizer, questionTermWeights, type StaticModel } from "../protocol/embedder/static.js";
import { definitionPieces } from "../protocol/embedder/names.js";

export interface DevChunk {
  path: string;
  startLine: number;
  endLine: number;
  text: string;
}

export interface DevCodebase {
  label: string;
  chunks: DevChunk[];
  queries: EvalQuery[];
  bm25: Bm25Index;
}

const TOP_K = 10;
const CANDIDATES = 50;

async function load(label: string, unpack: (dest: string) => Promise<Layout>): Promise<DevCodebase> {
  const work = mkdtempSync(join(tmpdir(), "sextant-dev-eval-"));
  try {
    const source = join(work, "source");
    const layout = await unpack(source);
    const stripped = join(work, "stripped");
    const corpus = await buildCorpus(selectSources(source, layout), stripped);
    const chunks: DevChunk[] = [];
    for (const path of listFiles(stripped)) {
      const text = readFileSync(join(stripped, path), "utf8");
      for (const c of uploadable(await chunkFile(path, text)))
        chunks.push({ path, startLine: c.startLine, endLine: c.endLine, text: c.text });
    }
    const indexed = new Set(chunks.map((c) => c.path));
    const queries = corpus.queries
      .map((q) => ({ ...q, targets: q.targets.filter((t) => indexed.has(t.path)) }))
      .filter((q) => q.targets.length > 0);
    const bm25 = new Bm25Index(
      chunks.map((c) => `${c.path}\n${c.text}`),
      { splitIdentifiers: true },
    );
    return { label, chunks, queries, bm25 };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Every dev codebase, fetched (or taken from the eval's cache) and prepared once. */
export async function loadDevCodebases(): Promise<DevCodebase[]> {
  const loaders = [
    ...EVAL_PACKAGES.map(
      (p) => () =>
        load(`${p.name}@${p.version}`, async (dest) => {
          await extractTarball(await fetchTarball(p.name, p.version), dest);
          return { roots: p.roots, exclude: p.exclude };
        }),
    ),
    ...DEBIAN_PACKAGES.map(
      (p) => () =>
        load(`${p.name}@${p.version}`, async (dest) => {
          await extractDeb(await fetchDeb(p), dest);
          return { roots: p.roots, exclude: p.exclude };
        }),
    ),
  ];
  // One at a time: web-tree-sitter loading two grammars at once can fail to link the second.
  const out: DevCodebase[] = [];
  for (const loader of loaders) out.push(await loader());
  return out;
}

export interface DevScores {
  label: string;
  queries: number;
  model: number;
  bm25: number;
  /**
   * MRR@10 if each query were answered by whichever of the model and BM25 ranks its answer higher: an
   * oracle's pick, not a strict bound (a fusion can put first an answer each ranks second).
   */
  either: number;
  /** MRR@10 of the fusion at each lexical weight tried. */
  fused: Map<number, number>;
}

/**
 * The chunks' best `CANDIDATES` by cosine with the question, as the vector channel ranks them; with
 * `pieces`, a chunk scores the best of its own vector's and its definition pieces' (`definitionPieces`).
 */
function byCosine(
  model: StaticModel,
  vectors: readonly Float32Array[],
  question: string,
  tokenizer: ModelTokenizer,
  pieces?: readonly (readonly Float32Array[])[],
): ChannelHit[] {
  const q = embedStatic(model, question, "query", tokenizer);
  const cosine = (v: Float32Array) => {
    let dot = 0;
    for (let d = 0; d < model.dims; d++) dot += v[d]! * q[d]!;
    return dot;
  };
  return vectors
    .map((v, i) => ({ id: String(i), score: Math.max(cosine(v), ...(pieces?.[i] ?? []).map(cosine)) }))
    .sort((a, b) => b.score - a.score || Number(a.id) - Number(b.id))
    .slice(0, CANDIDATES);
}

/** A figure over the rows' queries taken together: each row's weighted by its queries. */
function perQuery<T extends { queries: number }>(rows: readonly T[]): (f: (r: T) => number) => number {
  const n = rows.reduce((sum, r) => sum + r.queries, 0) || 1;
  return (f) => rows.reduce((sum, r) => sum + f(r) * r.queries, 0) / n;
}

export function evaluateModel(
  model: StaticModel,
  codebase: DevCodebase,
  lexicalWeights: readonly number[] = [...new Set([0.3, LEXICAL_WEIGHT, 2])].sort((a, b) => a - b),
): DevScores {
  const tokenizer = new ModelTokenizer();
  const vectors = codebase.chunks.map((c) => embedStatic(model, c.text, "document", tokenizer));
  const ranks = { model: [] as (number | null)[], bm25: [] as (number | null)[], either: [] as (number | null)[] };
  const fusedRanks = new Map(lexicalWeights.map((w) => [w, [] as (number | null)[]]));
  const at = (ids: readonly number[]) => ids.slice(0, TOP_K).map((i) => codebase.chunks[i]!);
  for (const query of codebase.queries) {
    const vectorHits = byCosine(model, vectors, query.text, tokenizer);
    const byBm25 = codebase.bm25.search(query.text, CANDIDATES);
    ranks.model.push(firstHit(at(vectorHits.map((h) => Number(h.id))), query.targets));
    ranks.bm25.push(firstHit(at(byBm25.map((h) => h.doc)), query.targets));
    const [m, b] = [ranks.model.at(-1)!, ranks.bm25.at(-1)!];
    ranks.either.push(m === null ? b : b === null ? m : Math.min(m, b));
    const termHits = byBm25.map((h) => ({ id: String(h.doc), score: h.score }));
    for (const w of lexicalWeights) {
      const fused = fuseScores(vectorHits, termHits, w).map((h) => Number(h.id));
      fusedRanks.get(w)!.push(firstHit(at(fused), query.targets));
    }
  }
  return {
    label: codebase.label,
    queries: codebase.queries.length,
    model: score(ranks.model).mrrAt10,
    bm25: score(ranks.bm25).mrrAt10,
    either: score(ranks.either).mrrAt10,
    fused: new Map([...fusedRanks].map(([w, r]) => [w, score(r).mrrAt10])),
  };
}

export interface EdgeScores {
  label: string;
  queries: number;
  /** The baseline: BM25 over the chunks with paths and identifiers split. */
  bm25: number;
  /** The edge's keyed lexical channel alone, and the translation channel alone. */
  lexical: number;
  translation: number;
  /** The edge's ranking without the translation channel (vector and lexical fused). */
  twoChannels: number;
  /** With the translation channel, at each of its weights tried. */
  threeChannels: Map<number, number>;
  /** With the translation channel as the Turbopuffer backend ranks it (`translationBm25`), at weight 1. */
  translationAsBm25: number;
  /**
   * All three channels at weight 1, a chunk's cosine the best of its own vector's and its definition
   * pieces' (`definitionPieces`, at most 3): each definition's words kept apart in a vector of its own.
   */
  pieces: number;
  /**
   * MRR@10 if each question were answered by whichever of the fused ranking (with pieces) and its three
   * channels ranks its answer highest: an oracle's pick among four rankings, which no rule can make
   * without knowing the answer. Not a strict bound on every fusion (a fusion can put first an answer
   * each channel ranks second), but one the shipped fusion passes for few questions.
   */
  bestRanking: number;
  /** How often the answer is among the fused ranking's first `CANDIDATES` (with pieces): what a reranker could reorder. */
  recallAtCandidates: number;
  /** The codebase's chunks, and the vectors the index holds for them: their own and their pieces'. */
  chunks: number;
  vectors: number;
}

/**
 * The dev codebase ranked as the edge ranks it: its chunks' keyed terms (and their paths') in the
 * Workspace object's own `HotIndex`, the question's keyed terms for BM25 and its translated words
 * for the translation channel (each weighted by `questionTermWeights`, as the search route weighs
 * them), the model's cosine, and `fuseThree`.
 */
export function evaluateEdge(
  model: StaticModel,
  codebase: DevCodebase,
  translation: TranslationTable,
  translationWeights: readonly number[] = [TRANSLATION_WEIGHT],
): EdgeScores {
  const key = new TermKey(new Uint8Array(32).fill(7));
  const hot = new HotIndex(32);
  const tokenizer = new ModelTokenizer();
  const vectors = codebase.chunks.map((c) => embedStatic(model, c.text, "document", tokenizer));
  const pieceVectors = codebase.chunks.map((c) =>
    definitionPieces(c.text).map((p) => embedStatic(model, p, "document", tokenizer)),
  );
  const termWeight = questionTermWeights(model);
  codebase.chunks.forEach((c, id) => {
    const terms = TermKey.withExtra(key.chunk(c.text), key.query(c.path).slice(0, MAX_PATH_TERMS));
    hot.add({ id, language: 0, scale: 1, int8: new Int8Array(32), termIds: terms.ids, termCounts: terms.counts });
  });
  const ranks = {
    bm25: [] as (number | null)[],
    lexical: [] as (number | null)[],
    translation: [] as (number | null)[],
    two: [] as (number | null)[],
    asBm25: [] as (number | null)[],
    pieces: [] as (number | null)[],
    bestRanking: [] as (number | null)[],
  };
  let withinCandidates = 0;
  const three = new Map(translationWeights.map((w) => [w, [] as (number | null)[]]));
  const at = (ids: readonly string[]) => ids.slice(0, TOP_K).map((i) => codebase.chunks[Number(i)]!);
  const hits = (h: readonly { id: number; score: number }[] | null) =>
    (h ?? []).map((x) => ({ id: String(x.id), score: x.score }));
  for (const query of codebase.queries) {
    const byVector = byCosine(model, vectors, query.text, tokenizer);
    const asked = key.weightedQuestion(query.text, termWeight);
    const byTerms = hits(hot.queryTerms(asked.ids, CANDIDATES, {}, asked.weights));
    const words = translateQuestion(translation, query.text);
    const keyedWords = key.translated(words);
    const wordWeights = words.map((w) => termWeight(w.term));
    const byTranslation = hits(hot.queryTranslated(keyedWords, CANDIDATES, {}, wordWeights));
    ranks.bm25.push(
      firstHit(at(codebase.bm25.search(query.text, CANDIDATES).map((h) => String(h.doc))), query.targets),
    );
    ranks.lexical.push(firstHit(at(byTerms.map((h) => h.id)), query.targets));
    ranks.translation.push(firstHit(at(byTranslation.map((h) => h.id)), query.targets));
    ranks.two.push(firstHit(at(fuseScores(byVector, byTerms).map((h) => h.id)), query.targets));
    const asBm25 = translationBm25(keyedWords, wordWeights);
    const byTranslationBm25 = hits(hot.queryTerms(asBm25.terms, CANDIDATES, {}, asBm25.weights));
    ranks.asBm25.push(firstHit(at(fuseThree(byVector, byTerms, byTranslationBm25).map((h) => h.id)), query.targets));
    const byPieces = byCosine(model, vectors, query.text, tokenizer, pieceVectors);
    const fusedPieces = fuseThree(byPieces, byTerms, byTranslation).map((h) => h.id);
    ranks.pieces.push(firstHit(at(fusedPieces), query.targets));
    const deep = fusedPieces.slice(0, CANDIDATES).map((i) => codebase.chunks[Number(i)]!);
    if (firstHit(deep, query.targets, CANDIDATES) !== null) withinCandidates++;
    const rankingRanks = [fusedPieces, ...[byPieces, byTerms, byTranslation].map((c) => c.map((h) => h.id))]
      .map((ranking) => firstHit(at(ranking), query.targets))
      .filter((r): r is number => r !== null);
    ranks.bestRanking.push(rankingRanks.length > 0 ? Math.min(...rankingRanks) : null);
    for (const w of translationWeights)
      three
        .get(w)!
        .push(
          firstHit(at(fuseThree(byVector, byTerms, byTranslation, LEXICAL_WEIGHT, w).map((h) => h.id)), query.targets),
        );
  }
  return {
    label: codebase.label,
    queries: codebase.queries.length,
    bm25: score(ranks.bm25).mrrAt10,
    lexical: score(ranks.lexical).mrrAt10,
    translation: score(ranks.translation).mrrAt10,
    twoChannels: score(ranks.two).mrrAt10,
    threeChannels: new Map([...three].map(([w, r]) => [w, score(r).mrrAt10])),
    translationAsBm25: score(ranks.asBm25).mrrAt10,
    pieces: score(ranks.pieces).mrrAt10,
    bestRanking: score(ranks.bestRanking).mrrAt10,
    recallAtCandidates: withinCandidates / Math.max(1, codebase.queries.length),
    chunks: codebase.chunks.length,
    vectors: codebase.chunks.length + pieceVectors.reduce((n, p) => n + p.length, 0),
  };
}

export function formatEdgeScores(perCodebase: readonly EdgeScores[]): string {
  const mean = perQuery(perCodebase);
  const weights = [...(perCodebase[0]?.threeChannels.keys() ?? [])];
  const all: EdgeScores = {
    label: "all queries",
    queries: perCodebase.reduce((sum, r) => sum + r.queries, 0),
    bm25: mean((r) => r.bm25),
    lexical: mean((r) => r.lexical),
    translation: mean((r) => r.translation),
    twoChannels: mean((r) => r.twoChannels),
    threeChannels: new Map(weights.map((w) => [w, mean((r) => r.threeChannels.get(w)!)])),
    translationAsBm25: mean((r) => r.translationAsBm25),
    pieces: mean((r) => r.pieces),
    bestRanking: mean((r) => r.bestRanking),
    recallAtCandidates: mean((r) => r.recallAtCandidates),
    chunks: perCodebase.reduce((sum, r) => sum + r.chunks, 0),
    vectors: perCodebase.reduce((sum, r) => sum + r.vectors, 0),
  };
  const rows = perCodebase.length > 1 ? [...perCodebase, all] : perCodebase;
  const cell = (v: number, base: number) => `${v.toFixed(3)} (${(v / base).toFixed(2)}x)`;
  const head = [
    "codebase",
    "queries",
    "BM25-split",
    "lexical",
    "translation",
    "vector+lexical",
    ...weights.map((w) => `+translation w=${w}`),
    "+translation as BM25",
    "+definition pieces",
    "best ranking per question",
    `R@${CANDIDATES}`,
    "vectors/chunk",
  ];
  const lines = rows.map((r) => [
    r.label,
    String(r.queries),
    r.bm25.toFixed(3),
    cell(r.lexical, r.bm25),
    cell(r.translation, r.bm25),
    cell(r.twoChannels, r.bm25),
    ...weights.map((w) => cell(r.threeChannels.get(w)!, r.bm25)),
    cell(r.translationAsBm25, r.bm25),
    cell(r.pieces, r.bm25),
    cell(r.bestRanking, r.bm25),
    r.recallAtCandidates.toFixed(3),
    (r.vectors / r.chunks).toFixed(2),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  return [head, ...lines].map((l) => l.map((c, i) => c.padEnd(widths[i]!)).join("  ")).join("\n");
}

/** The rows' queries taken together: each figure weighted by its codebase's queries. */
export function overall(rows: readonly DevScores[]): DevScores {
  const mean = perQuery(rows);
  const weights = [...(rows[0]?.fused.keys() ?? [])];
  return {
    label: "all queries",
    queries: rows.reduce((sum, r) => sum + r.queries, 0),
    model: mean((r) => r.model),
    bm25: mean((r) => r.bm25),
    either: mean((r) => r.either),
    fused: new Map(weights.map((w) => [w, mean((r) => r.fused.get(w)!)])),
  };
}

export function formatDevScores(perCodebase: readonly DevScores[]): string {
  const rows = perCodebase.length > 1 ? [...perCodebase, overall(perCodebase)] : perCodebase;
  const weights = [...(rows[0]?.fused.keys() ?? [])];
  const head = [
    "codebase",
    "queries",
    "BM25-split",
    "model",
    "ratio",
    ...weights.map((w) => `fused w=${w}`),
    "best of either",
  ];
  const lines = rows.map((r) => [
    r.label,
    String(r.queries),
    r.bm25.toFixed(3),
    r.model.toFixed(3),
    `${(r.model / r.bm25).toFixed(2)}x`,
    ...weights.map((w) => `${r.fused.get(w)!.toFixed(3)} (${(r.fused.get(w)! / r.bm25).toFixed(2)}x)`),
    `${r.either.toFixed(3)} (${(r.either / r.bm25).toFixed(2)}x)`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  return [head, ...lines].map((l) => l.map((cell, i) => cell.padEnd(widths[i]!)).join("  ")).join("\n");
}
