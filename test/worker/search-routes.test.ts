import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import { SearchResponse, SYNC_PROTOCOL, VECTOR_KEY_HEADER } from "../../protocol/sync.js";
import { questionTermWeights } from "../../protocol/embedder/static.js";
import { stem } from "../../protocol/embedder/tokens.js";
import { embedderFor } from "../../workers/embedders/index.js";
import { bundledStaticModel } from "../../workers/embedders/static-model.js";
import { call, createAccount, expectJson, expectProblem, hex, seg, vectorKeyOf, type Account } from "./harness.js";

const FILES = {
  [`${seg("s")}/${seg("a")}`]:
    "export function revokeApiKey(keyId: string) { markRevoked(keyId); evictFromCache(keyId); }",
  [`${seg("s")}/${seg("b")}`]:
    "export function renderMarkdownTable(rows: string[][]) { return rows.map(formatRow).join(newline); }",
  [seg("c")]: "def compute_merkle_root(children):\n    return sha256(join(sorted(children)))",
};

async function indexed(account: Account, vectorKey: string, files: Record<string, string> = FILES) {
  const id = (
    (await (await call("/v1/workspaces", { token: account.key.key, body: { name: seg("w") } })).json()) as {
      id: string;
    }
  ).id;
  const upserts = Object.entries(files).map(([path, text], i) => ({
    path,
    hash: hex(String(i + 1)),
    size: text.length,
    language: text.startsWith("def") ? "python" : "typescript",
    chunks: [{ id: hex(String.fromCharCode(97 + i)), text, startLine: 1, endLine: text.split("\n").length }],
  }));
  const response = await call(`/v1/workspaces/${id}/tree/commit`, {
    token: account.key.key,
    body: { protocol: SYNC_PROTOCOL, upserts },
    headers: { [VECTOR_KEY_HEADER]: vectorKey },
  });
  expect(response.status, await response.clone().text()).toBe(200);
  return id;
}

const search = (account: Account, id: string, vectorKey: string, body: Record<string, unknown>) =>
  call(`/v1/workspaces/${id}/search`, {
    token: account.key.key,
    body: { protocol: SYNC_PROTOCOL, ...body },
    headers: { [VECTOR_KEY_HEADER]: vectorKey },
  });

describe("indexing and search", () => {
  it("finds the chunk that answers a question, with its encrypted path and lines", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexed(account, key);
    const answer = await expectJson(
      await search(account, id, key, { query: "revoke an api key", topK: 2 }),
      200,
      SearchResponse,
    );
    expect(answer.results[0]).toMatchObject({ path: `${seg("s")}/${seg("a")}`, startLine: 1, chunkId: hex("a") });
    expect(answer.results).toHaveLength(2);
  });

  it("answers a question of words the model does not know by keyed terms alone, not with arbitrary chunks", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexed(account, key);
    // No term of the model's vocabulary: a zero vector, whose ranking of the chunks would be noise.
    const none = await expectJson(
      await search(account, id, key, { query: "zqxjv wqpfk", topK: 3 }),
      200,
      SearchResponse,
    );
    expect(none.results).toEqual([]);
  });

  it("is useless without the key: another key's query matches nothing in particular", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexed(account, key);
    const right = await expectJson(
      await search(account, id, key, { query: "revoke api key cache" }),
      200,
      SearchResponse,
    );
    const wrong = await expectJson(
      await search(account, id, vectorKeyOf(), { query: "revoke api key cache" }),
      200,
      SearchResponse,
    );
    const top = right.results[0]!;
    expect(top.path).toBe(`${seg("s")}/${seg("a")}`);
    expect(top.channels.vector).toBeGreaterThan(0.3);
    expect(top.channels.lexical).toBeGreaterThan(0);
    // Another key's terms are other ids, so the lexical channel finds nothing; its vectors point elsewhere.
    expect(wrong.results.every((hit) => hit.channels.lexical === null)).toBe(true);
    for (const hit of wrong.results) expect(Math.abs(hit.channels.vector!)).toBeLessThan(top.channels.vector! / 2);
  });

  it("ranks a third channel with the question's translations: code found through a term the question never says", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexed(account, key);
    // Neither the model nor the keyed terms know "zqxjv"; its translation names a term of one chunk.
    const translated = await expectJson(
      await search(account, id, key, {
        query: "zqxjv",
        translations: [{ term: "zqxjv", alternatives: ["markdown", "nowhere"], probabilities: [0.8, 0.1] }],
      }),
      200,
      SearchResponse,
    );
    expect(translated.results.map((r) => r.path)).toEqual([`${seg("s")}/${seg("b")}`]);
    expect(translated.results[0]!.channels).toMatchObject({ vector: null, lexical: null });
    expect(translated.results[0]!.channels.translation).toBeTypeOf("number");
    // The same question without translations finds nothing, and says nothing of the channel.
    const plain = await expectJson(await search(account, id, key, { query: "zqxjv" }), 200, SearchResponse);
    expect(plain.results).toEqual([]);
    // With the question's own words, every hit says what the translation channel scored it.
    const both = await expectJson(
      await search(account, id, key, {
        query: "revoke an api key",
        translations: [{ term: "revok", alternatives: ["evict"], probabilities: [0.5] }],
      }),
      200,
      SearchResponse,
    );
    expect(both.results[0]!.path).toBe(`${seg("s")}/${seg("a")}`);
    expect(both.results.every((r) => "translation" in r.channels)).toBe(true);
  });

  it("ranks the chunk that defines a name the question says above chunks that only call it", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const defines = `${seg("d")}/${seg("a")}`;
    const id = await indexed(account, key, {
      [defines]: "export function evictFromCache(entry: Entry) {\n  store.remove(entry.key);\n}",
      [`${seg("d")}/${seg("b")}`]:
        "export function sweep(entries: Entry[]) {\n  for (const e of entries) if (e.stale) evictFromCache(e);\n  evictFromCache(last);\n}",
      [`${seg("d")}/${seg("c")}`]:
        "export function reload(entries: Entry[]) {\n  entries.forEach(evictFromCache);\n  return evictFromCache(entries[0]);\n}",
    });
    const answer = await expectJson(
      await search(account, id, key, { query: "evict from cache", topK: 3 }),
      200,
      SearchResponse,
    );
    expect(answer.results).toHaveLength(3);
    const lexical = answer.results.map((r) => [r.path, r.channels.lexical!] as const);
    const mine = lexical.find(([path]) => path === defines)![1];
    // Its name's terms are a field of their own, which the two callers do not have.
    for (const [path, score] of lexical) if (path !== defines) expect(mine).toBeGreaterThan(score);
    expect(answer.results[0]!.path).toBe(defines);
  });

  it("scores a chunk's vector channel by the best of its own vector and its definitions' pieces", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const both = `${seg("p")}/${seg("a")}`;
    const text = [
      "export function renderMarkdownTable(rows: string[][], widths: number[]) {",
      "  const header = rows[0].map((cell, i) => cell.padEnd(widths[i])).join(' | ');",
      "  const rule = widths.map((w) => '-'.repeat(w)).join(' | ');",
      "  return [header, rule, ...rows.slice(1).map((r) => r.join(' | '))].join(newline);",
      "}",
      "",
      "export function revokeApiKey(keyId: string) {",
      "  markRevoked(keyId);",
      "}",
    ].join("\n");
    const id = await indexed(account, key, { [both]: text, [seg("q")]: "export const answer = 42;" });
    const question = "revoke an api key";
    const answer = await expectJson(await search(account, id, key, { query: question, topK: 2 }), 200, SearchResponse);
    const hit = answer.results.find((r) => r.path === both)!;
    // The same cosines, unkeyed (the rotation keeps them): the question's with the chunk and with each piece.
    const embedder = embedderFor(env, "test");
    const pieces = embedder.documentPieces!(text);
    expect(pieces).toHaveLength(2);
    const [q, own, ...parts] = [
      ...(await embedder.embed([question], "query")),
      ...(await embedder.embed([text, ...pieces], "document")),
    ];
    const cos = (v: Float32Array) => v.reduce((s, x, i) => s + x * q![i]!, 0);
    expect(cos(parts[1]!)).toBeGreaterThan(cos(own!) + 0.05);
    expect(hit.channels.vector).toBeCloseTo(Math.max(cos(own!), ...parts.map(cos)), 1);
    expect(hit.channels.vector!).toBeGreaterThan(cos(own!) + 0.03);
    const stats = await workspaceStub(env, id).indexStats();
    expect(stats!.backend!.pieces).toBe(2);
  });

  it("weighs each word of the question by what the model learned it says", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const says = `${seg("d")}/${seg("a")}`;
    const fills = `${seg("d")}/${seg("b")}`;
    // One word each, the same count; the chunk with the word that says more is the longer of the
    // two, so with every word at 1 its BM25 would be the lower.
    const id = await indexed(account, key, {
      [says]: "export const a = evict(xx);",
      [fills]: "export const b = only();",
    });
    const answer = await expectJson(
      await search(account, id, key, { query: "only evict", topK: 2 }),
      200,
      SearchResponse,
    );
    const lexical = new Map(answer.results.map((r) => [r.path, r.channels.lexical!]));
    const weigh = questionTermWeights(bundledStaticModel());
    expect(weigh(stem("evict"))).toBeGreaterThan(weigh(stem("only")));
    expect(lexical.get(says)!).toBeGreaterThan(lexical.get(fills)!);
  });

  it("refuses malformed translations", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexed(account, key);
    const word = { term: "remov", alternatives: ["delet"], probabilities: [0.5] };
    for (const translations of [
      [{ ...word, probabilities: [0.5, 0.2] }],
      [{ ...word, probabilities: [1.5] }],
      [{ ...word, term: "" }],
      [{ ...word, alternatives: ["x".repeat(101)] }],
      [{ ...word, extra: 1 }],
      Array.from({ length: 33 }, () => word),
      [{ ...word, alternatives: Array(129).fill("delet"), probabilities: Array(129).fill(0.1) }],
      "remove",
    ])
      await expectProblem(await search(account, id, key, { query: "remove", translations }), 400, "invalid_request");
  });

  it("searches only one language when asked, and refuses an unknown language", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexed(account, key);
    const python = await expectJson(
      await search(account, id, key, { query: "revoke an api key", language: "python" }),
      200,
      SearchResponse,
    );
    expect(python.results.map((r) => r.path)).toEqual([seg("c")]);
    await expectProblem(await search(account, id, key, { query: "x", language: "cobol" }), 400, "invalid_request");
  });

  it("searches only below a directory when asked, and forgets deleted files", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexed(account, key);
    const within = await expectJson(
      await search(account, id, key, { query: "merkle root", pathPrefix: seg("s") }),
      200,
      SearchResponse,
    );
    expect(within.results.every((r) => r.path.startsWith(`${seg("s")}/`))).toBe(true);
    await call(`/v1/workspaces/${id}/tree/commit`, {
      token: account.key.key,
      body: { protocol: SYNC_PROTOCOL, deletes: [seg("s")] },
    });
    const after = await expectJson(await search(account, id, key, { query: "revoke an api key" }), 200, SearchResponse);
    expect(after.results.map((r) => r.path)).toEqual([seg("c")]);
  });

  it("never stores chunk text, in the object's SQLite or in R2", async () => {
    const account = await createAccount();
    const id = await indexed(account, vectorKeyOf());
    const stub = workspaceStub(env, id);
    const dump = await runInDurableObject(stub, (_i, state) => {
      const tables = state.storage.sql.exec("SELECT name FROM sqlite_master WHERE type = 'table'").toArray();
      return JSON.stringify(tables.map((t) => state.storage.sql.exec(`SELECT * FROM "${String(t.name)}"`).toArray()));
    });
    const objects = await env.INDEX.list();
    let r2 = "";
    for (const o of objects.objects)
      r2 += new TextDecoder("latin1").decode(await (await env.INDEX.get(o.key))!.arrayBuffer());
    for (const word of ["revokeApiKey", "markRevoked", "compute_merkle_root", "renderMarkdownTable"]) {
      expect(dump).not.toContain(word);
      expect(r2).not.toContain(word);
    }
    expect(dump).toContain(hex("a"));
  });

  it("refuses chunks or a search without a well-formed vector key", async () => {
    const account = await createAccount();
    const id = (
      (await (await call("/v1/workspaces", { token: account.key.key, body: { name: seg("w") } })).json()) as {
        id: string;
      }
    ).id;
    const upserts = [
      { path: seg("x"), hash: hex("1"), size: 1, chunks: [{ id: hex("2"), text: "x", startLine: 1, endLine: 1 }] },
    ];
    await expectProblem(
      await call(`/v1/workspaces/${id}/tree/commit`, {
        token: account.key.key,
        body: { protocol: SYNC_PROTOCOL, upserts },
      }),
      400,
      "invalid_request",
    );
    await expectProblem(
      await call(`/v1/workspaces/${id}/search`, {
        token: account.key.key,
        body: { protocol: SYNC_PROTOCOL, query: "x" },
      }),
      400,
      "invalid_request",
    );
    await expectProblem(await search(account, id, "short", { query: "x" }), 400, "invalid_request");
    await expectProblem(await search(account, id, vectorKeyOf(), { query: "" }), 400, "invalid_request");
    await expectProblem(await search(account, id, vectorKeyOf(), { query: "x", topK: 1000 }), 400, "invalid_request");
  });
});
