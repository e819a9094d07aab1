import { describe, expect, it } from "vitest";
import { embedStatic, parseStaticModel, serializeStaticModel } from "../../protocol/embedder/static.js";
import {
  batchBm25,
  batches,
  buildVocabulary,
  DEFAULT_SETTINGS,
  prng,
  quantize,
  train,
  type Pair,
} from "../../train/trainer.js";

/**
 * Synthetic pairs whose questions and code share no word: each concept is asked about with one
 * word and written with another ("remove" / "unlink"), so only training can connect them.
 */
const CONCEPTS = [
  ["remove", "unlink"],
  ["attributes", "attrs"],
  ["properties", "props"],
  ["equality", "eqv"],
  ["combine", "zipper"],
  ["recreate", "rebuild"],
  ["representative", "findroot"],
  ["mutably", "mutref"],
] as const;
const FILLER = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"];

function pairs(n: number, seed: number): Pair[] {
  const random = prng(seed);
  return Array.from({ length: n }, (_, i) => {
    const [asked, written] = CONCEPTS[i % CONCEPTS.length]!;
    const noise = () => FILLER[Math.floor(random() * FILLER.length)]!;
    return {
      query: `how to ${asked} the ${noise()} item`,
      code: `function ${written}${noise()}(${noise()}) { return ${noise()}.${written}(); }`,
      package: `pkg${i % 13}`,
    };
  });
}

const settings = {
  ...DEFAULT_SETTINGS,
  name: "toy",
  dims: 16,
  batchSize: 32,
  packageGroup: 8,
  epochs: 6,
  learningRate: 0.02,
  minCount: 2,
};

describe("the static model trainer", () => {
  it("is deterministic: the same pairs and settings give the same weights, byte for byte", () => {
    const data = pairs(400, 1);
    const a = serializeStaticModel(quantize(train(data, settings), "toy"));
    const b = serializeStaticModel(quantize(train(data, settings), "toy"));
    expect(Buffer.from(a.weights).equals(Buffer.from(b.weights))).toBe(true);
    expect(a.vocab).toBe(b.vocab);
    const other = serializeStaticModel(quantize(train(data, { ...settings, seed: 7 }), "toy"));
    expect(Buffer.from(other.weights).equals(Buffer.from(a.weights))).toBe(false);
  });

  it("learns to match questions to code that shares none of their words", () => {
    const losses: number[] = [];
    const model = train(pairs(800, 2), settings, (p) => losses.push(p.loss));
    expect(losses.at(-1)!).toBeLessThan(losses[0]!);
    const { weights, vocab } = serializeStaticModel(quantize(model, "toy"));
    const loaded = parseStaticModel(weights, vocab);
    // Each concept's question, against every concept's code: the right one must come first.
    let right = 0;
    for (const [asked, written] of CONCEPTS) {
      const q = embedStatic(loaded, `how to ${asked} the item`, "query");
      const best = CONCEPTS.map(([, w]) => {
        const c = embedStatic(loaded, `function ${w}() { return x.${w}(); }`, "document");
        return { w, sim: c.reduce((s, x, i) => s + x * q[i]!, 0) };
      }).sort((a, b) => b.sim - a.sim)[0]!;
      if (best.w === written) right++;
    }
    expect(right).toBeGreaterThanOrEqual(CONCEPTS.length - 1);
  });

  it("learns a weight for the names code defines: a function is told from the one that calls it", () => {
    // Each definition calls the next concept's: the bag of words alone cannot tell the two apart.
    const random = prng(3);
    const noise = () => FILLER[Math.floor(random() * FILLER.length)]!;
    const data: Pair[] = Array.from({ length: 800 }, (_, i) => {
      const [asked, written] = CONCEPTS[i % CONCEPTS.length]!;
      const [, called] = CONCEPTS[(i + 1) % CONCEPTS.length]!;
      return {
        query: `how to ${asked} the ${noise()} item`,
        code: `function ${written}(${noise()}) { return ${called}(${noise()}); }`,
        package: `pkg${i % 13}`,
      };
    });
    const { weights, vocab } = serializeStaticModel(quantize(train(data, settings), "toy"));
    const loaded = parseStaticModel(weights, vocab);
    let right = 0;
    CONCEPTS.forEach(([asked, written], i) => {
      const [, called] = CONCEPTS[(i + 1) % CONCEPTS.length]!;
      const q = embedStatic(loaded, `how to ${asked} the item`, "query");
      const sim = (code: string) => embedStatic(loaded, code, "document").reduce((s, x, d) => s + x * q[d]!, 0);
      // The two have the same words, so only the name's weight can part them, and by a clear margin.
      const margin =
        sim(`function ${written}(x) { return ${called}(x); }`) - sim(`function ${called}(x) { return ${written}(x); }`);
      if (margin > 0.05) right++;
    });
    expect(right).toBe(CONCEPTS.length);
  });

  it("scores a batch's BM25 question by code, each row scaled to its best, for training beside the lexical channel", () => {
    const q = [["parse", "date"], ["render"], ["nothing"]];
    const c = [
      ["parse", "date", "iso"],
      ["render", "table"],
      ["parse", "json"],
    ];
    const out = new Float32Array(9);
    batchBm25(q, c, [0, 1, 2], out);
    expect(out[0]).toBe(1);
    expect(out[2]).toBeGreaterThan(0);
    expect(out[2]).toBeLessThan(1);
    expect(out[1]).toBe(0);
    expect([...out.subarray(3, 6)]).toEqual([0, 1, 0]);
    expect([...out.subarray(6, 9)]).toEqual([0, 0, 0]);
    // Trained with it, the model still learns, and differs from the model trained alone.
    const data = pairs(400, 1);
    const alone = serializeStaticModel(quantize(train(data, settings), "toy"));
    const beside = serializeStaticModel(quantize(train(data, { ...settings, lexicalWeight: 1 }), "toy"));
    expect(Buffer.from(beside.weights).equals(Buffer.from(alone.weights))).toBe(false);
  });

  it("keeps the terms found in the most texts, at least minCount times", () => {
    const vocab = buildVocabulary([["a", "b"], ["a"], ["a", "c"], ["b"]], 2, 2);
    expect(vocab).toEqual(["a", "b"]);
  });

  it("fills batches with groups of one package's pairs, each pair at most once", () => {
    const data = pairs(300, 3);
    const plan = batches(data, { ...settings, batchSize: 64, packageGroup: 8 }, prng(1));
    const seen = plan.flat();
    expect(new Set(seen).size).toBe(seen.length);
    expect(plan.every((b) => b.length === 64)).toBe(true);
    // Many packages side by side in each batch, not one package's pairs alone.
    for (const batch of plan) expect(new Set(batch.map((i) => data[i]!.package)).size).toBeGreaterThan(2);
  });
});
