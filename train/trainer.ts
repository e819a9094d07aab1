/**
 * Trains the static embedding model (`protocol/embedder/static.ts`) on (question, code) pairs with
 * in-batch contrastive loss (InfoNCE, both directions). Plain typed arrays and hand-written
 * gradients: the model is a table lookup and a weighted sum, so the only heavy work is the batch's
 * similarity matrix, and one thread of V8 does a batch of 1,024 pairs in well under a second.
 * Everything is seeded, so the same pairs and settings give the same weights bit for bit.
 */
import { readFileSync } from "node:fs";
import { analyze } from "../eval/bm25.js";
import { countWeight, ModelTokenizer, type StaticModelParts } from "../protocol/embedder/static.js";

export interface TrainSettings {
  /** The model's name, recorded in its weights. */
  name: string;
  vocabSize: number;
  /** A term must occur in this many texts to get a row. */
  minCount: number;
  dims: number;
  batchSize: number;
  /** At most this many pairs of one package side by side in a batch: its hard negatives. */
  packageGroup: number;
  epochs: number;
  learningRate: number;
  /** Similarities are divided by this before the softmax. */
  temperature: number;
  /**
   * The lexical channel's weight in the training softmax: each similarity gets this times the pair's
   * BM25 within the batch (scaled by the question's best), as search fuses its channels. 0 trains the
   * model alone; above 0 it learns what BM25 misses, since a pair BM25 already ranks first gives
   * almost no gradient.
   */
  lexicalWeight: number;
  seed: number;
}

export const DEFAULT_SETTINGS: TrainSettings = {
  name: "sextant-static-v2",
  vocabSize: 20_000,
  minCount: 3,
  dims: 128,
  batchSize: 1024,
  packageGroup: 64,
  epochs: 4,
  learningRate: 0.003,
  temperature: 0.05,
  lexicalWeight: 0,
  seed: 26,
};

export interface Pair {
  query: string;
  code: string;
  package: string;
  language?: string;
}

/** The pairs of a `pairs.jsonl` (`npm run train:data` writes it), one JSON object a line. */
export function readPairs(path: string): Pair[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Pair);
}

/** A deterministic PRNG (mulberry32): the run's only source of randomness. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function shuffle<T>(items: T[], random: () => number): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

/** Texts as rows of (term id, count weight), packed: row i is entries offsets[i]..offsets[i+1]. */
export interface SparseRows {
  offsets: Int32Array;
  ids: Int32Array;
  weights: Float32Array;
}

/** The vocabulary: the `size` terms found in the most texts (at least `minCount`), ties by spelling. */
export function buildVocabulary(texts: Iterable<string[]>, size: number, minCount: number): string[] {
  const df = new Map<string, number>();
  for (const terms of texts) for (const term of new Set(terms)) df.set(term, (df.get(term) ?? 0) + 1);
  return [...df]
    .filter(([, n]) => n >= minCount)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .slice(0, size)
    .map(([term]) => term);
}

export function toRows(texts: readonly string[][], vocab: ReadonlyMap<string, number>): SparseRows {
  const offsets = new Int32Array(texts.length + 1);
  const ids: number[] = [];
  const weights: number[] = [];
  texts.forEach((terms, i) => {
    const counts = new Map<number, number>();
    for (const term of terms) {
      const id = vocab.get(term);
      if (id !== undefined) counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (const [id, count] of counts) {
      ids.push(id);
      weights.push(countWeight(count));
    }
    offsets[i + 1] = ids.length;
  });
  return { offsets, ids: Int32Array.from(ids), weights: Float32Array.from(weights) };
}

/** Code as rows: its terms as `toRows` has them, then each term of a name it defines once, as id V + t. */
export function toDocumentRows(
  texts: readonly string[][],
  names: readonly string[][],
  vocab: ReadonlyMap<string, number>,
): SparseRows {
  const rows = toRows(texts, vocab);
  const offsets = new Int32Array(texts.length + 1);
  const ids: number[] = [];
  const weights: number[] = [];
  texts.forEach((_, i) => {
    for (let k = rows.offsets[i]!; k < rows.offsets[i + 1]!; k++) {
      ids.push(rows.ids[k]!);
      weights.push(rows.weights[k]!);
    }
    for (const term of new Set(names[i])) {
      const id = vocab.get(term);
      if (id === undefined) continue;
      ids.push(vocab.size + id);
      weights.push(1);
    }
    offsets[i + 1] = ids.length;
  });
  return { offsets, ids: Int32Array.from(ids), weights: Float32Array.from(weights) };
}

class Adam {
  readonly #m: Float32Array;
  readonly #v: Float32Array;
  #t = 0;
  constructor(
    readonly params: Float32Array,
    readonly lr: number,
  ) {
    this.#m = new Float32Array(params.length);
    this.#v = new Float32Array(params.length);
  }
  step(grad: Float32Array): void {
    const b1 = 0.9;
    const b2 = 0.999;
    this.#t++;
    const c1 = 1 - b1 ** this.#t;
    const c2 = 1 - b2 ** this.#t;
    const m = this.#m;
    const v = this.#v;
    const p = this.params;
    const lr = this.lr;
    for (let i = 0; i < p.length; i++) {
      const g = grad[i]!;
      const mi = (m[i] = b1 * m[i]! + (1 - b1) * g);
      const vi = (v[i] = b2 * v[i]! + (1 - b2) * g * g);
      p[i]! -= (lr * (mi / c1)) / (Math.sqrt(vi / c2) + 1e-8);
    }
  }
}

export interface Model {
  terms: string[];
  dims: number;
  table: Float32Array;
  documentWeight: Float32Array;
  queryWeight: Float32Array;
  nameWeight: Float32Array;
}

/**
 * The table row of a row entry's id: code rows hold each term twice over, as itself (ids 0..V-1,
 * weighted by `documentWeight`) and as part of a defined name (ids V..2V-1, by `nameWeight`), and
 * both read the term's one vector.
 */
const tableRow = (id: number, terms: number) => (id < terms ? id : id - terms);

/** The weighted sums of a batch's rows, normalised in place; returns the norms before. */
function forward(
  model: Model,
  rows: SparseRows,
  batch: readonly number[],
  side: Float32Array,
  out: Float32Array,
  norms: Float32Array,
): void {
  const { dims, table } = model;
  const terms = model.terms.length;
  out.fill(0);
  batch.forEach((row, i) => {
    const base = i * dims;
    for (let k = rows.offsets[row]!; k < rows.offsets[row + 1]!; k++) {
      const id = rows.ids[k]!;
      const c = rows.weights[k]! * side[id]!;
      const at = tableRow(id, terms) * dims;
      for (let d = 0; d < dims; d++) out[base + d]! += c * table[at + d]!;
    }
    let n = 0;
    for (let d = 0; d < dims; d++) n += out[base + d]! * out[base + d]!;
    n = Math.sqrt(n) || 1;
    norms[i] = n;
    for (let d = 0; d < dims; d++) out[base + d]! /= n;
  });
}

/** Gradients of the normalised vectors pushed back to the table and the side's weights. */
function backward(
  model: Model,
  rows: SparseRows,
  batch: readonly number[],
  side: Float32Array,
  unit: Float32Array,
  norms: Float32Array,
  grad: Float32Array,
  tableGrad: Float32Array,
  sideGrad: Float32Array,
): void {
  const { dims, table } = model;
  const terms = model.terms.length;
  batch.forEach((row, i) => {
    const base = i * dims;
    let dot = 0;
    for (let d = 0; d < dims; d++) dot += unit[base + d]! * grad[base + d]!;
    const inv = 1 / norms[i]!;
    for (let d = 0; d < dims; d++) grad[base + d] = (grad[base + d]! - unit[base + d]! * dot) * inv;
    for (let k = rows.offsets[row]!; k < rows.offsets[row + 1]!; k++) {
      const id = rows.ids[k]!;
      const a = rows.weights[k]!;
      const c = a * side[id]!;
      const at = tableRow(id, terms) * dims;
      let g = 0;
      for (let d = 0; d < dims; d++) {
        const du = grad[base + d]!;
        tableGrad[at + d]! += c * du;
        g += table[at + d]! * du;
      }
      sideGrad[id]! += a * g;
    }
  });
}

/**
 * Batches of pair indices: each package's pairs in groups of at most `group`, the groups shuffled
 * together, so that a batch holds many packages and, from each, neighbours that are hard to tell
 * apart (the eval ranks chunks of one codebase against each other).
 */
export function batches(pairs: readonly Pair[], settings: TrainSettings, random: () => number): number[][] {
  const byPackage = new Map<string, number[]>();
  pairs.forEach((p, i) => byPackage.set(p.package, [...(byPackage.get(p.package) ?? []), i]));
  const groups: number[][] = [];
  for (const indices of byPackage.values()) {
    shuffle(indices, random);
    for (let i = 0; i < indices.length; i += settings.packageGroup)
      groups.push(indices.slice(i, i + settings.packageGroup));
  }
  const flat = shuffle(groups, random).flat();
  const out: number[][] = [];
  for (let i = 0; i + settings.batchSize <= flat.length; i += settings.batchSize)
    out.push(flat.slice(i, i + settings.batchSize));
  return out;
}

/**
 * BM25 of every question against every code text of a batch (k1 1.2, b 0.75, idf over the batch's
 * codes, identifier-split tokens as the eval's baseline takes them), each row scaled by its best, into
 * `out` (b × b).
 */
export function batchBm25(
  queryTokens: readonly string[][],
  codeTokens: readonly string[][],
  batch: readonly number[],
  out: Float32Array,
): void {
  const b = batch.length;
  const postings = new Map<string, [number, number][]>();
  let total = 0;
  const lengths = batch.map((row, j) => {
    const counts = new Map<string, number>();
    for (const t of codeTokens[row]!) counts.set(t, (counts.get(t) ?? 0) + 1);
    for (const [t, n] of counts) {
      let list = postings.get(t);
      if (!list) postings.set(t, (list = []));
      list.push([j, n]);
    }
    total += codeTokens[row]!.length;
    return codeTokens[row]!.length;
  });
  const avg = total / b || 1;
  out.fill(0);
  batch.forEach((row, i) => {
    const base = i * b;
    for (const t of queryTokens[row]!) {
      const list = postings.get(t);
      if (!list) continue;
      const idf = Math.log(1 + (b - list.length + 0.5) / (list.length + 0.5));
      for (const [j, tf] of list) out[base + j]! += (idf * tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * lengths[j]!) / avg));
    }
    let max = 0;
    for (let j = 0; j < b; j++) max = Math.max(max, out[base + j]!);
    if (max > 0) for (let j = 0; j < b; j++) out[base + j]! /= max;
  });
}

export interface TrainProgress {
  epoch: number;
  step: number;
  steps: number;
  loss: number;
}

export function train(
  pairs: readonly Pair[],
  settings: TrainSettings,
  onProgress: (p: TrainProgress) => void = () => {},
  onEpoch: (epoch: number, model: Model) => void = () => {},
): Model {
  const tokenizer = new ModelTokenizer();
  const queryTerms = pairs.map((p) => tokenizer.terms(p.query));
  const codeTerms = pairs.map((p) => tokenizer.terms(p.code));
  const terms = buildVocabulary([...queryTerms, ...codeTerms], settings.vocabSize, settings.minCount);
  const vocab = new Map(terms.map((t, i) => [t, i]));
  const queries = toRows(queryTerms, vocab);
  const codes = toDocumentRows(
    codeTerms,
    pairs.map((p) => tokenizer.nameTerms(p.code)),
    vocab,
  );
  const v = terms.length;
  const dims = settings.dims;
  const random = prng(settings.seed);
  // Gaussian rows (Box-Muller): a term starts out matching only itself.
  const table = new Float32Array(v * dims);
  for (let i = 0; i < table.length; i++) {
    const u = Math.max(random(), 1e-12);
    table[i] = (Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random())) / Math.sqrt(dims);
  }
  // Both sides start from the term's inverse document frequency: BM25's prior, which training revises.
  const df = new Float32Array(v);
  for (const rows of [queries, codes]) for (const id of rows.ids) if (id < v) df[id]!++;
  const idf = Float32Array.from(df, (n) => Math.log(1 + (2 * pairs.length) / (1 + n)));
  // The code side's weights, its terms' then its names' (both starting from idf), trained as one.
  const codeSide = new Float32Array(2 * v);
  codeSide.set(idf, 0);
  codeSide.set(idf, v);
  const model: Model = {
    terms,
    dims,
    table,
    documentWeight: codeSide.subarray(0, v),
    queryWeight: idf.slice(),
    nameWeight: codeSide.subarray(v),
  };
  const usable = pairs
    .map((_, i) => i)
    .filter((i) => queries.offsets[i + 1]! > queries.offsets[i]! && codes.offsets[i + 1]! > codes.offsets[i]!);
  const used = usable.map((i) => pairs[i]!);

  const optTable = new Adam(model.table, settings.learningRate);
  const optQuery = new Adam(model.queryWeight, settings.learningRate);
  const optDoc = new Adam(codeSide, settings.learningRate);
  const b = settings.batchSize;
  const q = new Float32Array(b * dims);
  const c = new Float32Array(b * dims);
  const qn = new Float32Array(b);
  const cn = new Float32Array(b);
  const s = new Float32Array(b * b);
  const colMax = new Float32Array(b);
  const colSum = new Float32Array(b);
  const g = new Float32Array(b * b);
  const dq = new Float32Array(b * dims);
  const dc = new Float32Array(b * dims);
  const tableGrad = new Float32Array(v * dims);
  const queryGrad = new Float32Array(v);
  const docGrad = new Float32Array(2 * v);
  const scale = 1 / settings.temperature;
  const lexical = settings.lexicalWeight;
  const lexicalScores = new Float32Array(lexical > 0 ? b * b : 0);
  const queryTokens = lexical > 0 ? pairs.map((p) => analyze(p.query, { splitIdentifiers: true })) : [];
  const codeTokens = lexical > 0 ? pairs.map((p) => analyze(p.code, { splitIdentifiers: true })) : [];

  for (let epoch = 1; epoch <= settings.epochs; epoch++) {
    const plan = batches(used, settings, random);
    plan.forEach((local, step) => {
      const batch = local.map((i) => usable[i]!);
      forward(model, queries, batch, model.queryWeight, q, qn);
      forward(model, codes, batch, codeSide, c, cn);
      if (lexical > 0) batchBm25(queryTokens, codeTokens, batch, lexicalScores);
      for (let i = 0; i < b; i++)
        for (let j = 0; j < b; j++) {
          let dot = 0;
          for (let d = 0; d < dims; d++) dot += q[i * dims + d]! * c[j * dims + d]!;
          if (lexical > 0) dot += lexical * lexicalScores[i * b + j]!;
          s[i * b + j] = dot * scale;
        }
      // Loss and its gradient with respect to S: rows are question -> code, columns code -> question.
      let loss = 0;
      colMax.fill(-Infinity);
      for (let i = 0; i < b; i++) for (let j = 0; j < b; j++) colMax[j] = Math.max(colMax[j]!, s[i * b + j]!);
      colSum.fill(0);
      for (let i = 0; i < b; i++) for (let j = 0; j < b; j++) colSum[j]! += Math.exp(s[i * b + j]! - colMax[j]!);
      for (let i = 0; i < b; i++) {
        let max = -Infinity;
        for (let j = 0; j < b; j++) max = Math.max(max, s[i * b + j]!);
        let sum = 0;
        for (let j = 0; j < b; j++) sum += Math.exp(s[i * b + j]! - max);
        loss += -(s[i * b + i]! - max - Math.log(sum)) - (s[i * b + i]! - colMax[i]! - Math.log(colSum[i]!));
        for (let j = 0; j < b; j++) {
          const row = Math.exp(s[i * b + j]! - max) / sum;
          const col = Math.exp(s[i * b + j]! - colMax[j]!) / colSum[j]!;
          g[i * b + j] = ((row + col - (i === j ? 2 : 0)) / (2 * b)) * scale;
        }
      }
      dq.fill(0);
      dc.fill(0);
      for (let i = 0; i < b; i++)
        for (let j = 0; j < b; j++) {
          const gij = g[i * b + j]!;
          if (gij === 0) continue;
          for (let d = 0; d < dims; d++) {
            dq[i * dims + d]! += gij * c[j * dims + d]!;
            dc[j * dims + d]! += gij * q[i * dims + d]!;
          }
        }
      tableGrad.fill(0);
      queryGrad.fill(0);
      docGrad.fill(0);
      backward(model, queries, batch, model.queryWeight, q, qn, dq, tableGrad, queryGrad);
      backward(model, codes, batch, codeSide, c, cn, dc, tableGrad, docGrad);
      optTable.step(tableGrad);
      optQuery.step(queryGrad);
      optDoc.step(docGrad);
      onProgress({ epoch, step: step + 1, steps: plan.length, loss: loss / (2 * b) });
    });
    onEpoch(epoch, model);
  }
  return model;
}

/** Rows as int8 with one scale each: a quarter of the size, and the ranking barely moves. */
export function quantize(model: Model, name: string): StaticModelParts {
  const { terms, dims } = model;
  const table = new Int8Array(terms.length * dims);
  const scale = new Float32Array(terms.length);
  for (let t = 0; t < terms.length; t++) {
    let max = 0;
    for (let d = 0; d < dims; d++) max = Math.max(max, Math.abs(model.table[t * dims + d]!));
    const s = max / 127 || 1;
    scale[t] = s;
    for (let d = 0; d < dims; d++) table[t * dims + d] = Math.round(model.table[t * dims + d]! / s);
  }
  return {
    name,
    dims,
    terms,
    table,
    scale,
    documentWeight: model.documentWeight,
    queryWeight: model.queryWeight,
    nameWeight: model.nameWeight,
  };
}
