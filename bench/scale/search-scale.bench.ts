import { env } from "cloudflare:test";
import { expect, it } from "vitest";
import type { IndexedChunk } from "../../durable-objects/workspace.js";
import { MAX_ALTERNATIVES } from "../../protocol/embedder/translation.js";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import type { CommitResponse, SearchResponse } from "../../protocol/sync.js";
import { VectorKey } from "../../protocol/vector-key.js";
import { LexicalEmbedder } from "../../workers/embedders/builtin.js";
import type { Embedder } from "../../workers/embedders/embedder.js";
import { StaticEmbedder } from "../../workers/embedders/static.js";
import { bundledStaticModel } from "../../workers/embedders/static-model.js";
import { median, quantile } from "../stats.js";

/**
 * Search latency at a number of chunks, for each built-in embedder's vector shape in the same run:
 * the old `sextant-lexical-v1` (512 dimensions) and the learned one the Worker bundles (128). Both
 * workspaces get the same Zipf-like keyed terms and synthetic unit vectors of their size, committed
 * through the Workspace object's RPC in interleaved batches of 2,000 files of 5 chunks; then
 * `SCALE_QUERIES` warm searches each (vector + 8 terms, top 10), alternating between the two with the
 * same terms, timed around the RPC. The new shape's index also holds the names' field a client keys
 * today (`TermKey.chunk`): each chunk gets `NAME_TERMS` more ids, Zipf-drawn from an id space of their
 * own, and each of its questions asks every word's id in that field too (`TermKey.question`), 16 ids
 * where the old shape asks 8, each with a weight (`questionTermWeights`). The question's embedding happens in the route, before the RPC: it is
 * measured here with the Worker's own embedders and added to the figures. The new shape is also asked
 * each question with translations (8 words of `MAX_ALTERNATIVES` Zipf-drawn alternatives each, as many
 * as a client sends), in the same rotation, to price the translation channel against the same run's
 * two-channel search; so is the old shape, since a client sends translations whatever the embedder. The new shape's chunks each carry 2 or 3 definition pieces' vectors (`piecesOf`),
 * ranked with their chunk (`HotIndex.queryVector`).
 */
const VOCABULARY = 200_000;
/**
 * Names'-field ids per chunk: the dev eval's 1,441 chunks carry 27.6 distinct keyed terms with the
 * field and 23.8 without, so about 4 more.
 */
const NAME_TERMS = 4;
/**
 * Definition pieces of the new shape's chunk `i` (its index holds each chunk's pieces beside it): 2 or
 * 3 in turn, 2.5 a chunk, the most the dev eval's codebases average (1.4 to 2.5, at most 3 a chunk;
 * `npm run eval:dev`'s "vectors/chunk" less the chunk's own).
 */
const piecesOf = (i: number) => 2 + (i % 2);
/** The names' field's ids, apart from the body terms' as a keyed prefix keeps them. */
const nameId = (term: number) => (term + 0x8000_0000) >>> 0;
/** Old first: each ratio is new over old. */
const EMBEDDERS: readonly Embedder[] = [
  new LexicalEmbedder(),
  new StaticEmbedder(bundledStaticModel, { pieces: true }),
];
/** Typical 12-word questions, each embedded the way the search route does (embed, then rotate). */
const QUESTIONS = [
  "where does the workspace object store keyed terms for each committed chunk",
  "how are expired api keys revoked before the cache entry times out",
  "which function retries a failed upload with backoff after a rate limit",
  "where is the merkle tree diffed against the edge root during sync",
  "how does the gateway pick another backend when the first one fails",
  "what parses the tree sitter grammar for python files inside the worker",
];
const QUESTION_BATCH = 2000;

function random(seed: number) {
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

function unitVector(next: () => number, dims: number): Float32Array {
  const v = new Float32Array(dims);
  let norm = 0;
  for (let i = 0; i < dims; i++) {
    // Sum of uniforms: near enough Gaussian for a random direction.
    const x = next() + next() + next() - 1.5;
    v[i] = x;
    norm += x * x;
  }
  norm = Math.sqrt(norm);
  for (let i = 0; i < dims; i++) v[i]! /= norm;
  return v;
}

const zipfTerm = (next: () => number) => Math.floor(VOCABULARY ** next()) >>> 0;

/** A chunk's terms with its names'-field ids added once each, as `TermKey.withExtra` adds them. */
function withNames(terms: { ids: Uint32Array; counts: Uint16Array }, names: number[]) {
  return {
    ids: Uint32Array.from([...terms.ids, ...names]),
    counts: Uint16Array.from([...terms.counts, ...names.map(() => 1)]),
  };
}
const segment = (prefix: string, n: number) => `${prefix}${n.toString(36)}`.padEnd(43, "A");
const hex = (n: number) => n.toString(16).padStart(64, "0");
const ms = (x: number) => `${x.toFixed(1)} ms`;
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;

/**
 * A question's cost in the route, ms: embedding it and rotating it by the vector key. workerd's
 * clock moves only at I/O, so each batch ends with an RPC, and a batch of none gives what that adds.
 */
async function questionMs(embedder: Embedder, io: () => Promise<unknown>): Promise<number> {
  const key = new Uint8Array(32).fill(7);
  const batch = async (n: number) => {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      const [vector] = await embedder.embed([QUESTIONS[i % QUESTIONS.length]!], "query");
      new VectorKey(key, embedder.dims).apply(vector!);
    }
    await io();
    return performance.now() - t0;
  };
  // The first call parses the static model: once per isolate, measured by bench/embedder-coldstart.ts.
  await batch(200);
  const none: number[] = [];
  const many: number[] = [];
  for (let r = 0; r < 5; r++) {
    none.push(await batch(0));
    many.push(await batch(QUESTION_BATCH));
  }
  return Math.max(0, median(many) - median(none)) / QUESTION_BATCH;
}

interface Shape {
  embedder: Embedder;
  stub: ReturnType<typeof workspaceStub>;
  vectors: () => number;
  times: number[];
  /** The same questions with translations. */
  translatedTimes: number[];
  coldMs: number;
  questionMs: number;
}

it("measures search latency at each scale point for the old and the new embedder's vectors", async () => {
  const settings = env as unknown as { SCALE_POINTS: string; SCALE_QUERIES: string };
  const points = settings.SCALE_POINTS.split(",").map(Number);
  const queries = Number(settings.SCALE_QUERIES);
  const lines: string[] = [];
  for (const n of points) {
    const shapes: Shape[] = [];
    for (const embedder of EMBEDDERS) {
      const stub = workspaceStub(env, `scale-${n}-${embedder.dims}-${Date.now()}`);
      await stub.init({
        workspaceId: `ws_scale${n}d${embedder.dims}`,
        orgId: "org_bench",
        createdAt: new Date().toISOString(),
      });
      const vectors = random(n * 7919 + embedder.dims);
      shapes.push({ embedder, stub, vectors, times: [], translatedTimes: [], coldMs: 0, questionMs: 0 });
    }
    const terms = random(n);
    const files = Math.ceil(n / 5);
    const started = Date.now();
    for (let f0 = 0; f0 < files; f0 += 2000) {
      const upserts = [];
      const chunks: (Omit<IndexedChunk, "vector"> & { names: number[] })[] = [];
      for (let f = f0; f < Math.min(files, f0 + 2000); f++) {
        const path = `${segment("d", f % 100)}/${segment("f", f)}`;
        upserts.push({ path, hash: hex(f + 1), size: 1000 });
        for (let c = 0; c < 5 && f * 5 + c < n; c++) {
          const counts = new Map<number, number>();
          for (let t = 0; t < 30; t++) {
            const id = zipfTerm(terms);
            counts.set(id, (counts.get(id) ?? 0) + 1);
          }
          const names = new Set(Array.from({ length: NAME_TERMS }, () => nameId(zipfTerm(terms))));
          chunks.push({
            path,
            chunkId: hex(f * 5 + c + 1),
            startLine: c * 20 + 1,
            endLine: c * 20 + 20,
            language: "typescript",
            terms: { ids: Uint32Array.from(counts.keys()), counts: Uint16Array.from(counts.values()) },
            names: [...names],
          });
        }
      }
      for (const shape of shapes) {
        const vectored = chunks.map(({ names, ...chunk }, i) => ({
          ...chunk,
          ...(shape === shapes[1] ? { terms: withNames(chunk.terms, names) } : {}),
          vector: unitVector(shape.vectors, shape.embedder.dims),
          ...(shape === shapes[1]
            ? { pieces: Array.from({ length: piecesOf(i) }, () => unitVector(shape.vectors, shape.embedder.dims)) }
            : {}),
        }));
        const result = (await shape.stub.commit({ upserts, deletes: [] }, vectored)) as CommitResponse;
        expect(result.applied).toBe(upserts.length);
      }
    }
    const loadMs = Date.now() - started;
    const ask = async (shape: Shape, queryTerms: number[], translated?: ReturnType<typeof translations>) => {
      const now = shape === shapes[1];
      const asked = now ? queryTerms.flatMap((t) => [t, nameId(t)]) : queryTerms;
      const t0 = performance.now();
      const answer = (await shape.stub.search({
        vector: unitVector(shape.vectors, shape.embedder.dims),
        terms: asked,
        // The new shape's questions weigh their terms (`questionTermWeights`), as the route sends them.
        ...(now ? { termWeights: asked.map((_, i) => 0.5 + (i % 4) / 4) } : {}),
        ...(now && translated ? { translatedWeights: translated.map((_, i) => 0.5 + (i % 4) / 4) } : {}),
        topK: 10,
        ...(translated ? { translated } : {}),
      })) as SearchResponse;
      const elapsed = performance.now() - t0;
      expect(answer.results.length).toBe(10);
      return elapsed;
    };
    const queryTerms = () => Array.from({ length: 8 }, () => zipfTerm(terms));
    const translations = (words: number[]): { term: number; alternatives: number[]; probabilities: number[] }[] =>
      words.map((term) => ({
        term,
        alternatives: Array.from({ length: MAX_ALTERNATIVES }, () => zipfTerm(terms)),
        probabilities: Array.from({ length: MAX_ALTERNATIVES }, (_, i) => 0.5 / (i + 1)),
      }));
    const first = queryTerms();
    for (const shape of shapes) shape.coldMs = await ask(shape, first);
    for (let i = 0; i < 10; i++) {
      const same = queryTerms();
      for (const shape of shapes) await ask(shape, same);
    }
    // Alternating, and each pair in turn led by the other, so the machine's load falls on both alike.
    for (let i = 0; i < queries; i++) {
      const same = queryTerms();
      const order = i % 2 === 0 ? shapes : [...shapes].reverse();
      for (const shape of order) shape.times.push(await ask(shape, same));
      // With translations too, both shapes in the same order: a client sends them whatever the embedder.
      const translated = translations(same);
      for (const shape of order) shape.translatedTimes.push(await ask(shape, same, translated));
    }
    for (const shape of shapes) shape.questionMs = await questionMs(shape.embedder, () => shape.stub.indexStats());
    for (const shape of shapes) {
      const stats = (await shape.stub.indexStats())!;
      const { times } = shape;
      lines.push(
        [
          `${n.toLocaleString("en-US")} chunks`,
          `p50 ${ms(quantile(times, 0.5))}`,
          `p95 ${ms(quantile(times, 0.95))}`,
          `p99 ${ms(quantile(times, 0.99))}`,
          `max ${ms(Math.max(...times))}`,
          `first query ${shape.coldMs.toFixed(0)} ms`,
          `index memory ${((stats.backend?.hotBytes ?? 0) / 2 ** 20).toFixed(1)} MiB`,
          `vectors ${stats.backend?.exact ? "int8, exact" : "1-bit estimate"}`,
          `${(stats.backend?.pieces ?? 0).toLocaleString("en-US")} definition pieces`,
          `${stats.backend?.segments} segments, ${((stats.backend?.segmentBytes ?? 0) / 2 ** 20).toFixed(0)} MiB on R2`,
          `${shape.embedder.dims} dims (${shape.embedder.model}), question embedded in ${(shape.questionMs * 1000).toFixed(0)} µs`,
        ].join(" | "),
      );
      console.log(lines.at(-1));
    }
    const [old, now] = shapes as [Shape, Shape];
    const at = (s: Shape, q: number) => quantile(s.times, q);
    const withQuestion = (s: Shape, q: number) => at(s, q) + s.questionMs;
    lines.push(
      `${n.toLocaleString("en-US")} chunks | new/old (${now.embedder.dims}/${old.embedder.dims} dims), search alone: ` +
        `p50 ${ratio(at(now, 0.5), at(old, 0.5))}, p95 ${ratio(at(now, 0.95), at(old, 0.95))}, p99 ${ratio(at(now, 0.99), at(old, 0.99))}; ` +
        `with the question's embedding: p50 ${ms(withQuestion(now, 0.5))} / ${ms(withQuestion(old, 0.5))} (${ratio(withQuestion(now, 0.5), withQuestion(old, 0.5))}), ` +
        `p95 ${ms(withQuestion(now, 0.95))} / ${ms(withQuestion(old, 0.95))} (${ratio(withQuestion(now, 0.95), withQuestion(old, 0.95))}), ` +
        `p99 ${ms(withQuestion(now, 0.99))} / ${ms(withQuestion(old, 0.99))} (${ratio(withQuestion(now, 0.99), withQuestion(old, 0.99))}) | ` +
        `both loaded in ${(loadMs / 1000).toFixed(1)} s`,
    );
    console.log(lines.at(-1));
    const translated = (q: number) => quantile(now.translatedTimes, q);
    const oldTranslated = (q: number) => quantile(old.translatedTimes, q);
    lines.push(
      `${n.toLocaleString("en-US")} chunks | new shape with translations (8 words x ${MAX_ALTERNATIVES} alternatives), search alone, ` +
        `against the same shape without / the old embedder's without / the old embedder's with them: ` +
        [0.5, 0.95, 0.99]
          .map(
            (q) =>
              `p${Math.round(q * 100)} ${ms(translated(q))} (${ratio(translated(q), at(now, q))} / ${ratio(translated(q), at(old, q))} / ` +
              `${ratio(translated(q), oldTranslated(q))}, the old's ${ms(oldTranslated(q))})`,
          )
          .join(", "),
    );
    console.log(lines.at(-1));
    for (const shape of shapes) await shape.stub.destroy();
  }
  console.log(
    `\nSearch latency (${queries} warm queries each, top 10, hybrid, the two shapes alternating):\n${lines.join("\n")}`,
  );
});
