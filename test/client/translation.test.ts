import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { HotIndex } from "../../durable-objects/hot-index.js";
import {
  MAX_ALTERNATIVES,
  MAX_TRANSLATED_WORDS,
  MAX_TRANSLATION_TERM_CHARS,
  parseTranslation,
  serializeTranslation,
  tableOf,
  translateQuestion,
  TranslationError,
} from "../../protocol/embedder/translation.js";
import { fuseScores, fuseThree } from "../../protocol/fusion.js";
import { TermKey } from "../../protocol/keyed-terms.js";
import { questionTranslations } from "../../client/sdk/node.js";
import { trainTranslation } from "../../train/translation.js";

/** Questions that say "remove" over code that says `purge`, and filler that keeps the words apart. */
function pairs() {
  const out: { query: string; code: string }[] = [];
  const things = ["user", "order", "invoice", "session", "token", "widget", "account", "folder"];
  for (const thing of things) {
    out.push({
      query: `Remove the ${thing} from the store.`,
      code: `function purge${thing}(store) { store.purge(${thing}) }`,
    });
    out.push({ query: `Count every ${thing}.`, code: `function tally${thing}s(all) { return all.tally() }` });
    out.push({
      query: `Render the ${thing} as text.`,
      code: `function draw${thing}(canvas) { canvas.paint(${thing}) }`,
    });
  }
  return out;
}

const settings = { minCount: 2, iterations: 5, keepAbove: 0.01 };

describe("the translation table", () => {
  it("learns that a question's word stands for a code term it never shares a spelling with", () => {
    const table = trainTranslation(pairs(), settings);
    const remove = table.get("remov")!;
    expect(remove.terms[0]).toBe("purg");
    expect(remove.probabilities[0]).toBeGreaterThan(0.3);
    expect(["canva", "paint"]).toContain(table.get("rend")!.terms[0]);
    for (const other of ["canva", "paint", "tal", "all"]) expect(remove.terms).not.toContain(other);
    // A word that the code spells as the question does translates to itself.
    expect(table.get("widget")!.terms[0]).toBe("widget");
  });

  it("is the same, byte for byte, from the same pairs", () => {
    const a = serializeTranslation(trainTranslation(pairs(), settings));
    const b = serializeTranslation(trainTranslation(pairs(), settings));
    expect(Buffer.from(a.table).equals(Buffer.from(b.table))).toBe(true);
    expect(a.terms).toBe(b.terms);
  });

  it("reads back what it writes, and refuses a file that is not one", () => {
    const table = trainTranslation(pairs(), settings);
    const { table: bytes, terms } = serializeTranslation(table);
    const read = parseTranslation(bytes, terms);
    expect(read.size).toBe(table.size);
    for (const [word, entry] of table) {
      expect(read.lookup(word)!.terms).toEqual(entry.terms);
      read.lookup(word)!.probabilities.forEach((p, i) => expect(p).toBeCloseTo(entry.probabilities[i]!, 4));
    }
    expect(read.lookup("nothing")).toBeUndefined();
    expect(() => parseTranslation(new Uint8Array(40), terms)).toThrow(TranslationError);
    expect(() => parseTranslation(bytes.subarray(0, bytes.length - 2), terms)).toThrow(/cannot be/);
    expect(() => parseTranslation(bytes, terms + "extra\n")).toThrow(/terms file/);
    const bad = bytes.slice();
    const view = new DataView(bad.buffer);
    const codes = 20 + 4 * (view.getUint32(8, true) + 1);
    view.setUint32(codes, 1e6, true);
    const first = [...table.keys()][0]!;
    expect(() => parseTranslation(bad, terms).lookup(first)).toThrow(/names code term/);
  });

  it("translates a question's distinct words, within the request's limits", () => {
    const long = "x".repeat(MAX_TRANSLATION_TERM_CHARS + 1);
    const table = tableOf(
      new Map([
        [
          "remov",
          {
            terms: ["purg", long, ...Array.from({ length: 200 }, (_, i) => `t${i}`)],
            probabilities: new Float32Array(202).fill(0.1),
          },
        ],
      ]),
    );
    const words = translateQuestion(table, `remove removes ${long} unknownword`);
    expect(words.map((w) => w.term)).toEqual(["remov", "unknownword"]);
    expect(words[0]!.alternatives[0]).toBe("purg");
    expect(words[0]!.alternatives).not.toContain(long);
    expect(words[0]!.alternatives).toHaveLength(MAX_ALTERNATIVES);
    expect(words[1]).toEqual({ term: "unknownword", alternatives: [], probabilities: [] });
    const many = Array.from(
      { length: 50 },
      (_, i) => `word${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}`,
    );
    expect(translateQuestion(table, many.join(" "))).toHaveLength(MAX_TRANSLATED_WORDS);
  });

  it("ships with the package, and the client sends it with a search", () => {
    const shipped = parseTranslation(
      readFileSync(new URL("../../protocol/embedder/model/translation.bin", import.meta.url)),
      readFileSync(new URL("../../protocol/embedder/model/translation-terms.txt", import.meta.url), "utf8"),
    );
    expect(shipped.size).toBeGreaterThan(1000);
    const words = questionTranslations("Removes the first element of the list")!;
    expect(words.map((w) => w.term)).toContain("remov");
    expect(words.find((w) => w.term === "remov")!.alternatives.length).toBeGreaterThan(0);
  });
});

describe("the translation channel", () => {
  const key = new TermKey(new Uint8Array(32).fill(3));
  function index(texts: string[], options = {}) {
    const hot = new HotIndex(32, options);
    texts.forEach((text, id) => {
      const t = key.terms(text);
      hot.add({ id, language: 0, scale: 1, int8: new Int8Array(32), termIds: t.ids, termCounts: t.counts });
    });
    return hot;
  }
  const word = (term: string, alternatives: string[], probabilities: number[]) => ({
    term: key.id(term),
    alternatives: alternatives.map((t) => key.id(t)),
    probabilities,
  });

  it("finds code through a translation, ranks the word itself and likelier translations higher", () => {
    const hot = index([
      "function purgeUser(store) { store.purge(user) }",
      "function removeUser(store) { store.remove(user) }",
      "function drawWidget(canvas) { canvas.paint(widget) }",
      "function dropUser(store) { store.drop(user) }",
    ]);
    const hits = hot.queryTranslated([word("remov", ["purg", "drop"], [0.6, 0.2])], 10)!;
    expect(hits.map((h) => h.id)).toEqual([1, 0, 3]);
    expect(hot.queryTranslated([], 10)).toEqual([]);
    expect(hot.queryTranslated([word("zzz", [], [])], 10)).toEqual([]);
  });

  it("skips the alternatives whose postings pass its budget, keeping the first ones", () => {
    const texts = [
      ...Array.from({ length: 20 }, (_, i) => `function listItems${i}(list) { return list }`),
      "function purgeAll() {}",
    ];
    const open = index(texts).queryTranslated([word("remov", ["list", "purg"], [0.5, 0.5])], 30)!;
    expect(open.map((h) => h.id)).toContain(0);
    const tight = index(texts, { translationBudget: 5 }).queryTranslated(
      [word("remov", ["list", "purg"], [0.5, 0.5])],
      30,
    )!;
    expect(tight.map((h) => h.id)).toEqual([20]);
  });

  it("shares the budget among the question's words", () => {
    const texts = [
      ...Array.from({ length: 10 }, (_, i) => `function listItems${i}(list) { return list }`),
      "function purgeAll() {}",
      "function wipeCache() {}",
    ];
    const words = [word("remov", ["list", "purg"], [0.5, 0.5]), word("clear", ["wip"], [0.5])];
    // 12 postings in all, 6 a word: "list" (10) fits neither share, "purg" and "wip" do.
    const shared = index(texts, { translationBudget: 12 }).queryTranslated(words, 30)!;
    expect(shared.map((h) => h.id).sort((a, b) => a - b)).toEqual([10, 11]);
  });

  it("skips a term in over 5,000 chunks and a tenth of them, in BM25 and as a translated word, but not in a small index", () => {
    const small = index([
      ...Array.from({ length: 8 }, (_, i) => `function listItems${i}(list) {}`),
      "function purgeAll(list) {}",
    ]);
    // "list" is in every chunk of a small index, and still counts next to a rarer term.
    expect(small.queryTerms([key.id("list"), key.id("purg")], 20)!).toHaveLength(9);
    const entries = Array.from({ length: 6000 }, (_, i) =>
      i % 6 === 0 ? `function other${i}() {}` : `function listItems(list) {}`,
    );
    entries.push("function purgeAll(list) {}");
    const large = index(entries);
    // 5,001 chunks hold "list": next to "purg" it is skipped, alone it answers.
    expect(large.queryTerms([key.id("list"), key.id("purg")], 20)!.map((h) => h.id)).toEqual([6000]);
    expect(large.queryTerms([key.id("list")], 20)!).toHaveLength(20);
    expect(large.queryTranslated([word("list", [], []), word("remov", ["purg"], [0.5])], 20)!.map((h) => h.id)).toEqual(
      [6000],
    );
  });

  it("fuses three channels each scaled to its candidates, and two as before", () => {
    const v = [
      { id: "a", score: 0.9 },
      { id: "b", score: 0.1 },
    ];
    const t = [
      { id: "b", score: 4 },
      { id: "a", score: 2 },
    ];
    const x = [
      { id: "c", score: -3 },
      { id: "b", score: -9 },
    ];
    expect(fuseThree(v, t, [])).toEqual(fuseScores(v, t));
    const fused = new Map(fuseThree(v, t, x, 1, 1).map((h) => [h.id, h.score]));
    expect(fused.get("a")).toBeCloseTo(1 + 0);
    expect(fused.get("b")).toBeCloseTo(0 + 1 + 0);
    expect(fused.get("c")).toBeCloseTo(1);
    expect(fuseThree(v, t, x, 1, 2).map((h) => h.id)[0]).toBe("c");
    // A channel's lone candidate is its best.
    expect(fuseThree([], [{ id: "a", score: 3 }], [{ id: "a", score: -7 }])).toEqual([{ id: "a", score: 2 }]);
  });
});
