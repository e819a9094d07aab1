import { definedNames } from "./names.js";
import { forEachWord, splitIdentifier, stem } from "./tokens.js";

/**
 * The learned built-in embedder: a static embedding model. One table of token vectors is shared by
 * questions and code (so a word starts out matching itself), and each token has a learned weight per
 * side (how much it says about a question, how much about code). A text's vector is the weighted sum
 * of its tokens' vectors, normalised. Code has one field more: the names a chunk defines
 * (`definedNames`), whose tokens add their own learned weight, since a question most often describes
 * what the function it asks about is called. No attention and no position: embedding a chunk is a few
 * hundred table lookups, cheap enough for the Worker to embed every chunk of a commit.
 *
 * The weights file (`SXSE`, little-endian):
 *   magic "SXSE" | u32 format (2) | u32 vocabulary size V | u32 dims D | u32 name length N | name (UTF-8,
 *   padded to 4 bytes) | f32 scale[V] | f32 documentWeight[V] | f32 queryWeight[V] | f32 nameWeight[V] |
 *   i8 table[V × D]
 * Row t of the table times scale[t] is token t's vector. The vocabulary is a separate text file, one
 * term per line in row order, as `modelTerms` spells them.
 */
export const STATIC_FORMAT = 2;
const MAGIC = 0x45535853; // "SXSE" read as a little-endian u32
/** The f32 columns before the table: scale, documentWeight, queryWeight, nameWeight. */
const COLUMNS = 4;

export interface StaticModel {
  name: string;
  dims: number;
  vocab: Map<string, number>;
  /** The table dequantised once, at load: V × D floats. */
  vectors: Float32Array;
  documentWeight: Float32Array;
  queryWeight: Float32Array;
  /** A code token's weight again when it is part of a name the chunk defines. */
  nameWeight: Float32Array;
}

export type StaticSide = "document" | "query";

/** The model's raw parts, as the trainer writes them and `parseStaticModel` reads them. */
export interface StaticModelParts {
  name: string;
  dims: number;
  terms: readonly string[];
  table: Int8Array;
  scale: Float32Array;
  documentWeight: Float32Array;
  queryWeight: Float32Array;
  nameWeight: Float32Array;
}

export class StaticModelError extends Error {
  override readonly name = "StaticModelError";
}

export function serializeStaticModel(parts: StaticModelParts): { weights: Uint8Array; vocab: string } {
  const { terms, dims } = parts;
  const v = terms.length;
  const name = new TextEncoder().encode(parts.name);
  const namePadded = Math.ceil(name.length / 4) * 4;
  const header = 20 + namePadded;
  const bytes = new Uint8Array(header + COLUMNS * 4 * v + v * dims);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, MAGIC, true);
  view.setUint32(4, STATIC_FORMAT, true);
  view.setUint32(8, v, true);
  view.setUint32(12, dims, true);
  view.setUint32(16, name.length, true);
  bytes.set(name, 20);
  let at = header;
  for (const column of [parts.scale, parts.documentWeight, parts.queryWeight, parts.nameWeight]) {
    for (let i = 0; i < v; i++) view.setFloat32(at + 4 * i, column[i]!, true);
    at += 4 * v;
  }
  bytes.set(new Uint8Array(parts.table.buffer, parts.table.byteOffset, v * dims), at);
  if (terms.some((t) => t.includes("\n") || t === ""))
    throw new StaticModelError("A term is empty or holds a newline.");
  return { weights: bytes, vocab: terms.join("\n") + "\n" };
}

export function parseStaticModel(weights: ArrayBuffer | Uint8Array, vocabText: string): StaticModel {
  const bytes = weights instanceof Uint8Array ? weights : new Uint8Array(weights);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.byteLength < 20 || view.getUint32(0, true) !== MAGIC) throw new StaticModelError("Not a static model.");
  if (view.getUint32(4, true) !== STATIC_FORMAT)
    throw new StaticModelError(`Static model format ${view.getUint32(4, true)} is not ${STATIC_FORMAT}.`);
  const v = view.getUint32(8, true);
  const dims = view.getUint32(12, true);
  const nameLength = view.getUint32(16, true);
  const header = 20 + Math.ceil(nameLength / 4) * 4;
  if (bytes.byteLength !== header + COLUMNS * 4 * v + v * dims)
    throw new StaticModelError(`A static model of ${v} × ${dims} cannot be ${bytes.byteLength} bytes.`);
  const name = new TextDecoder().decode(bytes.subarray(20, 20 + nameLength));
  const terms = vocabText.split("\n");
  if (terms.at(-1) === "") terms.pop();
  if (terms.length !== v) throw new StaticModelError(`The vocabulary has ${terms.length} terms; the weights ${v}.`);
  const column = (i: number) => {
    const out = new Float32Array(v);
    const at = header + 4 * v * i;
    for (let j = 0; j < v; j++) out[j] = view.getFloat32(at + 4 * j, true);
    return out;
  };
  const scale = column(0);
  const table = new Int8Array(bytes.buffer, bytes.byteOffset + header + COLUMNS * 4 * v, v * dims);
  const vectors = new Float32Array(v * dims);
  for (let t = 0; t < v; t++) {
    const s = scale[t]!;
    for (let d = 0; d < dims; d++) vectors[t * dims + d] = table[t * dims + d]! * s;
  }
  const vocab = new Map<string, number>();
  terms.forEach((term, i) => vocab.set(term, i));
  return { name, dims, vocab, vectors, documentWeight: column(1), queryWeight: column(2), nameWeight: column(3) };
}

/**
 * The model's terms of a text, for questions and code alike: identifiers split into their words
 * (camelCase, snake_case, digits), lower-cased and lightly stemmed. Unlike the lexical channel's
 * tokens nothing is a stop word: the model learns how little "the" or "return" says.
 */
export class ModelTokenizer {
  readonly #words = new Map<string, string[]>();

  terms(text: string): string[] {
    const out: string[] = [];
    forEachWord(text, (word) => {
      for (const term of this.#word(word)) out.push(term);
    });
    return out;
  }

  /** The terms of the names `text` defines (`definedNames`), each once. */
  nameTerms(text: string): string[] {
    return [...new Set(definedNames(text).flatMap((name) => this.#word(name)))];
  }

  #word(word: string): string[] {
    let terms = this.#words.get(word);
    if (!terms) {
      terms = splitIdentifier(word).map(stem);
      if (this.#words.size < 100_000) this.#words.set(word, terms);
    }
    return terms;
  }
}

/**
 * A text's token ids and how often each occurs, in first-seen order: what the embedding sums over.
 * Terms outside the vocabulary are dropped (the keyed lexical channel still matches them exactly).
 */
export function termCounts(model: Pick<StaticModel, "vocab">, terms: readonly string[]): Map<number, number> {
  const counts = new Map<number, number>();
  for (const term of terms) {
    const id = model.vocab.get(term);
    if (id !== undefined) counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

/** How a term's count scales its vector: sublinear, so one name repeated fifty times does not drown the rest. */
export const countWeight = (count: number) => 1 + Math.log(count);

export function embedStatic(
  model: StaticModel,
  text: string,
  side: StaticSide,
  tokenizer = new ModelTokenizer(),
): Float32Array {
  const { dims, vectors } = model;
  const out = new Float32Array(dims);
  const add = (id: number, w: number) => {
    const row = id * dims;
    for (let d = 0; d < dims; d++) out[d]! += w * vectors[row + d]!;
  };
  if (side === "query")
    for (const [id, count] of termCounts(model, tokenizer.terms(text)))
      add(id, model.queryWeight[id]! * countWeight(count));
  else {
    for (const [id, count] of termCounts(model, tokenizer.terms(text)))
      add(id, model.documentWeight[id]! * countWeight(count));
    for (const id of termCounts(model, tokenizer.nameTerms(text)).keys()) add(id, model.nameWeight[id]!);
  }
  let norm = 0;
  for (let d = 0; d < dims; d++) norm += out[d]! * out[d]!;
  norm = Math.sqrt(norm);
  if (norm > 0) for (let d = 0; d < dims; d++) out[d]! /= norm;
  return out;
}

/** Each model's mean query weight, computed once. */
const meanQueryWeights = new WeakMap<StaticModel, number>();

/** The most a term's weight can be against the mean term's. */
const MAX_TERM_WEIGHT = 4;

/**
 * How much each word of a question says, as the model learned it: the term's query-side weight over
 * the vocabulary's mean, square-rooted, at most `MAX_TERM_WEIGHT`; 1 for a term the model does not
 * know (a whole identifier, a rare word). The keyed lexical and translation channels weigh each
 * question term's part by it, so "at a time" or "only" count for less than "detect" or "series". On
 * the dev eval (`npm run eval:dev`) it took the lexical channel alone from 1.13x to 1.16x the
 * identifier-split BM25's MRR@10, and all three channels fused from 1.26x to 1.29x; the weight to the
 * first power scored the same fused, and the lexical channel alone 1.16x.
 */
export function questionTermWeights(model: StaticModel): (term: string) => number {
  let mean = meanQueryWeights.get(model);
  if (mean === undefined) {
    let sum = 0;
    for (const w of model.queryWeight) sum += Math.max(0, w);
    mean = sum / Math.max(1, model.queryWeight.length) || 1;
    meanQueryWeights.set(model, mean);
  }
  const m = mean;
  return (term) => {
    const id = model.vocab.get(term);
    if (id === undefined) return 1;
    return Math.min(MAX_TERM_WEIGHT, Math.sqrt(Math.max(0, model.queryWeight[id]!) / m));
  };
}
