import { describe, expect, it } from "vitest";
import { ApiKeyInfo, CreatedApiKey, listOf, Me } from "../../protocol/schemas.js";
import { call, createAccount, expectJson, expectProblem } from "./harness.js";

describe("self-service API keys", () => {
  it("creates a key for the caller that works at once", async () => {
    const account = await createAccount();
    const created = await expectJson(
      await call("/v1/keys", { token: account.key.key, body: { name: "laptop" } }),
      201,
      CreatedApiKey,
    );
    expect(created.userId).toBe(account.user.id);
    const me = await expectJson(await call("/v1/me", { token: created.key }), 200, Me);
    expect(me.key.id).toBe(created.id);
  });

  it("lists every key of the org for an owner and only their own for a member", async () => {
    const owner = await createAccount({ role: "owner" });
    const member = await createAccount({ role: "member", org: owner.org });
    const ownerList = await expectJson(await call("/v1/keys", { token: owner.key.key }), 200, listOf(ApiKeyInfo));
    expect(ownerList.data.map((k) => k.id).sort()).toEqual([owner.key.id, member.key.id].sort());
    const memberList = await expectJson(await call("/v1/keys", { token: member.key.key }), 200, listOf(ApiKeyInfo));
    expect(memberList.data.map((k) => k.id)).toEqual([member.key.id]);
  });

  it("revokes the caller's own key", async () => {
    const account = await createAccount({ role: "member" });
    const spare = await expectJson(
      await call("/v1/keys", { token: account.key.key, body: { name: "spare" } }),
      201,
      CreatedApiKey,
    );
    const revoked = await expectJson(
      await call(`/v1/keys/${spare.id}`, { method: "DELETE", token: account.key.key }),
      200,
      ApiKeyInfo,
    );
    expect(revoked.revokedAt).not.toBeNull();
    await expectProblem(await call("/v1/me", { token: spare.key }), 401, "unauthenticated");
  });

  it("returns 403 when a member revokes another member's key", async () => {
    const first = await createAccount({ role: "member" });
    const second = await createAccount({ role: "member", org: first.org });
    await expectProblem(
      await call(`/v1/keys/${second.key.id}`, { method: "DELETE", token: first.key.key }),
      403,
      "forbidden",
    );
    await expectJson(await call("/v1/me", { token: second.key.key }), 200, Me);
  });

  it("returns 404 for another org's key and leaves it working", async () => {
    const mine = await createAccount();
    const theirs = await createAccount();
    await expectProblem(
      await call(`/v1/keys/${theirs.key.id}`, { method: "DELETE", token: mine.key.key }),
      404,
      "not_found",
    );
    await expectJson(await call("/v1/me", { token: theirs.key.key }), 200, Me);
  });

  it("rejects invalid, malformed and unauthenticated creates", async () => {
    const account = await createAccount();
    await expectProblem(await call("/v1/keys", { token: account.key.key, body: { name: "" } }), 400, "invalid_request");
    await expectProblem(await call("/v1/keys", { token: account.key.key, body: "[" }), 400, "invalid_request");
    await expectProblem(
      await call("/v1/keys", { token: account.key.key, body: { name: "a", expiresAt: "tomorrow" } }),
      400,
      "invalid_request",
    );
    await expectProblem(await call("/v1/keys", { body: { name: "a" } }), 401, "unauthenticated");
  });
});
