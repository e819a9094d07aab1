/**
 * Hybrid search: the vector channel's inner products and the lexical channel's BM25 scores, added
 * with the lexical score scaled to the query's best (so 1 is the best keyed-term match) and
 * weighted; with the translation channel, all three scaled to their candidates' range and added
 * (protocol/fusion.ts). Score fusion rather than rank fusion: a learned model's cosine says how close
 * a chunk is, not only that it came k-th, and on the dev eval it ranked better than reciprocal rank
 * fusion at every lexical weight tried (`LEXICAL_WEIGHT`, protocol/fusion.ts).
 */
import type { z } from "zod";
import type { SearchHit } from "../protocol/sync.js";
import type { Catalogue } from "./catalogue.js";
import type { IndexBackend } from "./index-backend.js";
import type { SearchInput } from "./workspace-rpc.js";
import { fuseThree } from "../protocol/fusion.js";

/** Candidates each channel contributes to fusion, per result asked for. */
const CANDIDATES_PER_RESULT = 4;
const MIN_CANDIDATES = 50;
/** A query vector with no component: none of the question's terms is in the model's vocabulary. */
const isZero = (vector: Float32Array) => vector.every((x) => x === 0);

/**
 * Hybrid search: the vector channel and the keyed-term BM25 channel each return candidates, and the
 * translation channel too when the question came with translations and the backend can rank them,
 * fused by score (`fuseThree`); hits the catalogue no longer holds are dropped. The score returned is
 * the fused score, with each channel's own beside it. Without a query vector (an index whose model the edge cannot
 * run), or with one of zeros (a question of words the model does not know, whose vector ranking
 * would be arbitrary), the lexical channel alone ranks, its vector scores null.
 */
export async function hybridSearch(
  backend: IndexBackend,
  catalogue: Catalogue,
  query: z.output<typeof SearchInput>,
): Promise<SearchHit[]> {
  const filter = {
    ...(query.pathPrefix ? { pathPrefix: query.pathPrefix } : {}),
    ...(query.language ? { language: query.language } : {}),
  };
  const n = Math.max(MIN_CANDIDATES, query.topK * CANDIDATES_PER_RESULT);
  const translated = query.translated && query.translated.length > 0 ? query.translated : null;
  const [byVector, byTerms, byTranslation] = await Promise.all([
    query.vector && !isZero(query.vector) ? backend.queryVector(query.vector, n, filter) : Promise.resolve([]),
    query.terms.length > 0 ? backend.queryTerms(query.terms, n, filter, query.termWeights) : Promise.resolve([]),
    translated && backend.queryTranslated
      ? backend.queryTranslated(translated, n, filter, query.translatedWeights)
      : Promise.resolve(null),
  ]);
  const fused = fuseThree(byVector, byTerms, byTranslation ?? []);
  const vectorScores = new Map(byVector.map((h) => [h.id, h.score]));
  const termScores = new Map(byTerms.map((h) => [h.id, h.score]));
  const translationScores = byTranslation && new Map(byTranslation.map((h) => [h.id, h.score]));
  const live = catalogue.lookup(fused.slice(0, query.topK * 2).map((h) => Number(h.id)));
  return fused
    .filter((h) => live.has(Number(h.id)))
    .slice(0, query.topK)
    .map((h) => {
      const row = live.get(Number(h.id))!;
      return {
        path: row.path,
        startLine: row.startLine,
        endLine: row.endLine,
        chunkId: row.chunkId,
        score: h.score,
        channels: {
          vector: vectorScores.get(h.id) ?? null,
          lexical: termScores.get(h.id) ?? null,
          ...(translationScores ? { translation: translationScores.get(h.id) ?? null } : {}),
        },
      };
    });
}
