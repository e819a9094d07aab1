import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import { WorkspaceDetail } from "../../protocol/schemas.js";
import {
  CommitResponse,
  DiffResponse,
  MAX_FILE_BYTES,
  MAX_TREE_BYTES,
  SearchResponse,
  SYNC_PROTOCOL,
  VECTOR_KEY_HEADER,
} from "../../protocol/sync.js";
import { call, createAccount, expectJson, expectProblem, type Account } from "./harness.js";

const seg = (c: string) => c.repeat(43);
const hex = (c: string) => c.repeat(64);
const vectorKey = () =>
  btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");

interface Setup {
  account: Account;
  id: string;
  key: string;
  /** Sends a commit; a string is sent as it is, so it can hold what JSON.stringify cannot write. */
  commit(body: unknown): Promise<Response>;
  detail(): Promise<WorkspaceDetail>;
  files(): Promise<Map<string, string>>;
  searchPaths(query: string): Promise<string[]>;
}

async function setup(): Promise<Setup> {
  const account = await createAccount({ plan: "pro" });
  const token = account.key.key;
  const created = await call("/v1/workspaces", { token, body: { name: seg("w") } });
  const { id } = (await created.json()) as { id: string };
  const key = vectorKey();
  const headers = { [VECTOR_KEY_HEADER]: key };
  return {
    account,
    id,
    key,
    commit: (body) => call(`/v1/workspaces/${id}/tree/commit`, { token, body, headers }),
    detail: async () => expectJson(await call(`/v1/workspaces/${id}`, { token }), 200, WorkspaceDetail),
    files: async () => {
      const diff = await expectJson(
        await call(`/v1/workspaces/${id}/tree/diff`, { token, body: { protocol: SYNC_PROTOCOL, dirs: [""] } }),
        200,
        DiffResponse,
      );
      return new Map(diff.nodes.filter((n) => n.kind === "f").map((n) => [n.path, n.hash]));
    },
    searchPaths: async (query) => {
      const answer = await expectJson(
        await call(`/v1/workspaces/${id}/search`, {
          token,
          body: { protocol: SYNC_PROTOCOL, query, topK: 20 },
          headers,
        }),
        200,
        SearchResponse,
      );
      return answer.results.map((r) => r.path);
    },
  };
}

const chunk = (text: string, id = hex("a"), startLine = 1, endLine = 1) => ({ id, text, startLine, endLine });
const file = (path: string, extra: Record<string, unknown> = {}) => ({ path, hash: hex("1"), size: 10, ...extra });
const commitOf = (upserts: unknown[], deletes: string[] = []) => ({ protocol: SYNC_PROTOCOL, upserts, deletes });

describe("the commit boundary", () => {
  it("refuses sizes past the file ceiling and past safe integers, so the total stays readable", async () => {
    const ws = await setup();
    for (const size of [MAX_FILE_BYTES + 1, Number.MAX_SAFE_INTEGER, -1, 1.5]) {
      const problem = await expectProblem(
        await ws.commit(commitOf([file(seg("a"), { size }), file(seg("b"), { size })])),
        400,
        "invalid_request",
      );
      expect(problem.errors?.map((e) => e.path)).toContain("upserts.0.size");
    }
    // Numbers JSON can write and JavaScript cannot hold exactly, sent as raw text.
    for (const raw of ["1e400", "9007199254740993", "18014398509482070"]) {
      const body = `{"protocol":${SYNC_PROTOCOL},"upserts":[{"path":"${seg("a")}","hash":"${hex("1")}","size":${raw}}]}`;
      await expectProblem(await ws.commit(body), 400, "invalid_request");
    }
    const atCeiling = await expectJson(
      await ws.commit(commitOf([file(seg("a"), { size: MAX_FILE_BYTES }), file(seg("b"), { size: MAX_FILE_BYTES })])),
      200,
      CommitResponse,
    );
    expect(atCeiling.bytes).toBe(2 * MAX_FILE_BYTES);
    expect((await ws.detail()).tree).toMatchObject({ files: 2, bytes: 2 * MAX_FILE_BYTES });
  });

  it("refuses a file and a path below it in one commit, in either order, naming the encrypted path", async () => {
    const ws = await setup();
    const parent = seg("f");
    const child = `${seg("f")}/${seg("c")}`;
    for (const upserts of [
      [file(parent, { chunks: [chunk("parent text")] }), file(child, { chunks: [chunk("child text", hex("b"))] })],
      [file(child, { chunks: [chunk("child text", hex("b"))] }), file(parent, { chunks: [chunk("parent text")] })],
    ]) {
      const problem = await expectProblem(await ws.commit(commitOf(upserts)), 400, "invalid_request");
      expect(problem.detail).toContain(child);
      expect(problem.detail).toContain(parent);
    }
    expect((await ws.files()).size).toBe(0);
    expect(await ws.searchPaths("parent text child text")).toEqual([]);
  });

  it("takes a file that became a directory, and the reverse, as a delete and an upsert in one commit", async () => {
    const ws = await setup();
    const parent = seg("f");
    const child = `${seg("f")}/${seg("c")}`;
    await expectJson(
      await ws.commit(commitOf([file(parent, { chunks: [chunk("parent text")] })])),
      200,
      CommitResponse,
    );
    await expectJson(
      await ws.commit(commitOf([file(child, { chunks: [chunk("child text", hex("b"))] })], [parent])),
      200,
      CommitResponse,
    );
    expect([...(await ws.files()).keys()]).toEqual([child]);
    expect(await ws.searchPaths("parent text child text")).toEqual([child]);
    await expectJson(
      await ws.commit(commitOf([file(parent, { chunks: [chunk("parent text")] })], [child])),
      200,
      CommitResponse,
    );
    expect([...(await ws.files()).keys()]).toEqual([parent]);
    expect(await ws.searchPaths("parent text child text")).toEqual([parent]);
  });

  it("refuses the same path upserted twice, or upserted and deleted, naming it", async () => {
    const ws = await setup();
    const twice = await expectProblem(
      await ws.commit(commitOf([file(seg("a")), file(seg("a"), { hash: hex("2") })])),
      400,
      "invalid_request",
    );
    expect(twice.errors).toEqual([{ path: "upserts.1.path", message: expect.stringContaining(seg("a")) }]);
    const both = await expectProblem(await ws.commit(commitOf([file(seg("a"))], [seg("a")])), 400, "invalid_request");
    expect(both.errors).toEqual([{ path: "deletes.0", message: expect.stringContaining(seg("a")) }]);
    // Deleting a path twice, or one the tree never held, says nothing contradictory.
    await expectJson(await ws.commit(commitOf([file(seg("b"))], [seg("a"), seg("a")])), 200, CommitResponse);
    expect([...(await ws.files()).keys()]).toEqual([seg("b")]);
  });

  it("refuses reversed line ranges, empty chunk text, the same chunk twice and one id with two texts", async () => {
    const ws = await setup();
    const cases: [unknown[], string][] = [
      [[chunk("text", hex("a"), 5, 4)], "upserts.0.chunks.0.endLine"],
      [[chunk("")], "upserts.0.chunks.0.text"],
      [[chunk("text"), chunk("text")], "upserts.0.chunks.1"],
      [[chunk("one text"), chunk("another text", hex("a"), 2, 2)], "upserts.0.chunks.1.id"],
    ];
    for (const [chunks, path] of cases) {
      const problem = await expectProblem(
        await ws.commit(commitOf([file(seg("a"), { chunks })])),
        400,
        "invalid_request",
      );
      expect(problem.errors?.map((e) => e.path)).toContain(path);
    }
    expect((await ws.detail()).tree.files).toBe(0);
  });

  it("takes the same chunk in two files and twice in one file at other lines, as the client sends copies", async () => {
    const ws = await setup();
    const same = chunk("shared licence text");
    await expectJson(
      await ws.commit(
        commitOf([
          file(seg("a"), { chunks: [same, { ...same, startLine: 2, endLine: 2 }] }),
          file(seg("b"), { chunks: [same] }),
        ]),
      ),
      200,
      CommitResponse,
    );
    expect((await ws.searchPaths("shared licence text")).sort()).toEqual([seg("a"), seg("a"), seg("b")]);
  });

  it("refuses with 409 a commit that would take the tree's total past 2^53 - 1 bytes, and stores none of it", async () => {
    const ws = await setup();
    // A tree this large cannot be built in a test: a directory that claims it stands in for one.
    await runInDurableObject(workspaceStub(env, ws.id), (_instance, state) => {
      state.storage.sql.exec(
        "INSERT INTO nodes (path, parent, kind, hash, files, bytes) VALUES (?, '', 'd', ?, ?, ?)",
        seg("d"),
        hex("d"),
        2 ** 27,
        MAX_TREE_BYTES - 10,
      );
    });
    const problem = await expectProblem(
      await ws.commit(commitOf([file(seg("x"), { size: 11, chunks: [chunk("overflowing text")] })])),
      409,
      "conflict",
    );
    expect(problem.detail).toContain(String(MAX_TREE_BYTES));
    expect((await ws.files()).has(seg("x"))).toBe(false);
    expect(await ws.searchPaths("overflowing text")).toEqual([]);
    expect((await workspaceStub(env, ws.id).indexStats())?.chunks).toBe(0);

    const fits = await expectJson(await ws.commit(commitOf([file(seg("x"), { size: 10 })])), 200, CommitResponse);
    expect(fits.bytes).toBe(MAX_TREE_BYTES);
    expect((await ws.detail()).tree.bytes).toBe(MAX_TREE_BYTES);
  });

  it("reads again a workspace whose total an earlier edge let past safe integers, and takes commits", async () => {
    const ws = await setup();
    const upserts = [file(`${seg("a")}/${seg("x")}`), file(`${seg("a")}/${seg("y")}`), file(seg("c"))];
    const before = await expectJson(
      await ws.commit(commitOf(upserts.map((u, i) => ({ ...u, chunks: [chunk(`text ${i}`, hex(String(i)))] })))),
      200,
      CommitResponse,
    );
    // What the earlier edge stored for leaves of size 2^53 - 1: each total a JavaScript sum.
    const stored = await runInDurableObject(workspaceStub(env, ws.id), (_instance, state) => {
      const sql = state.storage.sql;
      const huge = Number.MAX_SAFE_INTEGER;
      sql.exec("UPDATE nodes SET bytes = ? WHERE kind = 'f'", huge);
      sql.exec("UPDATE nodes SET bytes = ? WHERE path = ?", huge + huge, seg("a"));
      sql.exec("UPDATE nodes SET bytes = ? WHERE path = ''", huge + huge + huge);
      return Number(sql.exec("SELECT bytes FROM nodes WHERE path = ''").one().bytes);
    });
    expect(stored).toBeGreaterThan(Number.MAX_SAFE_INTEGER);

    const detail = await ws.detail();
    expect(detail.tree).toMatchObject({ root: before.root, files: 3, bytes: 3 * MAX_FILE_BYTES });
    expect([...(await ws.files()).keys()].sort()).toEqual(upserts.map((u) => u.path).sort());
    expect((await ws.searchPaths("text 0 text 1 text 2")).sort()).toEqual(upserts.map((u) => u.path).sort());
    const after = await expectJson(
      await ws.commit(commitOf([file(seg("c"), { size: 5 })], [`${seg("a")}/${seg("x")}`])),
      200,
      CommitResponse,
    );
    expect(after).toMatchObject({ files: 2, bytes: MAX_FILE_BYTES + 5 });
    expect((await ws.detail()).tree).toMatchObject({ files: 2, bytes: MAX_FILE_BYTES + 5 });
  });
});
