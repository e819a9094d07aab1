import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import { STAGING_RETENTION_MS } from "../../durable-objects/staging.js";
import { EMPTY_ROOT } from "../../protocol/merkle.js";
import {
  CommitResponse,
  MAX_STAGED_PARTS,
  SearchResponse,
  StageResponse,
  SYNC_PROTOCOL,
  TreeStatus,
  VECTOR_KEY_HEADER,
} from "../../protocol/sync.js";
import { call, createAccount, expectJson, expectProblem, hex, seg, vectorKeyOf, type Account } from "./harness.js";

const FILE = seg("f");
const PARTS = [
  "export function revokeApiKey(keyId: string) { markRevoked(keyId); evictFromCache(keyId); }",
  "export function renderMarkdownTable(rows: string[][]) { return rows.map(formatRow).join(newline); }",
  "def compute_merkle_root(children):\n    return sha256(join(sorted(children)))",
];
const chunk = (i: number, text = PARTS[i]!) => ({
  id: hex(String(i + 1)),
  text,
  startLine: i * 10 + 1,
  endLine: i * 10 + text.split("\n").length,
});

async function workspace(account: Account): Promise<string> {
  const response = await call("/v1/workspaces", { token: account.key.key, body: { name: seg("w") } });
  return ((await response.json()) as { id: string }).id;
}

const stage = (account: Account, id: string, key: string, body: Record<string, unknown>) =>
  call(`/v1/workspaces/${id}/tree/stage`, {
    token: account.key.key,
    body: { protocol: SYNC_PROTOCOL, path: FILE, hash: hex("a"), ...body },
    headers: { [VECTOR_KEY_HEADER]: key },
  });

const commit = (account: Account, id: string, key: string, upsert: Record<string, unknown>) =>
  call(`/v1/workspaces/${id}/tree/commit`, {
    token: account.key.key,
    body: { protocol: SYNC_PROTOCOL, upserts: [{ path: FILE, hash: hex("a"), size: 3000, ...upsert }] },
    headers: { [VECTOR_KEY_HEADER]: key },
  });

const search = (account: Account, id: string, key: string, query: string) =>
  call(`/v1/workspaces/${id}/search`, {
    token: account.key.key,
    body: { protocol: SYNC_PROTOCOL, query, topK: 5 },
    headers: { [VECTOR_KEY_HEADER]: key },
  });

const stagedRows = (id: string) =>
  runInDurableObject(
    workspaceStub(env, id),
    (_i, state) => state.storage.sql.exec("SELECT count(*) AS n FROM staged_chunks").one().n,
  );

const rootOf = async (account: Account, id: string) =>
  (await expectJson(await call(`/v1/workspaces/${id}/tree`, { token: account.key.key }), 200, TreeStatus)).root;

describe("staged parts of a file's chunks", () => {
  it("commits a file whose chunks arrived in parts, all of them searchable, and drops the parts", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    const key = vectorKeyOf();
    for (const part of [0, 1]) {
      const staged = await expectJson(
        await stage(account, id, key, { part, chunks: [chunk(part)] }),
        200,
        StageResponse,
      );
      expect(staged).toMatchObject({ path: FILE, hash: hex("a"), part, chunks: 1 });
    }
    // Held, not indexed: the tree is unchanged and search does not see the parts.
    expect(await rootOf(account, id)).toBe(EMPTY_ROOT);
    const before = await expectJson(await search(account, id, key, "revoke an api key"), 200, SearchResponse);
    expect(before.results).toEqual([]);

    const committed = await expectJson(
      await commit(account, id, key, { chunks: [chunk(2)], stagedParts: 2 }),
      200,
      CommitResponse,
    );
    expect(committed).toMatchObject({ files: 1, applied: 1 });
    const hits = await expectJson(await search(account, id, key, "revoke an api key"), 200, SearchResponse);
    expect(hits.results[0]).toMatchObject({ path: FILE, startLine: 1 });
    const lines = hits.results.map((r) => r.startLine).sort((a, b) => a - b);
    expect(lines).toEqual([1, 11, 21]);
    expect(await stagedRows(id)).toBe(0);
  });

  it("keeps a staged chunk's definition pieces until the commit that claims it", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    const key = vectorKeyOf();
    const two = `${PARTS[0]}\n${PARTS[1]}`;
    await expectJson(await stage(account, id, key, { part: 0, chunks: [chunk(0, two)] }), 200, StageResponse);
    const bytes = await runInDurableObject(workspaceStub(env, id), (_i, state) =>
      state.storage.sql.exec("SELECT length(vector) AS v, length(pieces) AS p FROM staged_chunks").one(),
    );
    // Two pieces, each as long as the chunk's own vector.
    expect(bytes.p).toBe(2 * Number(bytes.v));
    await expectJson(await commit(account, id, key, { stagedParts: 1 }), 200, CommitResponse);
    await search(account, id, key, "revoke an api key");
    expect((await workspaceStub(env, id).indexStats())!.backend!.pieces).toBe(2);
  });

  it("refuses a commit naming parts that were never staged, or staged for another hash, and commits nothing", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    const key = vectorKeyOf();
    await expectJson(await stage(account, id, key, { part: 0, chunks: [chunk(0)] }), 200, StageResponse);
    const missing = await expectProblem(
      await commit(account, id, key, { chunks: [chunk(2)], stagedParts: 2 }),
      409,
      "conflict",
    );
    expect(missing).toMatchObject({ upsert: 0, missingParts: [1] });
    const otherHash = await expectProblem(
      await commit(account, id, key, { hash: hex("b"), chunks: [chunk(2)], stagedParts: 1 }),
      409,
      "conflict",
    );
    expect(otherHash).toMatchObject({ missingParts: [0] });
    expect(await rootOf(account, id)).toBe(EMPTY_ROOT);
    // The part that was staged is still held for the commit that claims it.
    expect(await stagedRows(id)).toBe(1);
    await expectJson(await commit(account, id, key, { chunks: [chunk(2)], stagedParts: 1 }), 200, CommitResponse);
  });

  it("refuses a part past the workspace's staging bound with a 409, keeps what it holds, and takes parts again once they are committed", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    const key = vectorKeyOf();
    // Forty distinct one-line chunks a part; MAX_STAGED_BYTES is 64 KiB in these tests.
    const part = (n: number) =>
      Array.from({ length: 40 }, (_, i) => {
        const text = `export const limit${n}x${i} = computeStagingBound(${n}, ${i});`;
        return { id: (n * 1000 + i + 1).toString(16).padStart(64, "0"), text, startLine: i + 1, endLine: i + 1 };
      });
    let staged = 0;
    let refused: Response | undefined;
    for (let n = 0; n < 40 && !refused; n++) {
      const response = await stage(account, id, key, { part: n, chunks: part(n) });
      if (response.status === 200) staged++;
      else refused = response;
    }
    expect(staged, await refused?.clone().text()).toBeGreaterThan(0);
    expect(refused?.status, "no part was refused").toBe(409);
    const rows = await stagedRows(id);
    const problem = await expectProblem(refused!, 409, "conflict");
    expect(problem).toMatchObject({ stagedLimitBytes: 64 * 1024 });
    expect(problem.detail).toContain("staged parts no commit has claimed");
    // The refused part left nothing behind, and the parts already staged are whole.
    expect(await stagedRows(id)).toBe(rows);
    expect(rows).toBe(staged * 40);
    // Staging a part again replaces it, so a retry of one already held still fits.
    await expectJson(await stage(account, id, key, { part: 0, chunks: part(0) }), 200, StageResponse);

    await expectJson(await commit(account, id, key, { stagedParts: staged }), 200, CommitResponse);
    expect(await stagedRows(id)).toBe(0);
    await expectJson(
      await stage(account, id, key, { hash: hex("c"), part: 0, chunks: part(staged) }),
      200,
      StageResponse,
    );
  });

  it("replaces a part staged again, so a retried request leaves one copy", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    const key = vectorKeyOf();
    await stage(account, id, key, { part: 0, chunks: [chunk(0), chunk(1)] });
    await expectJson(await stage(account, id, key, { part: 0, chunks: [chunk(1)] }), 200, StageResponse);
    expect(await stagedRows(id)).toBe(1);
    await expectJson(await commit(account, id, key, { chunks: [chunk(2)], stagedParts: 1 }), 200, CommitResponse);
    const hits = await expectJson(await search(account, id, key, "markdown table rows"), 200, SearchResponse);
    expect(hits.results.map((r) => r.startLine).sort((a, b) => a - b)).toEqual([11, 21]);
  });

  it("holds parts as the index does, keyed and without text", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    await stage(account, id, vectorKeyOf(), { part: 0, chunks: [chunk(0), chunk(1), chunk(2)] });
    const dump = await runInDurableObject(workspaceStub(env, id), (_i, state) =>
      JSON.stringify(state.storage.sql.exec("SELECT * FROM staged_chunks").toArray()),
    );
    expect(dump).toContain(hex("1"));
    for (const word of ["revokeApiKey", "markRevoked", "compute_merkle_root", "renderMarkdownTable", "formatRow"])
      expect(dump).not.toContain(word);
  });

  it("drops parts no commit claimed after a day", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    await stage(account, id, vectorKeyOf(), { part: 0, chunks: [chunk(0)] });
    await stage(account, id, vectorKeyOf(), { hash: hex("c"), part: 0, chunks: [chunk(1)] });
    const stub = workspaceStub(env, id);
    await runInDurableObject(stub, async (_i, state) => {
      expect(await state.storage.getAlarm()).not.toBeNull();
      state.storage.sql.exec(
        "UPDATE staged_chunks SET staged_at = ? WHERE hash = ?",
        Date.now() - STAGING_RETENTION_MS - 1000,
        hex("a"),
      );
    });
    await runDurableObjectAlarm(stub);
    const left = await runInDurableObject(stub, (_i, state) =>
      state.storage.sql.exec("SELECT hash FROM staged_chunks").toArray(),
    );
    expect(left).toEqual([{ hash: hex("c") }]);
    // The part still held keeps an alarm set for when it is due.
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).not.toBeNull();
  });

  it("refuses malformed parts, parts without a vector key, and another org's workspace", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    const key = vectorKeyOf();
    await expectProblem(await stage(account, id, "short", { part: 0, chunks: [chunk(0)] }), 400, "invalid_request");
    await expectProblem(await stage(account, id, key, { part: 0, chunks: [] }), 400, "invalid_request");
    await expectProblem(
      await stage(account, id, key, { part: MAX_STAGED_PARTS, chunks: [chunk(0)] }),
      400,
      "invalid_request",
    );
    await expectProblem(await stage(account, id, key, { part: -1, chunks: [chunk(0)] }), 400, "invalid_request");
    const twice = await expectProblem(
      await stage(account, id, key, { part: 0, chunks: [chunk(0), chunk(0)] }),
      400,
      "invalid_request",
    );
    expect(JSON.stringify(twice.errors)).toContain("chunks");
    await expectProblem(
      await stage(account, id, key, { part: 0, chunks: [chunk(0), { ...chunk(1), id: hex("1") }] }),
      400,
      "invalid_request",
    );
    await expectProblem(await commit(account, id, key, { stagedParts: MAX_STAGED_PARTS + 1 }), 400, "invalid_request");
    const stranger = await createAccount();
    await expectProblem(await stage(stranger, id, key, { part: 0, chunks: [chunk(0)] }), 404, "not_found");
    expect(await stagedRows(id)).toBe(0);
  });

  it("tells the client the edge's body limit with the tree", async () => {
    const account = await createAccount();
    const id = await workspace(account);
    const status = await expectJson(
      await call(`/v1/workspaces/${id}/tree`, { token: account.key.key }),
      200,
      TreeStatus,
    );
    expect(status.maxBodyBytes).toBe(Number(env.MAX_BODY_BYTES));
  });
});
