import { describe, expect, it } from "vitest";
import { EMPTY_ROOT } from "../../protocol/merkle.js";
import { CommitResponse, DiffResponse, MAX_COMMIT_ENTRIES, SYNC_PROTOCOL, TreeStatus } from "../../protocol/sync.js";
import { WorkspaceDetail } from "../../protocol/schemas.js";
import { call, createAccount, expectJson, expectProblem, type Account } from "./harness.js";

const seg = (c: string) => c.repeat(43);
const hash = (c: string) => c.repeat(64);

async function workspaceFor(account: Account): Promise<string> {
  const response = await call("/v1/workspaces", { token: account.key.key, body: { name: seg("n") } });
  return ((await response.json()) as { id: string }).id;
}

describe("workspace tree routes", () => {
  it("reports an empty tree, commits leaves and answers diffs", async () => {
    const account = await createAccount();
    const id = await workspaceFor(account);
    const empty = await expectJson(
      await call(`/v1/workspaces/${id}/tree`, { token: account.key.key }),
      200,
      TreeStatus,
    );
    expect(empty).toMatchObject({ protocol: SYNC_PROTOCOL, root: EMPTY_ROOT, files: 0, bytes: 0, lastSyncAt: null });

    const commit = await call(`/v1/workspaces/${id}/tree/commit`, {
      token: account.key.key,
      body: {
        protocol: SYNC_PROTOCOL,
        upserts: [
          { path: `${seg("a")}/${seg("b")}`, hash: hash("1"), size: 100 },
          { path: seg("c"), hash: hash("2"), size: 20 },
        ],
      },
    });
    expect(commit.headers.get("Server-Timing")).toMatch(/^workspace;dur=/);
    const committed = await expectJson(commit, 200, CommitResponse);
    expect(committed).toMatchObject({ files: 2, bytes: 120, applied: 2 });
    expect(committed.root).not.toBe(EMPTY_ROOT);

    const detail = await expectJson(
      await call(`/v1/workspaces/${id}`, { token: account.key.key }),
      200,
      WorkspaceDetail,
    );
    expect(detail.tree.root).toBe(committed.root);
    expect(detail.tree.lastSyncAt).not.toBeNull();

    const diff = await expectJson(
      await call(`/v1/workspaces/${id}/tree/diff`, {
        token: account.key.key,
        body: { protocol: SYNC_PROTOCOL, dirs: [""] },
      }),
      200,
      DiffResponse,
    );
    expect(diff.nodes.map((n) => [n.path, n.kind])).toEqual([
      [seg("a"), "d"],
      [seg("c"), "f"],
      [`${seg("a")}/${seg("b")}`, "f"],
    ]);

    const deleted = await expectJson(
      await call(`/v1/workspaces/${id}/tree/commit`, {
        token: account.key.key,
        body: { protocol: SYNC_PROTOCOL, deletes: [seg("a"), seg("c")] },
      }),
      200,
      CommitResponse,
    );
    expect(deleted).toMatchObject({ root: EMPTY_ROOT, files: 0, bytes: 0 });
  });

  it("refuses plaintext paths, bad hashes, a wrong protocol version and oversized commits", async () => {
    const account = await createAccount();
    const id = await workspaceFor(account);
    const commit = (body: unknown) => call(`/v1/workspaces/${id}/tree/commit`, { token: account.key.key, body });
    const plaintext = await expectProblem(
      await commit({ protocol: SYNC_PROTOCOL, upserts: [{ path: "src/index.ts", hash: hash("1"), size: 1 }] }),
      400,
      "invalid_request",
    );
    expect(plaintext.errors?.[0]?.path).toBe("upserts.0.path");
    await expectProblem(
      await commit({ protocol: SYNC_PROTOCOL, upserts: [{ path: seg("a"), hash: "abc", size: 1 }] }),
      400,
      "invalid_request",
    );
    await expectProblem(
      await commit({ protocol: SYNC_PROTOCOL, upserts: [{ path: seg("a"), hash: hash("1"), size: -1 }] }),
      400,
      "invalid_request",
    );
    await expectProblem(await commit({ protocol: 99, upserts: [] }), 400, "invalid_request");
    await expectProblem(await commit({ upserts: [] }), 400, "invalid_request");
    await expectProblem(
      await commit({
        protocol: SYNC_PROTOCOL,
        deletes: Array.from({ length: MAX_COMMIT_ENTRIES + 1 }, () => seg("z")),
      }),
      400,
      "invalid_request",
    );
    await expectProblem(
      await call(`/v1/workspaces/${id}/tree/diff`, {
        token: account.key.key,
        body: { protocol: SYNC_PROTOCOL, dirs: ["../etc"] },
      }),
      400,
      "invalid_request",
    );
    const status = await expectJson(
      await call(`/v1/workspaces/${id}/tree`, { token: account.key.key }),
      200,
      TreeStatus,
    );
    expect(status.files).toBe(0);
  });

  it("keeps a deleted workspace deleted: its tree routes answer 404", async () => {
    const account = await createAccount();
    const id = await workspaceFor(account);
    expect((await call(`/v1/workspaces/${id}`, { method: "DELETE", token: account.key.key })).status).toBe(204);
    await expectProblem(await call(`/v1/workspaces/${id}/tree`, { token: account.key.key }), 404, "not_found");
    await expectProblem(
      await call(`/v1/workspaces/${id}/tree/commit`, { token: account.key.key, body: { protocol: SYNC_PROTOCOL } }),
      404,
      "not_found",
    );
  });
});
