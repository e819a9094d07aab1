import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { definedNames, definitionPieces } from "../../protocol/embedder/names.js";
import { countWeight, ModelTokenizer, type StaticSide } from "../../protocol/embedder/static.js";
import { embedderFor, embedderForModel } from "../../workers/embedders/index.js";
import { StaticEmbedder } from "../../workers/embedders/static.js";
import { bundledStaticModel } from "../../workers/embedders/static-model.js";

const embedder = new StaticEmbedder(bundledStaticModel);
const dot = (a: Float32Array, b: Float32Array) => a.reduce((s, x, i) => s + x * b[i]!, 0);
const norm = (a: Float32Array) => Math.sqrt(dot(a, a));
const embedOne = async (text: string, side: StaticSide) => (await embedder.embed([text], side))[0]!;

/** Terms that a text of just that term tokenizes back to, with a positive weight on both sides and a non-zero row. */
function selfTerms(): string[] {
  const model = bundledStaticModel();
  const tokenizer = new ModelTokenizer();
  return [...model.vocab].flatMap(([term, id]) => {
    const back = tokenizer.terms(term);
    const weighted = model.queryWeight[id]! > 0 && model.documentWeight[id]! > 0;
    const row = model.vectors.subarray(id * model.dims, (id + 1) * model.dims);
    return weighted && row.some((x) => x !== 0) && back.length === 1 && back[0] === term ? [term] : [];
  });
}

/**
 * The model's own definition, spelled out: Σ side weight × count weight × row, and for code, Σ name
 * weight × row over the terms of the names it defines; normalised.
 */
function expected(text: string, side: StaticSide): Float32Array {
  const model = bundledStaticModel();
  const tokenizer = new ModelTokenizer();
  const weight = side === "query" ? model.queryWeight : model.documentWeight;
  const counts = new Map<number, number>();
  for (const term of tokenizer.terms(text)) {
    const id = model.vocab.get(term);
    if (id !== undefined) counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  const out = new Float32Array(model.dims);
  for (const [id, count] of counts)
    for (let d = 0; d < model.dims; d++)
      out[d]! += weight[id]! * countWeight(count) * model.vectors[id * model.dims + d]!;
  const named = side === "document" ? tokenizer.nameTerms(text) : [];
  expect(side === "query" || named.includes("refresh")).toBe(true);
  for (const id of named.flatMap((term) => model.vocab.get(term) ?? []))
    for (let d = 0; d < model.dims; d++) out[d]! += model.nameWeight[id]! * model.vectors[id * model.dims + d]!;
  const n = norm(out);
  return n > 0 ? out.map((x) => x / n) : out;
}

const CODE = `export async function refreshAccessToken(session: Session, fetchToken: TokenFetcher) {
  // Tokens expire a minute early, so a request never carries one that lapses in flight.
  if (session.expiresAt - Date.now() > 60_000) return session.accessToken;
  const next = await fetchToken(session.refreshToken);
  session.accessToken = next.access_token;
  session.expiresAt = Date.now() + next.expires_in * 1000;
  return session.accessToken;
}`;

describe("the static embedder inside workerd", () => {
  it("is what EMBEDDER = builtin selects: the bundled model's name and dimensions", () => {
    const configured = embedderFor(env, "test");
    expect(configured).toBeInstanceOf(StaticEmbedder);
    // The index it makes holds each chunk's definition pieces beside it: another index than the model's alone.
    expect(configured.model).toBe("sextant-static-v2+pieces");
    expect(configured.dims).toBe(bundledStaticModel().dims);
    expect(Number.isInteger(Math.log2(configured.dims))).toBe(true);
  });

  it("answers old workspaces' model with the lexical embedder and an unknown model with none", async () => {
    expect(embedderForModel(env, "test", "sextant-static-v2+pieces")).toBe(embedderFor(env, "test"));
    // An index the same model made before pieces: its questions are embedded alike, its chunks without pieces.
    const before = embedderForModel(env, "test", "sextant-static-v2")!;
    expect(before.model).toBe("sextant-static-v2");
    expect(before.documentPieces).toBeUndefined();
    expect(await before.embed(["read a file"], "query")).toEqual(
      await embedderFor(env, "test").embed(["read a file"], "query"),
    );
    // The first learned model's weights are not shipped beside its successor's: no embedder for it.
    expect(embedderForModel(env, "test", "sextant-static-v1")).toBeUndefined();
    const lexical = embedderForModel(env, "test", "sextant-lexical-v1");
    expect(lexical?.model).toBe("sextant-lexical-v1");
    expect(lexical?.dims).toBe(512);
    expect((await lexical!.embed(["read a file"], "query"))[0]).toHaveLength(512);
    expect(embedderForModel(env, "test", "text-embedding-3-small")).toBeUndefined();
  });

  it("cuts a chunk into its definition pieces for the index, and embeds each like any code", async () => {
    const configured = embedderFor(env, "test");
    const chunk = `${CODE}\n\nexport function revokeAccessToken(session: Session) {\n  session.accessToken = "";\n}`;
    const pieces = configured.documentPieces!(chunk);
    expect(pieces).toEqual(definitionPieces(chunk));
    expect(pieces.map((p) => definedNames(p))).toEqual([["refreshAccessToken"], ["revokeAccessToken"]]);
    expect(configured.documentPieces!(CODE)).toEqual([]);
    const [whole, first] = await configured.embed([chunk, pieces[0]!], "document");
    expect(first).toEqual(await embedOne(pieces[0]!, "document"));
    expect(whole).not.toEqual(first);
  });

  it("returns a unit vector of the model's dimensions per text, the same for the same text", async () => {
    const texts = [CODE, "parse the json of a response", CODE];
    const vectors = await embedder.embed(texts, "document");
    expect(vectors).toHaveLength(3);
    for (const v of vectors) {
      expect(v).toHaveLength(embedder.dims);
      expect(norm(v)).toBeCloseTo(1, 5);
    }
    expect(vectors[2]).toEqual(vectors[0]);
    expect(await embedOne(CODE, "document")).toEqual(vectors[0]);
  });

  it("embeds the two sides by the same table, differing only by each side's token weights", async () => {
    for (const side of ["document", "query"] as const) {
      const got = await embedOne(CODE, side);
      const want = expected(CODE, side);
      for (let d = 0; d < got.length; d++) expect(got[d]).toBeCloseTo(want[d]!, 5);
    }
    // One term: the weights only scale its row, so both sides point the same way.
    const [term] = selfTerms();
    expect(term).toMatch(/^\S+$/);
    expect(dot(await embedOne(term!, "query"), await embedOne(term!, "document"))).toBeCloseTo(1, 5);
  });

  it("matches a vocabulary word with itself across sides better than with an unrelated word", async () => {
    const terms = selfTerms().slice(0, 20);
    expect(terms.length).toBeGreaterThanOrEqual(2);
    for (let i = 0; i < terms.length; i++) {
      const query = await embedOne(terms[i]!, "query");
      const unrelated = terms[(i + 1) % terms.length]!;
      expect(dot(query, await embedOne(terms[i]!, "document"))).toBeGreaterThan(
        dot(query, await embedOne(unrelated, "document")),
      );
    }
  });

  it("gives a zero vector, without throwing, for a text with no known words", async () => {
    const unknown = "zqxjv_wkpfh 12345 +-*/ {}[]";
    expect(new ModelTokenizer().terms(unknown).some((t) => bundledStaticModel().vocab.has(t))).toBe(false);
    for (const text of ["", "   \n\t", unknown]) {
      for (const side of ["document", "query"] as const) {
        const v = await embedOne(text, side);
        expect(v).toHaveLength(embedder.dims);
        expect(v.every((x) => x === 0)).toBe(true);
      }
    }
  });

  it("embeds odd Unicode and very long texts to finite unit (or zero) vectors", async () => {
    const odd = [
      "naïve café résumé — “quoted” ½ ﬁle 函数读取文件 файл",
      "emoji 🧭🚀 and a lone surrogate \uD800 and a NUL \u0000 inside read_file",
      "\u202Eright-to-left override\u202C zero\u200Bwidth combining e\u0301",
    ];
    const long = (CODE + "\n").repeat(2_000); // about 700 KB
    const vectors = await embedder.embed([...odd, long], "document");
    for (const v of vectors) {
      expect(v.every(Number.isFinite)).toBe(true);
      const n = norm(v);
      expect(n === 0 || Math.abs(n - 1) < 1e-5).toBe(true);
    }
    // Repeating a text only scales its counts' weights sublinearly: the direction stays close.
    expect(dot(vectors[3]!, await embedOne(CODE, "document"))).toBeGreaterThan(0.5);
  });
});
