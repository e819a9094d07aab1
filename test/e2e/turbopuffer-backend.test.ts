import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { BackendEntry, BackendFilter } from "../../durable-objects/index-backend.js";
import {
  PIECES_NAMESPACE_SUFFIX,
  TurbopufferBackend,
  TurbopufferBackendError,
  type TurbopufferBackendOptions,
} from "../../durable-objects/turbopuffer-backend.js";
import {
  MAX_BM25_QUERY_TOKENS,
  TRANSLATIONS_ASKED,
  translationBm25,
  weightedBm25,
  withinQueryBudget,
} from "../../durable-objects/turbopuffer-ranking.js";
import { HotIndex } from "../../durable-objects/hot-index.js";
import {
  startTurbopufferStandIn,
  type RecordedRequest,
  type TurbopufferStandIn,
} from "../support/turbopuffer-standin.js";

const DIMS = 8;
let tpuf: TurbopufferStandIn;

beforeAll(async () => {
  tpuf = await startTurbopufferStandIn();
});
afterAll(async () => {
  await tpuf?.close();
});

let namespaces = 0;
function backend(options: Partial<TurbopufferBackendOptions> = {}): TurbopufferBackend {
  return new TurbopufferBackend({
    apiKey: tpuf.apiKey,
    baseURL: tpuf.url,
    namespace: `sextant-test-${++namespaces}`,
    dims: DIMS,
    maxRetries: 0,
    ...options,
  });
}

/** Requests the stand-in received for one namespace, from this point on. */
function recorder(namespace: string): () => RecordedRequest[] {
  const start = tpuf.requests.length;
  const url = `/v2/namespaces/${namespace}`;
  return () => tpuf.requests.slice(start).filter((r) => r.url === url || r.url.startsWith(`${url}/`));
}

function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function unitVector(next: () => number): Float32Array {
  const v = Float32Array.from({ length: DIMS }, () => next() * 2 - 1);
  const norm = Math.hypot(...v);
  return v.map((x) => x / norm);
}

/** An encrypted path segment's shape: base64url of 32 bytes, 43 characters. */
function segment(next: () => number): string {
  const bytes = Uint8Array.from({ length: 32 }, () => Math.floor(next() * 256));
  return Buffer.from(bytes).toString("base64url");
}

const hexId = (n: number) => n.toString(16).padStart(32, "0");
const noTerms = { ids: new Uint32Array(), counts: new Uint16Array() };

/** Entries spread over `dirA`, `dirA/sub`, `dirAB` (whose name starts with dirA's) and `dirB`. */
function corpus(count: number, seed = 1) {
  const next = random(seed);
  const dirA = segment(next);
  const dirs = { dirA, sub: `${dirA}/${segment(next)}`, dirAB: `${dirA}${segment(next)}`, dirB: segment(next) };
  const places = Object.values(dirs);
  const languages = ["typescript", "python", "go"];
  const entries: BackendEntry[] = Array.from({ length: count }, (_, i) => ({
    id: hexId(i),
    path: `${places[i % places.length]}/${segment(next)}`,
    language: languages[i % languages.length]!,
    vector: unitVector(next),
    terms: noTerms,
  }));
  return { entries, dirs, next };
}

function dot(a: Float32Array, b: Float32Array): number {
  return a.reduce((sum, x, i) => sum + x * b[i]!, 0);
}

/** The exact answer: entries passing the filter, by inner product, highest first. */
function nearest(entries: BackendEntry[], query: Float32Array, k: number, filter: BackendFilter = {}) {
  return entries
    .filter((e) => filter.pathPrefix === undefined || e.path.startsWith(`${filter.pathPrefix}/`))
    .filter((e) => filter.language === undefined || e.language === filter.language)
    .map((e) => ({ id: e.id, score: dot(e.vector, query) }))
    .sort((a, b) => b.score - a.score)
    .slice(0, k);
}

function expectHits(actual: { id: string; score: number }[], expected: { id: string; score: number }[]) {
  expect(actual.map((h) => h.id)).toEqual(expected.map((h) => h.id));
  actual.forEach((hit, i) => expect(hit.score).toBeCloseTo(expected[i]!.score, 5));
}

function terms(pairs: Array<[id: number, count: number]>) {
  return { ids: Uint32Array.from(pairs.map(([id]) => id)), counts: Uint16Array.from(pairs.map(([, n]) => n)) };
}

describe("TurbopufferBackend against the stand-in", () => {
  it("returns the nearest ids by inner product, highest first", async () => {
    const index = backend();
    const { entries, next } = corpus(60);
    await index.write(entries);
    for (let q = 0; q < 5; q++) {
      const query = unitVector(next);
      expectHits(await index.queryVector(query, 7, {}), nearest(entries, query, 7));
    }
  });

  it("filters by path prefix (whole segments only) and language, alone and together", async () => {
    const index = backend();
    const { entries, dirs, next } = corpus(80, 2);
    await index.write(entries);
    const query = unitVector(next);
    const filters: BackendFilter[] = [
      { pathPrefix: dirs.dirA },
      { pathPrefix: dirs.sub },
      { pathPrefix: dirs.dirB },
      { language: "python" },
      { pathPrefix: dirs.dirA, language: "go" },
      { pathPrefix: segment(next) },
    ];
    for (const filter of filters) {
      const hits = await index.queryVector(query, 100, filter);
      expectHits(hits, nearest(entries, query, 100, filter));
    }
    const underA = await index.queryVector(query, 100, { pathPrefix: dirs.dirA });
    const paths = new Map(entries.map((e) => [e.id, e.path]));
    expect(underA.some((h) => paths.get(h.id)!.startsWith(`${dirs.sub}/`))).toBe(true);
    expect(underA.some((h) => paths.get(h.id)!.startsWith(`${dirs.dirAB}/`))).toBe(false);
  });

  it("ranks by BM25 over keyed term ids: term frequency, then rarity", async () => {
    const index = backend();
    const next = random(3);
    const [common, rare, filler] = [0x0000beef, 0xfeedf00d, 0x00000001];
    const entry = (i: number, pairs: Array<[number, number]>, language = "typescript"): BackendEntry => ({
      id: hexId(i),
      path: `${segment(next)}/${segment(next)}`,
      language,
      vector: unitVector(next),
      terms: terms(pairs),
    });
    // Equal lengths (four tokens each), so only frequency and rarity differ.
    await index.write([
      entry(1, [
        [common, 3],
        [filler, 1],
      ]),
      entry(2, [
        [common, 1],
        [filler, 3],
      ]),
      entry(3, [[filler, 4]]),
      entry(4, [
        [rare, 1],
        [filler, 3],
      ]),
      entry(
        5,
        [
          [common, 2],
          [filler, 2],
        ],
        "python",
      ),
    ]);
    const byCommon = await index.queryTerms([common], 10, {});
    expect(byCommon.map((h) => h.id)).toEqual([hexId(1), hexId(5), hexId(2)]);
    expect(byCommon[0]!.score).toBeGreaterThan(byCommon[1]!.score);
    const both = await index.queryTerms([common, rare], 10, {});
    expect(both[0]!.id).toBe(hexId(4));
    expect((await index.queryTerms([common], 10, { language: "python" })).map((h) => h.id)).toEqual([hexId(5)]);
    expect(await index.queryTerms([0x12345678], 10, {})).toEqual([]);
    expect(await index.queryTerms([], 10, {})).toEqual([]);
  });

  it("sends each keyed term as an 8-hex-character token, repeated by its count", async () => {
    const index = backend();
    const requests = recorder(index.namespace);
    const { entries } = corpus(2, 4);
    entries[0]!.terms = terms([
      [0xab, 2],
      [0xffffffff, 1],
    ]);
    await index.write(entries);
    await index.queryTerms([0xab, 7], 3, {});
    const [write, query] = requests();
    const columns = (write!.body as { upsert_columns: { terms: string[][] } }).upsert_columns;
    expect(columns.terms).toEqual([["000000ab", "000000ab", "ffffffff"], []]);
    expect((query!.body as { rank_by: unknown }).rank_by).toEqual(["terms", "BM25", ["000000ab", "00000007"]]);
  });

  it("weighs each term's part as the hot index does, by one weighted BM25 clause per weight", async () => {
    const index = backend();
    const requests = recorder(index.namespace);
    const next = random(6);
    const [a, b, c, filler] = [0x0a, 0x0b, 0x0c, 0x01];
    const rows: Array<Array<[number, number]>> = [
      [
        [a, 1],
        [filler, 3],
      ],
      [
        [b, 1],
        [filler, 3],
      ],
      [
        [a, 1],
        [c, 2],
        [filler, 1],
      ],
      [
        [b, 2],
        [c, 1],
        [filler, 5],
      ],
      [[filler, 2]],
    ];
    const entries = rows.map(
      (pairs, i): BackendEntry => ({
        id: String(i),
        path: segment(next),
        language: "typescript",
        vector: unitVector(next),
        terms: terms(pairs),
      }),
    );
    await index.write(entries);
    const hot = new HotIndex(32);
    entries.forEach((e, i) =>
      hot.add({
        id: i,
        language: 0,
        scale: 1,
        int8: new Int8Array(DIMS),
        termIds: e.terms.ids,
        termCounts: e.terms.counts,
      }),
    );
    const asked = [a, b, c];
    // Unweighted, entries 0 and 1 tie on equally rare terms; b at 3 puts entry 1 (and 3) ahead.
    const plain = await index.queryTerms(asked, 10, {});
    const weighted = await index.queryTerms(asked, 10, {}, [1, 3, 0.5]);
    expect(weighted.map((h) => h.id)).not.toEqual(plain.map((h) => h.id));
    expect(weighted.findIndex((h) => h.id === "1")).toBeLessThan(weighted.findIndex((h) => h.id === "0"));
    for (const [got, weights] of [
      [plain, undefined],
      [weighted, [1, 3, 0.5]],
    ] as const) {
      const expected = hot.queryTerms(asked, 10, {}, weights)!;
      expect(got.map((h) => h.id)).toEqual(expected.map((h) => String(h.id)));
      got.forEach((h, i) => expect(h.score).toBeCloseTo(expected[i]!.score, 4));
    }
    const rankBy = requests()
      .slice(1)
      .map((r) => (r.body as { rank_by: unknown }).rank_by);
    expect(rankBy).toEqual([
      ["terms", "BM25", ["0000000a", "0000000b", "0000000c"]],
      [
        "Sum",
        [
          ["Product", 1, ["terms", "BM25", ["0000000a"]]],
          ["Product", 3, ["terms", "BM25", ["0000000b"]]],
          ["Product", 0.5, ["terms", "BM25", ["0000000c"]]],
        ],
      ],
    ]);
  });

  it("groups terms of one weight, counts a repeated term once at its first weight, and skips weight 0", () => {
    expect(weightedBm25([1, 2, 3], [1, 1, 1])).toEqual(["terms", "BM25", ["00000001", "00000002", "00000003"]]);
    expect(weightedBm25([1, 2], [2, 2])).toEqual(["Product", 2, ["terms", "BM25", ["00000001", "00000002"]]]);
    expect(weightedBm25([1, 2, 1, 3], [2, 0, 4, 2])).toEqual([
      "Product",
      2,
      ["terms", "BM25", ["00000001", "00000003"]],
    ]);
    expect(weightedBm25([1, 2, 3], [0.5])).toEqual([
      "Sum",
      [
        ["Product", 0.5, ["terms", "BM25", ["00000001"]]],
        ["Product", 1, ["terms", "BM25", ["00000002", "00000003"]]],
      ],
    ]);
    expect(weightedBm25([1, 2], [0, 0])).toBeUndefined();
    expect(weightedBm25([])).toBeUndefined();
    expect(() => weightedBm25([1], [Number.NaN])).toThrow(/finite/);
  });

  it("ranks the translation channel by weighted BM25 over each word and its heaviest translations", async () => {
    const words = [
      // Translations out of order, one of probability 0, and more than are asked for.
      {
        term: 100,
        alternatives: [101, 102, 103, ...Array.from({ length: 20 }, (_, i) => 200 + i)],
        probabilities: [0.2, 0.4, 0, ...Array.from({ length: 20 }, () => 0.01)],
      },
      { term: 300, alternatives: [], probabilities: [] },
    ];
    const asked = translationBm25(words, [2, 0.5]);
    // The word, then its heaviest translations (103, of probability 0, is not one; 2 x 0.01 / 0.4 =
    // 0.05 rounds to 0 at a step of 1/8, so those are not asked for), then the next word.
    expect(asked).toEqual({ terms: [100, 102, 101, 300], weights: [2, 2, 1, 0.5] });
    // At most 16 translations a word, the most probable first.
    const many = translationBm25([
      {
        term: 1,
        alternatives: Array.from({ length: 20 }, (_, i) => 10 + i),
        probabilities: Array.from({ length: 20 }, (_, i) => 1 - i / 40),
      },
    ]);
    expect(many.terms).toEqual([1, ...Array.from({ length: TRANSLATIONS_ASKED }, (_, i) => 10 + i)]);
    expect(weightedBm25(asked.terms, asked.weights)).toEqual([
      "Sum",
      [
        ["Product", 2, ["terms", "BM25", ["00000064", "00000066"]]],
        ["Product", 1, ["terms", "BM25", ["00000065"]]],
        ["Product", 0.5, ["terms", "BM25", ["0000012c"]]],
      ],
    ]);
    expect(translationBm25(words).weights.slice(0, 3)).toEqual([1, 1, 0.5]);

    // Through the service: a chunk holding only a translation of the word is found, below one
    // holding the word itself (the translation at half the word's weight: 0.3 against the best 0.6).
    const index = backend();
    const next = random(8);
    const entry = (id: string, pairs: Array<[number, number]>): BackendEntry => ({
      id,
      path: segment(next),
      language: "python",
      vector: unitVector(next),
      terms: terms(pairs),
    });
    await index.write([
      entry("word", [
        [100, 1],
        [1, 3],
      ]),
      entry("translation", [
        [102, 1],
        [1, 3],
      ]),
      entry("neither", [[1, 4]]),
    ]);
    const hits = await index.queryTranslated(
      [{ term: 100, alternatives: [102, 105], probabilities: [0.3, 0.6] }],
      10,
      {},
      [1],
    );
    expect(hits.map((h) => h.id)).toEqual(["word", "translation"]);
  });

  it("keeps a question within one full-text query's 1,024 characters, dropping its lightest terms", async () => {
    expect(MAX_BM25_QUERY_TOKENS).toBe(113);
    // Under the budget: each term once, at its first weight, weight 0 left out, order kept.
    expect(withinQueryBudget([5, 6, 5, 7], [1, 0, 3, 2])).toEqual({ terms: [5, 7], weights: [1, 2] });
    // Over it: the heaviest, the earlier of equal weights, in the question's order.
    const ids = Array.from({ length: 200 }, (_, i) => i + 1);
    const weights = ids.map((t) => (t % 2 === 0 ? 2 : 1));
    const kept = withinQueryBudget(ids, weights);
    const even = ids.filter((t) => t % 2 === 0);
    const odd = ids.filter((t) => t % 2 === 1).slice(0, MAX_BM25_QUERY_TOKENS - even.length);
    expect(kept.terms).toEqual([...even, ...odd].sort((a, b) => a - b));
    expect(kept.weights).toEqual(kept.terms.map((t) => (t % 2 === 0 ? 2 : 1)));

    // The longest question a search can send: 32 translated words, each with 128 alternatives.
    const words = Array.from({ length: 32 }, (_, w) => ({
      term: 1_000_000 + w,
      alternatives: Array.from({ length: 128 }, (_, a) => w * 1000 + a + 1),
      probabilities: Array.from({ length: 128 }, (_, a) => 1 / (a + 1)),
    }));
    const asked = translationBm25(
      words,
      words.map((_, w) => 1 + (w % 3)),
    );
    expect(asked.terms).toHaveLength(MAX_BM25_QUERY_TOKENS);
    // Here every word is kept: none weighs less than 1, and the budget runs out among lighter translations.
    for (const word of words) expect(asked.terms).toContain(word.term);

    // The stand-in refuses a longer query, as the service does; the budgeted ones pass.
    const index = backend();
    const next = random(9);
    await index.write([
      {
        id: "a",
        path: segment(next),
        language: "go",
        vector: unitVector(next),
        terms: terms([
          [1_000_000, 1],
          [1, 2],
        ]),
      },
    ]);
    const long = Array.from({ length: 300 }, (_, i) => i + 1);
    expect(await index.queryTerms(long, 5, {})).toEqual([{ id: "a", score: expect.any(Number) }]);
    expect((await index.queryTranslated(words, 5, {})).map((h) => h.id)).toEqual(["a"]);
    const tooLong = await fetch(`${tpuf.url}/v2/namespaces/${index.namespace}/query`, {
      method: "POST",
      headers: { authorization: `Bearer ${tpuf.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({
        rank_by: [
          "terms",
          "BM25",
          long.slice(0, MAX_BM25_QUERY_TOKENS + 1).map((t) => t.toString(16).padStart(8, "0")),
        ],
        top_k: 5,
      }),
    });
    expect(tooLong.status).toBe(400);
    expect(await tooLong.json()).toMatchObject({ error: expect.stringMatching(/1025 characters; the limit is 1024/) });
  });

  it("asks nothing when every term weighs 0", async () => {
    const index = backend();
    const requests = recorder(index.namespace);
    expect(await index.queryTerms([1, 2], 5, {}, [0, 0])).toEqual([]);
    expect(requests()).toEqual([]);
  });

  it("remove drops ids, and removing them again or from a namespace never written is not an error", async () => {
    const index = backend();
    const { entries, next } = corpus(20, 5);
    await index.write(entries);
    const gone = [entries[0]!.id, entries[7]!.id];
    await index.remove(gone);
    await index.remove(gone);
    const hits = await index.queryVector(unitVector(next), 100, {});
    expect(hits).toHaveLength(18);
    expect(hits.map((h) => h.id)).not.toContain(gone[0]);
    expect(tpuf.documents(index.namespace)).toHaveLength(18);
    await expect(backend().remove(gone)).resolves.toBeUndefined();
  });

  it("upserts replace an entry with the same id", async () => {
    const index = backend();
    const { entries } = corpus(3, 6);
    await index.write(entries);
    const moved = { ...entries[0]!, vector: entries[1]!.vector, language: "rust" };
    await index.write([moved]);
    const hits = await index.queryVector(entries[1]!.vector, 2, { language: "rust" });
    expect(hits.map((h) => h.id)).toEqual([moved.id]);
    expect(hits[0]!.score).toBeCloseTo(1, 5);
    expect(tpuf.documents(index.namespace)).toHaveLength(3);
  });

  it("destroy deletes the namespace; destroying again and querying afterwards find nothing", async () => {
    const index = backend();
    const { entries, next } = corpus(10, 7);
    await index.write(entries);
    await index.destroy();
    expect(tpuf.documents(index.namespace)).toBeUndefined();
    await expect(index.destroy()).resolves.toBeUndefined();
    expect(await index.queryVector(unitVector(next), 5, {})).toEqual([]);
    expect(await index.queryTerms([1], 5, {})).toEqual([]);
  });

  it("writes in batches of 1,000 rows, gzipped", async () => {
    const index = backend();
    const requests = recorder(index.namespace);
    const { entries, next } = corpus(2500, 8);
    await index.write(entries);
    const writes = requests();
    expect(writes.map((r) => (r.body as { upsert_columns: { id: string[] } }).upsert_columns.id.length)).toEqual([
      1000, 1000, 500,
    ]);
    for (const w of writes) {
      expect(w.headers["content-encoding"]).toBe("gzip");
      expect(w.bytes).toBeLessThan(JSON.stringify(w.body).length / 2);
    }
    const query = unitVector(next);
    expectHits(await index.queryVector(query, 10, {}), nearest(entries, query, 10));
  });

  it("asks for at most 1,200 rows, Turbopuffer's limit", async () => {
    const index = backend();
    const requests = recorder(index.namespace);
    const { entries, next } = corpus(5, 9);
    await index.write(entries);
    expect(await index.queryVector(unitVector(next), 5000, {})).toHaveLength(5);
    expect((requests().at(-1)!.body as { top_k: number }).top_k).toBe(1200);
  });

  it("sends only ids, vectors, encrypted paths, languages and term tokens, with the key as a bearer token", async () => {
    const index = backend();
    const requests = recorder(index.namespace);
    const pieceRequests = recorder(`${index.namespace}${PIECES_NAMESPACE_SUFFIX}`);
    const { entries, dirs, next } = corpus(12, 10);
    await index.write(entries);
    await index.queryVector(unitVector(next), 3, { pathPrefix: dirs.dirA, language: "go" });
    await index.queryTerms([5], 3, { language: "go" });
    await index.remove([entries[0]!.id]);
    await index.destroy();

    const sent = requests();
    expect(sent.map((r) => `${r.method} ${r.url} ${r.status}`)).toEqual([
      `POST /v2/namespaces/${index.namespace} 200`,
      `POST /v2/namespaces/${index.namespace}/query 200`,
      `POST /v2/namespaces/${index.namespace}/query 200`,
      `POST /v2/namespaces/${index.namespace} 200`,
      `DELETE /v2/namespaces/${index.namespace} 200`,
    ]);
    for (const r of sent) expect(r.headers.authorization).toBe(`Bearer ${tpuf.apiKey}`);

    const write = sent[0]!.body as Record<string, unknown>;
    expect(Object.keys(write).sort()).toEqual(["distance_metric", "schema", "upsert_columns"]);
    expect(write.distance_metric).toBe("cosine_distance");
    expect(write.schema).toEqual({
      vector: { type: `[${DIMS}]f32`, ann: true },
      path: { type: "string", filterable: true },
      language: { type: "string", filterable: true },
      terms: { type: "[]string", full_text_search: { tokenizer: "pre_tokenized_array" }, filterable: false },
    });
    const columns = write.upsert_columns as Record<string, unknown[]>;
    expect(Object.keys(columns)).toEqual(["id", "vector", "path", "language", "terms"]);
    expect(columns.id).toEqual(entries.map((e) => e.id));
    expect(columns.path).toEqual(entries.map((e) => e.path));
    expect(columns.vector).toEqual(entries.map((e) => Array.from(e.vector)));

    expect(sent[1]!.body).toEqual({
      rank_by: ["vector", "ANN", expect.any(Array)],
      top_k: 3,
      filters: [
        "And",
        [
          ["path", "Glob", `${dirs.dirA}/**`],
          ["language", "Eq", "go"],
        ],
      ],
    });
    expect(sent[2]!.body).toEqual({
      rank_by: ["terms", "BM25", ["00000005"]],
      top_k: 3,
      filters: ["language", "Eq", "go"],
    });
    expect(sent[3]!.body).toEqual({ deletes: [entries[0]!.id] });
    expect(sent[4]!.body).toBeUndefined();
    // Entries without pieces: the first write finds that the pieces' namespace does not exist, and
    // nothing more is asked of it until destroy.
    const pieces = `${index.namespace}${PIECES_NAMESPACE_SUFFIX}`;
    expect(pieceRequests().map((r) => `${r.method} ${r.url} ${r.status}`)).toEqual([
      `POST /v2/namespaces/${pieces} 404`,
      `DELETE /v2/namespaces/${pieces} 404`,
    ]);
    expect(Object.keys(pieceRequests()[0]!.body as object)).toEqual(["deletes"]);
  });

  it("keeps definition pieces in a namespace of their own, ranks an entry by its best, and forgets them with it", async () => {
    const index = backend();
    const { entries: plain, dirs, next } = corpus(40, 11);
    // Entry i has i % 4 pieces.
    const entries = plain.map((e, i) => ({
      ...e,
      terms: terms([[i % 3, 1]]),
      ...(i % 4 ? { pieces: Array.from({ length: i % 4 }, () => unitVector(next)) } : {}),
    }));
    await index.write(entries);
    expect(tpuf.documents(`${index.namespace}${PIECES_NAMESPACE_SUFFIX}`)).toHaveLength(60);
    const best = (query: Float32Array, filter: BackendFilter = {}) =>
      nearest(
        entries.flatMap((e) => [e, ...(e.pieces ?? []).map((vector) => ({ ...e, vector }))]),
        query,
        1000,
        filter,
      ).filter((h, i, all) => all.findIndex((o) => o.id === h.id) === i);
    const target = entries[15]!.pieces![2]!;
    expectHits(await index.queryVector(target, 5, {}), best(target).slice(0, 5));
    expect((await index.queryVector(target, 1, {}))[0]!.id).toBe(entries[15]!.id);
    const filter = { pathPrefix: dirs.dirA, language: "go" };
    expectHits(await index.queryVector(target, 5, filter), best(target, filter).slice(0, 5));
    // BM25 never sees the pieces: the same scores as an index of the entries alone.
    const alone = backend();
    await alone.write(entries.map(({ pieces: _, ...e }) => e));
    expectHits(await index.queryTerms([1], 40, {}), await alone.queryTerms([1], 40, {}));
    // Written again with one piece, removed, destroyed: the pieces' rows go with their entry.
    const fresh = backend({ namespace: index.namespace });
    await fresh.write([{ ...entries[15]!, pieces: [entries[15]!.pieces![0]!] }]);
    expect(tpuf.documents(`${index.namespace}${PIECES_NAMESPACE_SUFFIX}`)).toHaveLength(58);
    await fresh.remove([entries[15]!.id]);
    expect((await fresh.queryVector(target, 1, {}))[0]!.id).not.toBe(entries[15]!.id);
    expect(tpuf.documents(`${index.namespace}${PIECES_NAMESPACE_SUFFIX}`)).toHaveLength(57);
    await fresh.destroy();
    expect(tpuf.documents(`${index.namespace}${PIECES_NAMESPACE_SUFFIX}`)).toBeUndefined();
    expect(tpuf.documents(index.namespace)).toBeUndefined();
  });
});

describe("TurbopufferBackend errors", () => {
  it("fails with a clear error, unretried, when the API key is wrong", async () => {
    const index = backend({ apiKey: "tpuf_wrong", maxRetries: 3 });
    const requests = recorder(index.namespace);
    const error = await index.queryTerms([1], 3, {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurbopufferBackendError);
    expect(error).toMatchObject({ status: 401, timedOut: false });
    expect((error as Error).message).toBe(
      `Turbopuffer queryTerms on namespace ${index.namespace} failed with 401: unauthorized: invalid API key`,
    );
    expect(requests()).toHaveLength(1);
    // A write's first request, to the pieces' namespace, fails the same way and stops it.
    const pieces = recorder(`${index.namespace}${PIECES_NAMESPACE_SUFFIX}`);
    const failed = await index.write(corpus(1).entries).catch((e: unknown) => e);
    expect((failed as Error).message).toBe(
      `Turbopuffer write on namespace ${index.namespace}${PIECES_NAMESPACE_SUFFIX} failed with 401: unauthorized: invalid API key`,
    );
    expect(pieces()).toHaveLength(1);
    expect(requests()).toHaveLength(1);
  });

  it("lets the client retry server errors, then reports the last status", async () => {
    const { entries } = corpus(1, 11);
    const patient = backend({ maxRetries: 2 });
    tpuf.failNext(2, 500);
    await expect(patient.write(entries)).resolves.toBeUndefined();

    const impatient = backend({ maxRetries: 1 });
    const requests = recorder(impatient.namespace);
    // Written once: the pieces' namespace is known not to exist, and a write goes to the entries' alone.
    await impatient.write(entries);
    tpuf.failNext(2, 503);
    await expect(impatient.write(entries)).rejects.toMatchObject({
      name: "TurbopufferBackendError",
      status: 503,
      message: `Turbopuffer write on namespace ${impatient.namespace} failed with 503: injected failure`,
    });
    expect(requests()).toHaveLength(3);
  });

  it("reports the service's rejection of vectors of another dimension than the namespace's", async () => {
    const namespace = `sextant-test-${++namespaces}`;
    await backend({ namespace, dims: 4 }).write([{ ...corpus(1).entries[0]!, vector: new Float32Array([1, 0, 0, 0]) }]);
    const error = await backend({ namespace, dims: DIMS })
      .write(corpus(1).entries)
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 400 });
    expect((error as Error).message).toMatch(/failed with 400: .*(\[4\]f32|dimensions)/);
  });

  it("refuses a vector of the wrong length before sending anything", async () => {
    const index = backend();
    const requests = recorder(index.namespace);
    await expect(index.queryVector(new Float32Array(3), 5, {})).rejects.toThrow(/3 dimensions; the namespace has 8/);
    await expect(index.write([{ ...corpus(1).entries[0]!, vector: new Float32Array(9) }])).rejects.toThrow(TypeError);
    expect(requests()).toEqual([]);
  });

  it("reports an unreachable service as a connection failure", async () => {
    const index = backend({ baseURL: "http://127.0.0.1:9" });
    await expect(index.queryTerms([1], 1, {})).rejects.toMatchObject({
      name: "TurbopufferBackendError",
      status: undefined,
      message: expect.stringContaining(`Turbopuffer queryTerms on namespace ${index.namespace} could not connect`),
    });
  });

  it("reports a service that does not answer in time as a timeout, through the given fetch", async () => {
    let calls = 0;
    const silent = (_: string | URL | Request, init?: RequestInit) =>
      new Promise<Response>((_, fail) => {
        calls++;
        init?.signal?.addEventListener("abort", () => fail(new DOMException("aborted", "AbortError")));
      });
    const index = backend({ fetch: silent, timeout: 50 });
    await expect(index.queryVector(unitVector(random(12)), 1, {})).rejects.toMatchObject({
      name: "TurbopufferBackendError",
      timedOut: true,
      message: `Turbopuffer queryVector on namespace ${index.namespace} timed out`,
    });
    // The entries' and the pieces' namespaces, asked at once: one attempt each.
    expect(calls).toBe(2);
  });

  it("refuses options it cannot use", () => {
    expect(() => backend({ namespace: "has/slash" })).toThrow(/namespace/);
    expect(() => backend({ dims: 0 })).toThrow(/dims/);
    expect(() => backend({ baseURL: undefined })).toThrow(/region or a baseURL/);
  });
});

describe("the Turbopuffer stand-in", () => {
  async function send(path: string, body: unknown, headers: Record<string, string> = {}) {
    const response = await fetch(`${tpuf.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${tpuf.apiKey}`, "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as { status: string; error?: string } };
  }

  const row = { id: "a", vector: [1, 0], path: "p/q", language: "go" };
  const valid = { upsert_rows: [row], distance_metric: "cosine_distance" };

  it.each([
    ["no Authorization header", "/v2/namespaces/s1", valid, { authorization: "" }, 401, /missing Authorization/],
    ["a wrong key", "/v2/namespaces/s1", valid, { authorization: "Bearer nope" }, 401, /invalid API key/],
    ["an unknown route", "/v1/vectors/s1", valid, {}, 404, /no route/],
    ["an unknown field", "/v2/namespaces/s1", { ...valid, upsert: [] }, {}, 400, /unknown field in write: `upsert`/],
    [
      "an unknown schema option",
      "/v2/namespaces/s1",
      { ...valid, schema: { path: { type: "string", index: true } } },
      {},
      400,
      /unknown field in schema.path/,
    ],
    ["vectors without a metric", "/v2/namespaces/s1", { upsert_rows: [row] }, {}, 400, /distance_metric is required/],
    [
      "a ragged column",
      "/v2/namespaces/s1",
      { upsert_columns: { id: ["a", "b"], vector: [[1, 0]] }, distance_metric: "cosine_distance" },
      {},
      400,
      /has 1 values, id has 2/,
    ],
    [
      "a pre-tokenized string",
      "/v2/namespaces/s1",
      { ...valid, schema: { terms: { type: "string", full_text_search: { tokenizer: "pre_tokenized_array" } } } },
      {},
      400,
      /needs type \[\]string/,
    ],
    ["a non-JSON body", "/v2/namespaces/s1", valid, { "content-type": "text/plain" }, 415, /application\/json/],
  ])("rejects %s", async (_, path, body, headers, status, error) => {
    const answer = await send(path, body, headers);
    expect(answer).toEqual({ status, body: { status: "error", error: expect.stringMatching(error) } });
  });

  it("rejects wrong dimensions, bad filters and bad rankings on an existing namespace", async () => {
    expect((await send("/v2/namespaces/s2", valid)).status).toBe(200);
    const cases: Array<[unknown, number, RegExp]> = [
      [{ upsert_rows: [{ ...row, id: "b", vector: [1, 0, 0] }] }, 400, /has 3 dimensions, the namespace has 2/],
      [{ upsert_rows: [{ ...row, id: 7 }] }, 400, /string ids/],
      [{ upsert_rows: [{ ...row, id: "c", path: 3 }] }, 400, /not of type string/],
    ];
    for (const [body, status, error] of cases) {
      expect(await send("/v2/namespaces/s2", body)).toMatchObject({
        status,
        body: { error: expect.stringMatching(error) },
      });
    }
    const queries: Array<[unknown, RegExp]> = [
      [{ rank_by: ["vector", "ANN", [1, 0, 0]], top_k: 1 }, /query vector must have 2 numbers/],
      [{ rank_by: ["vector", "ANN", [1, 0]] }, /top_k/],
      [
        { rank_by: ["vector", "ANN", [1, 0]], top_k: 1, filters: ["path", "StartsWith", "p"] },
        /unsupported filter operator/,
      ],
      [
        { rank_by: ["vector", "ANN", [1, 0]], top_k: 1, filters: ["And", ["path", "Eq", "p"]] },
        /malformed filter|must be an array/,
      ],
      [{ rank_by: ["vector", "ANN", [1, 0]], top_k: 1, filters: ["owner", "Eq", "x"] }, /unknown attribute owner/],
      [{ rank_by: ["path", "BM25", "q"], top_k: 1 }, /not configured for full-text search/],
      [{ rank_by: ["Sum", []], top_k: 1 }, /Sum needs at least one operand/],
      [{ rank_by: ["Sum", [["vector", "ANN", [1, 0]]]], top_k: 1 }, /unsupported rank_by/],
      [{ rank_by: ["Product", "2", ["path", "BM25", "q"]], top_k: 1 }, /Product needs a finite number/],
      [{ rank_by: ["Max", [["Product", 2, ["path", "BM25", "q"]]]], top_k: 1 }, /not configured for full-text search/],
      [{ rank_by: ["vector", "ANN", [1, 0]], top_k: 1, include_vectors: true }, /unknown field in query/],
    ];
    for (const [body, error] of queries) {
      expect(await send("/v2/namespaces/s2/query", body)).toMatchObject({
        status: 400,
        body: { error: expect.stringMatching(error) },
      });
    }
    expect(await send("/v2/namespaces/missing/query", { rank_by: ["vector", "ANN", [1, 0]], top_k: 1 })).toMatchObject({
      status: 404,
    });
    expect(tpuf.documents("s2")).toHaveLength(1);
  });
});
