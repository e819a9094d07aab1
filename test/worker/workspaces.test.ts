import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { listOf, Workspace } from "../../protocol/schemas.js";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import { call, createAccount, expectJson, expectProblem } from "./harness.js";

describe("workspaces", () => {
  it("creates a workspace backed by its own Durable Object", async () => {
    const account = await createAccount();
    const ws = await expectJson(
      await call("/v1/workspaces", { token: account.key.key, body: { name: "monorepo" } }),
      201,
      Workspace,
    );
    expect(ws.orgId).toBe(account.org.id);
    const meta = await workspaceStub(env, ws.id).describe();
    expect(meta).toEqual({ workspaceId: ws.id, orgId: account.org.id, createdAt: ws.createdAt });
    const listed = await expectJson(await call("/v1/workspaces", { token: account.key.key }), 200, listOf(Workspace));
    expect(listed.data.map((w) => w.id)).toEqual([ws.id]);
    expect(await expectJson(await call(`/v1/workspaces/${ws.id}`, { token: account.key.key }), 200, Workspace)).toEqual(
      ws,
    );
  });

  it("returns 404 for another org's workspace on read and delete, and leaves it intact", async () => {
    const owner = await createAccount();
    const intruder = await createAccount();
    const ws = await expectJson(
      await call("/v1/workspaces", { token: owner.key.key, body: { name: "private" } }),
      201,
      Workspace,
    );
    await expectProblem(await call(`/v1/workspaces/${ws.id}`, { token: intruder.key.key }), 404, "not_found");
    await expectProblem(
      await call(`/v1/workspaces/${ws.id}`, { method: "DELETE", token: intruder.key.key }),
      404,
      "not_found",
    );
    const theirs = await expectJson(await call("/v1/workspaces", { token: intruder.key.key }), 200, listOf(Workspace));
    expect(theirs.data).toEqual([]);
    await expectJson(await call(`/v1/workspaces/${ws.id}`, { token: owner.key.key }), 200, Workspace);
  });

  it("deletes a workspace and wipes every byte of its Durable Object", async () => {
    const account = await createAccount();
    const ws = await expectJson(
      await call("/v1/workspaces", { token: account.key.key, body: { name: "gone" } }),
      201,
      Workspace,
    );
    const response = await call(`/v1/workspaces/${ws.id}`, { method: "DELETE", token: account.key.key });
    expect(response.status).toBe(204);
    await expectProblem(await call(`/v1/workspaces/${ws.id}`, { token: account.key.key }), 404, "not_found");
    const stub = workspaceStub(env, ws.id);
    const tables = await runInDurableObject(stub, (_instance, state) =>
      state.storage.sql.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf_%'").toArray(),
    );
    const leftovers = await runInDurableObject(stub, (_instance, state) =>
      tables.map((t) => state.storage.sql.exec(`SELECT count(*) AS n FROM "${String(t.name)}"`).one().n),
    );
    expect(leftovers.every((n) => n === 0)).toBe(true);
  });

  it("validates the body and requires a key", async () => {
    const account = await createAccount();
    await expectProblem(await call("/v1/workspaces", { token: account.key.key, body: {} }), 400, "invalid_request");
    await expectProblem(
      await call("/v1/workspaces", { token: account.key.key, body: { name: "x", extra: 1 } }),
      400,
      "invalid_request",
    );
    await expectProblem(await call("/v1/workspaces", { body: { name: "x" } }), 401, "unauthenticated");
    await expectProblem(await call("/v1/workspaces/ws_nope", { token: account.key.key }), 404, "not_found");
  });

  it("refuses a malformed Durable Object RPC input", async () => {
    const stub = workspaceStub(env, "ws_bad");
    // An RPC promise is a thenable that is only settled when awaited, so await it directly.
    let error: unknown;
    try {
      await stub.init({ workspaceId: "", orgId: "o", createdAt: "yesterday" });
    } catch (err) {
      error = err;
    }
    expect(String(error)).toContain("Invalid workspace metadata");
    expect(await stub.describe()).toBeNull();
  });
});
