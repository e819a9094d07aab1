import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import type { IndexedChunk } from "../../durable-objects/workspace.js";
import { BUILTIN_DIMS, BUILTIN_MODEL, embedBuiltin } from "../../protocol/embedder/builtin.js";
import { TermKey } from "../../protocol/keyed-terms.js";
import { ReembedResponse, SearchResponse, SYNC_PROTOCOL, TreeStatus, VECTOR_KEY_HEADER } from "../../protocol/sync.js";
import { VectorKey } from "../../protocol/vector-key.js";
import { StaticEmbedder } from "../../workers/embedders/static.js";
import { bundledStaticModel } from "../../workers/embedders/static-model.js";
import { call, createAccount, expectJson, expectProblem, hex, seg, vectorKeyOf, type Account } from "./harness.js";

const LEXICAL = { model: BUILTIN_MODEL, dims: BUILTIN_DIMS };

const FILES: Record<string, string> = {
  [seg("a")]: "export function revokeApiKey(keyId: string) { markRevoked(keyId); evictFromCache(keyId); }",
  [seg("b")]: "export function renderMarkdownTable(rows: string[][]) { return rows.map(formatRow).join(newline); }",
  [seg("c")]: "def compute_merkle_root(children):\n    return sha256(join(sorted(children)))",
  [seg("d")]: "export function parseDuration(text: string) { return Number(text.replace(/ms$/, '')); }",
};
const PATHS = Object.keys(FILES);

const keyBytesOf = (key: string) =>
  Uint8Array.from(atob(key.replace(/-/g, "+").replace(/_/g, "/") + "="), (ch) => ch.charCodeAt(0));

const upsertOf = (path: string, text: string, hash: string) => ({
  path,
  hash,
  size: text.length,
  language: "typescript" as const,
  chunks: [{ id: hex(path[0]!.replace(/[^0-9a-f]/, "e")), text, startLine: 1, endLine: text.split("\n").length }],
});

/**
 * A workspace as the edge indexed it before its built-in embedder changed: every chunk embedded
 * by `sextant-lexical-v1` (512 dimensions), rotated with the client's key, through the object's
 * RPC as the route then made it.
 */
async function indexedByLexical(account: Account, key: string, model = BUILTIN_MODEL) {
  const id = (
    (await (await call("/v1/workspaces", { token: account.key.key, body: { name: seg("w") } })).json()) as {
      id: string;
    }
  ).id;
  const bytes = keyBytesOf(key);
  const rotation = new VectorKey(bytes, BUILTIN_DIMS);
  const terms = new TermKey(bytes);
  const upserts = PATHS.map((path, i) => upsertOf(path, FILES[path]!, hex(String(i + 1))));
  const chunks: IndexedChunk[] = upserts.flatMap((u) =>
    u.chunks.map((chunk) => ({
      path: u.path,
      chunkId: chunk.id,
      startLine: chunk.startLine,
      endLine: chunk.endLine,
      language: u.language,
      vector: rotation.apply(embedBuiltin(chunk.text)),
      terms: TermKey.withExtra(terms.terms(chunk.text), []),
    })),
  );
  const tree = { upserts: upserts.map(({ path, hash, size }) => ({ path, hash, size })), deletes: [] };
  const committed = await workspaceStub(env, id).commit(tree, chunks, { embedder: { ...LEXICAL, model } });
  expect(committed).toMatchObject({ files: PATHS.length, model, reembed: false });
  return id;
}

const search = (account: Account, id: string, key: string, query: string) =>
  call(`/v1/workspaces/${id}/search`, {
    token: account.key.key,
    body: { protocol: SYNC_PROTOCOL, query, topK: 3 },
    headers: { [VECTOR_KEY_HEADER]: key },
  });

const status = async (account: Account, id: string) =>
  expectJson(await call(`/v1/workspaces/${id}/tree`, { token: account.key.key }), 200, TreeStatus);

/** Re-sends files through the route as `sextant index` does: same paths, and hashes unless changed. */
async function resend(
  account: Account,
  id: string,
  key: string,
  files: { path: string; text: string; hash: string }[],
) {
  const response = await call(`/v1/workspaces/${id}/tree/commit`, {
    token: account.key.key,
    body: { protocol: SYNC_PROTOCOL, upserts: files.map((f) => upsertOf(f.path, f.text, f.hash)) },
    headers: { [VECTOR_KEY_HEADER]: key },
  });
  expect(response.status, await response.clone().text()).toBe(200);
  return response.json() as Promise<TreeStatus>;
}

const original = (paths: string[]) =>
  paths.map((path) => ({ path, text: FILES[path]!, hash: hex(String(PATHS.indexOf(path) + 1)) }));

/** R2 objects under a prefix of the workspace's. */
async function objectsUnder(id: string, below: string) {
  const objectId = env.WORKSPACE.idFromName(id).toString();
  const listed = await env.INDEX.list({ prefix: `workspaces/${objectId}/${below}` });
  return listed.objects.map((o) => o.key);
}

/**
 * A workspace as the edge indexed it with the learned model before definition pieces: one vector
 * per chunk from `sextant-static-v2`, rotated with the client's key, under that model's name.
 */
async function indexedWithoutPieces(account: Account, key: string, files: Record<string, string>) {
  const id = (
    (await (await call("/v1/workspaces", { token: account.key.key, body: { name: seg("w") } })).json()) as {
      id: string;
    }
  ).id;
  const embedder = new StaticEmbedder(bundledStaticModel);
  const bytes = keyBytesOf(key);
  const rotation = new VectorKey(bytes, embedder.dims);
  const terms = new TermKey(bytes);
  const upserts = Object.entries(files).map(([path, text], i) => upsertOf(path, text, hex(String(i + 1))));
  const chunks: IndexedChunk[] = [];
  for (const u of upserts)
    for (const chunk of u.chunks)
      chunks.push({
        path: u.path,
        chunkId: chunk.id,
        startLine: chunk.startLine,
        endLine: chunk.endLine,
        language: u.language,
        vector: rotation.apply((await embedder.embed([chunk.text], "document"))[0]!),
        terms: TermKey.withExtra(terms.chunk(chunk.text), []),
      });
  const tree = { upserts: upserts.map(({ path, hash, size }) => ({ path, hash, size })), deletes: [] };
  const edge = { model: embedder.model, dims: embedder.dims };
  expect(await workspaceStub(env, id).commit(tree, chunks, { embedder: edge })).toMatchObject({
    model: "sextant-static-v2",
    reembed: false,
  });
  return id;
}

describe("a workspace indexed by the learned model before definition pieces", () => {
  it("is searched with the model's question vectors until re-sent, then moves to an index with pieces", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const twoDefinitions = `${FILES[seg("b")]}\n\n${FILES[seg("a")]}`;
    const files = { [seg("a")]: twoDefinitions, [seg("c")]: FILES[seg("c")]! };
    const id = await indexedWithoutPieces(account, key, files);
    expect(await status(account, id)).toMatchObject({
      model: "sextant-static-v2",
      embedder: "sextant-static-v2+pieces",
      reembed: true,
    });
    const before = await expectJson(await search(account, id, key, "revoke an api key"), 200, SearchResponse);
    expect(before).toMatchObject({ mode: "hybrid", model: "sextant-static-v2" });
    expect(before.results[0]?.path).toBe(seg("a"));
    expect(before.results[0]?.channels.vector).not.toBeNull();

    const done = await resend(
      account,
      id,
      key,
      Object.entries(files).map(([path, text], i) => ({ path, text, hash: hex(String(i + 1)) })),
    );
    expect(done).toMatchObject({ model: "sextant-static-v2+pieces", reembed: false });
    const after = await expectJson(await search(account, id, key, "revoke an api key"), 200, SearchResponse);
    expect(after).toMatchObject({ mode: "hybrid", model: "sextant-static-v2+pieces" });
    expect(after.results[0]?.path).toBe(seg("a"));
    // The chunk's second definition now has a vector of its own, which the question is closer to.
    expect(after.results[0]!.channels.vector!).toBeGreaterThan(before.results[0]!.channels.vector!);
    expect((await workspaceStub(env, id).indexStats())!.backend!.pieces).toBe(2);
    expect(await objectsUnder(id, "segments/")).toEqual([]);
  });
});

describe("a workspace indexed by another embedder than the edge's", () => {
  it("is searchable after the edge's embedder changed: the question is embedded by the index's model", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key);
    const answer = await expectJson(await search(account, id, key, "revoke an api key"), 200, SearchResponse);
    expect(answer.results[0]?.path).toBe(seg("a"));
    expect(answer).toMatchObject({ mode: "hybrid", model: BUILTIN_MODEL });
    expect(answer.results[0]?.channels.vector).not.toBeNull();
  });

  it("says in its status that it must be re-embedded, and by which model it was made", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key);
    const tree = await status(account, id);
    expect(tree).toMatchObject({ model: BUILTIN_MODEL, reembed: true, files: PATHS.length });
    expect(tree.embedder).not.toBe(BUILTIN_MODEL);
    const detail = (await (await call(`/v1/workspaces/${id}`, { token: account.key.key })).json()) as {
      tree: TreeStatus;
    };
    expect(detail.tree).toMatchObject({ model: BUILTIN_MODEL, reembed: true });
  });

  it("searches by keyed terms alone when the edge no longer has the index's model", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key, "retired-model-v0");
    const answer = await expectJson(await search(account, id, key, "revokeApiKey"), 200, SearchResponse);
    expect(answer).toMatchObject({ mode: "lexical" });
    expect(answer.model).toBeUndefined();
    expect(answer.results[0]?.path).toBe(seg("a"));
    expect(answer.results.every((r) => r.channels.vector === null)).toBe(true);
  });

  it("moves to the edge's model once every file is re-sent, and deletes the old generation's storage", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key);
    expect(await objectsUnder(id, "segments/")).not.toHaveLength(0);
    const done = await resend(account, id, key, original(PATHS));
    expect(done).toMatchObject({ reembed: false, files: PATHS.length });
    expect(done.model).toBe(done.embedder);
    expect(await status(account, id)).toMatchObject({ reembed: false, model: done.embedder });
    const answer = await expectJson(await search(account, id, key, "revoke an api key"), 200, SearchResponse);
    expect(answer).toMatchObject({ mode: "hybrid", model: done.embedder });
    expect(answer.results[0]?.path).toBe(seg("a"));
    expect(await objectsUnder(id, "segments/")).toEqual([]);
    expect(await objectsUnder(id, "g1/segments/")).not.toHaveLength(0);
  });

  it("keeps serving the old generation while half the files are re-sent, and finishes when the rest arrive", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key);
    const half = await resend(account, id, key, original(PATHS.slice(0, 2)));
    expect(half).toMatchObject({ reembed: true, model: BUILTIN_MODEL });
    for (const [query, path] of [
      ["revoke an api key", seg("a")],
      ["merkle root of children", seg("c")],
    ] as const) {
      const answer = await expectJson(await search(account, id, key, query), 200, SearchResponse);
      expect(answer).toMatchObject({ model: BUILTIN_MODEL });
      expect(answer.results[0]?.path).toBe(path);
    }
    // An interrupted client re-sends everything: files already moved are replaced, not doubled.
    const done = await resend(account, id, key, original(PATHS));
    expect(done).toMatchObject({ reembed: false });
    const answer = await expectJson(await search(account, id, key, "merkle root of children"), 200, SearchResponse);
    expect(answer.results[0]?.path).toBe(seg("c"));
    expect(new Set(answer.results.map((r) => r.path)).size).toBe(answer.results.length);
  });

  it("serves a file changed during the move with its new lines only, before and after the switch", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key);
    const changed = {
      path: seg("b"),
      text: "export function slugifyHeading(title: string) { return kebab(title); }",
      hash: hex("9"),
    };
    const added = {
      path: seg("e"),
      text: "def haversine_distance(lat1, lon1, lat2, lon2):\n    return 0",
      hash: hex("a"),
    };
    await resend(account, id, key, [changed, added]);
    // Its old lines are gone at once: no hit of it matches their words.
    const before = await expectJson(await search(account, id, key, "renderMarkdownTable rows"), 200, SearchResponse);
    expect(before.results.find((r) => r.path === seg("b") && r.channels.lexical !== null)).toBeUndefined();
    // Its new lines, and a file added during the move, are found in the new generation meanwhile.
    const during = await expectJson(await search(account, id, key, "slugifyHeading title"), 200, SearchResponse);
    expect(during).toMatchObject({ mode: "hybrid", model: BUILTIN_MODEL });
    expect(during.results[0]).toMatchObject({ path: seg("b"), startLine: 1 });
    const fresh = await expectJson(await search(account, id, key, "haversine distance"), 200, SearchResponse);
    expect(fresh.results[0]?.path).toBe(seg("e"));
    // A file moved unchanged is served once, from the old generation.
    await resend(account, id, key, original([seg("a")]));
    const once = await expectJson(await search(account, id, key, "revoke an api key"), 200, SearchResponse);
    expect(once.results.filter((r) => r.path === seg("a"))).toHaveLength(1);
    const done = await resend(account, id, key, [...original(PATHS.filter((p) => p !== seg("b"))), changed, added]);
    expect(done).toMatchObject({ reembed: false });
    const after = await expectJson(await search(account, id, key, "slugifyHeading title"), 200, SearchResponse);
    expect(after.results[0]?.path).toBe(seg("b"));
    const stale = await expectJson(await search(account, id, key, "renderMarkdownTable rows"), 200, SearchResponse);
    expect(stale.results.find((r) => r.path === seg("b") && r.channels.lexical !== null)).toBeUndefined();
  });

  it("moves a large file staged in parts", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key);
    const stage = await call(`/v1/workspaces/${id}/tree/stage`, {
      token: account.key.key,
      body: {
        protocol: SYNC_PROTOCOL,
        path: seg("d"),
        hash: hex("4"),
        part: 0,
        chunks: [{ id: hex("f"), text: "export const staged = parseDurationPart;", startLine: 1, endLine: 1 }],
      },
      headers: { [VECTOR_KEY_HEADER]: key },
    });
    expect(stage.status, await stage.clone().text()).toBe(200);
    const rest = original(PATHS.filter((p) => p !== seg("d"))).map((f) => upsertOf(f.path, f.text, f.hash));
    const d = { ...upsertOf(seg("d"), "export function parseDuration(text) {}", hex("4")), stagedParts: 1 };
    d.chunks[0]!.startLine = d.chunks[0]!.endLine = 2;
    const response = await call(`/v1/workspaces/${id}/tree/commit`, {
      token: account.key.key,
      body: { protocol: SYNC_PROTOCOL, upserts: [...rest, d] },
      headers: { [VECTOR_KEY_HEADER]: key },
    });
    expect(await expectJson(response, 200, TreeStatus)).toMatchObject({ reembed: false });
    const answer = await expectJson(await search(account, id, key, "parseDurationPart"), 200, SearchResponse);
    expect(answer.results[0]).toMatchObject({ path: seg("d"), startLine: 1 });
  });

  it("refuses vectors of a size neither generation expects with a 409 problem", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key);
    const stub = workspaceStub(env, id);
    const chunk: IndexedChunk = {
      path: seg("a"),
      chunkId: hex("a"),
      startLine: 1,
      endLine: 1,
      language: "text",
      vector: new Float32Array(64).fill(0.1),
      terms: { ids: new Uint32Array(), counts: new Uint16Array() },
    };
    const tree = { upserts: [{ path: seg("a"), hash: hex("1"), size: 1 }], deletes: [] };
    expect(await stub.commit(tree, [chunk], { embedder: { model: "edge-model", dims: 256 } })).toEqual({
      mismatch: { expected: 256, got: 64 },
    });
    expect(await stub.commit(tree, [chunk], { embedder: LEXICAL })).toEqual({ mismatch: { expected: 512, got: 64 } });
  });

  it("lists the files already moved, page by page, until the move finishes", async () => {
    const account = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(account, key);
    const moved = (body: Record<string, unknown>) =>
      call(`/v1/workspaces/${id}/tree/reembed`, { token: account.key.key, body: { protocol: SYNC_PROTOCOL, ...body } });
    expect(await expectJson(await moved({}), 200, ReembedResponse)).toEqual({
      protocol: SYNC_PROTOCOL,
      files: [],
      next: null,
    });
    const sent = original(PATHS.slice(0, 3)).sort((a, b) => (a.path < b.path ? -1 : 1));
    await resend(account, id, key, sent);
    const all = await expectJson(await moved({}), 200, ReembedResponse);
    expect(all).toEqual({ protocol: SYNC_PROTOCOL, files: sent.map(({ path, hash }) => ({ path, hash })), next: null });
    const first = await expectJson(await moved({ limit: 2 }), 200, ReembedResponse);
    expect(first.files.map((f) => f.path)).toEqual([sent[0]!.path, sent[1]!.path]);
    expect(first.next).toBe(sent[1]!.path);
    const second = await expectJson(await moved({ after: first.next, limit: 2 }), 200, ReembedResponse);
    expect(second).toEqual({
      protocol: SYNC_PROTOCOL,
      files: [{ path: sent[2]!.path, hash: sent[2]!.hash }],
      next: null,
    });
    // A file deleted since it was moved is no longer listed.
    const gone = await call(`/v1/workspaces/${id}/tree/commit`, {
      token: account.key.key,
      body: { protocol: SYNC_PROTOCOL, upserts: [], deletes: [sent[0]!.path] },
      headers: { [VECTOR_KEY_HEADER]: key },
    });
    expect(gone.status).toBe(200);
    expect((await expectJson(await moved({}), 200, ReembedResponse)).files.map((f) => f.path)).toEqual([
      sent[1]!.path,
      sent[2]!.path,
    ]);
    const rest = PATHS.filter((p) => !sent.some((s) => s.path === p));
    expect(await resend(account, id, key, original(rest))).toMatchObject({ reembed: false });
    expect(await expectJson(await moved({}), 200, ReembedResponse)).toEqual({
      protocol: SYNC_PROTOCOL,
      files: [],
      next: null,
    });
  });

  it("refuses a malformed listing of moved files, and another org's workspace", async () => {
    const owner = await createAccount();
    const other = await createAccount();
    const id = await indexedByLexical(owner, vectorKeyOf());
    const moved = (token: string, body: unknown) => call(`/v1/workspaces/${id}/tree/reembed`, { token, body });
    await expectProblem(await moved(other.key.key, { protocol: SYNC_PROTOCOL }), 404, "not_found");
    for (const body of [
      {},
      { protocol: 1 },
      { protocol: SYNC_PROTOCOL, after: "plain/text.ts" },
      { protocol: SYNC_PROTOCOL, limit: 0 },
      { protocol: SYNC_PROTOCOL, limit: 5001 },
      { protocol: SYNC_PROTOCOL, cursor: "x" },
    ])
      await expectProblem(await moved(owner.key.key, body), 400, "invalid_request");
  });

  it("answers 404 for another org's workspace, and a problem for a bad request", async () => {
    const owner = await createAccount();
    const other = await createAccount();
    const key = vectorKeyOf();
    const id = await indexedByLexical(owner, key);
    await expectProblem(await call(`/v1/workspaces/${id}/tree`, { token: other.key.key }), 404, "not_found");
    await expectProblem(await search(other, id, key, "revoke"), 404, "not_found");
    const bad = await call(`/v1/workspaces/${id}/tree/commit`, {
      token: owner.key.key,
      body: { protocol: SYNC_PROTOCOL, upserts: [{ path: "plain/text.ts", hash: hex("1"), size: 1 }] },
      headers: { [VECTOR_KEY_HEADER]: key },
    });
    await expectProblem(bad, 400, "invalid_request");
  });
});
