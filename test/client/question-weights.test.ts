import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { HotIndex } from "../../durable-objects/hot-index.js";
import { parseStaticModel, questionTermWeights } from "../../protocol/embedder/static.js";
import { TermKey } from "../../protocol/keyed-terms.js";

const MODEL = new URL("../../protocol/embedder/model/", import.meta.url);
const shipped = parseStaticModel(
  readFileSync(new URL("weights.bin", MODEL)),
  readFileSync(new URL("vocab.txt", MODEL), "utf8"),
);
const key = new TermKey(new Uint8Array(32).fill(5));

function index(texts: string[]) {
  const hot = new HotIndex(32);
  texts.forEach((text, id) => {
    const t = key.chunk(text);
    hot.add({ id, language: 0, scale: 1, int8: new Int8Array(32), termIds: t.ids, termCounts: t.counts });
  });
  return hot;
}

describe("how much each word of a question says", () => {
  it("weighs a term by the model's query weight against the vocabulary's mean, square-rooted and capped; 1 for a term it does not know", () => {
    const weigh = questionTermWeights(shipped);
    let sum = 0;
    for (const w of shipped.queryWeight) sum += Math.max(0, w);
    const mean = sum / shipped.queryWeight.length;
    for (const term of ["detect", "sery", "only", "limit", "pars"]) {
      const id = shipped.vocab.get(term);
      expect(shipped.queryWeight[id!], term).toBeTypeOf("number");
      expect(weigh(term)).toBeCloseTo(Math.min(4, Math.sqrt(Math.max(0, shipped.queryWeight[id!]!) / mean)), 6);
    }
    expect(weigh("#parseduration")).toBe(1);
    expect(weigh("zzqxnotaword")).toBe(1);
    // The model learned that "only" says less of where code is than "series" (stemmed "sery") does.
    expect(weigh("only")).toBeLessThan(weigh("sery"));
  });

  it("gives each of a question's ids its term's weight, the names' field's id too", () => {
    const weigh = (term: string) => (term === "evict" ? 3 : term === "#evictcache" ? 2 : 0.5);
    const asked = key.weightedQuestion("evictCache now", weigh);
    const pairs = new Map(asked.ids.map((id, i) => [id, asked.weights[i]]));
    expect(pairs.get(key.id("evict"))).toBe(3);
    expect(pairs.get(key.id("#evictcache"))).toBe(2);
    expect(pairs.get(key.nameId("#evictcache"))).toBe(2);
    expect(pairs.get(key.id("now"))).toBe(0.5);
    expect(pairs.get(key.nameId("now"))).toBe(0.5);
    // An identifier's parts do not look among the names (TermKey.question).
    expect(pairs.has(key.nameId("evict"))).toBe(false);
    expect(asked.ids).toEqual(key.question("evictCache now"));
    expect(asked.weights).toHaveLength(asked.ids.length);
  });

  it("ranks by the weighted terms in BM25: a term at weight 0 adds nothing, and the heavier of two equally rare terms ranks its chunk first", () => {
    const hot = index([
      "function drainQueue(queue) { queue.flush() }",
      "function openSocket(host) { return connect(host) }",
      "function pauseStream(stream) { stream.hold() }",
      "function drainPool(pool) { pool.close() }",
    ]);
    const terms = [key.id("queu"), key.id("pool")];
    const both = hot.queryTerms(terms, 10)!.map((h) => h.id);
    expect(both.sort()).toEqual([0, 3]);
    expect(hot.queryTerms(terms, 10, {}, [1, 0])!.map((h) => h.id)).toEqual([0]);
    expect(hot.queryTerms(terms, 10, {}, [0.2, 1])![0]!.id).toBe(3);
    expect(hot.queryTerms(terms, 10, {}, [1, 0.2])![0]!.id).toBe(0);
    // Without weights, every term counts 1: the same scores as weights of 1.
    expect(hot.queryTerms(terms, 10)).toEqual(hot.queryTerms(terms, 10, {}, [1, 1]));
  });

  it("weighs each translated word's part of the likelihood, and its length penalty with it", () => {
    const hot = index([
      "function purgeAll(store) { store.wipe() }",
      "function tallyAll(store) { return store.count() }",
      "function drawAll(canvas) { canvas.paint() }",
    ]);
    const word = (term: string, alternatives: string[]) => ({
      term: key.id(term),
      alternatives: alternatives.map((t) => key.id(t)),
      probabilities: alternatives.map(() => 0.5),
    });
    const words = [word("remov", ["purg"]), word("count", ["talli"])];
    expect(hot.queryTranslated(words, 10, {}, [1, 0.1])![0]!.id).toBe(0);
    expect(hot.queryTranslated(words, 10, {}, [0.1, 1])![0]!.id).toBe(1);
    expect(hot.queryTranslated(words, 10)).toEqual(hot.queryTranslated(words, 10, {}, [1, 1]));
  });
});
