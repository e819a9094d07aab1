import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { CreatedApiKey, listOf, Org, User } from "../../protocol/schemas.js";
import { adminCall, call, createAccount, expectJson, expectProblem } from "./harness.js";

describe("admin surface", () => {
  it("returns 401 without the admin secret", async () => {
    await expectProblem(await call("/admin/orgs"), 401, "unauthenticated");
  });

  it("returns 403 for a wrong admin secret", async () => {
    await expectProblem(await call("/admin/orgs", { token: "x".repeat(40) }), 403, "forbidden");
  });

  it("returns 403 for a customer API key", async () => {
    const account = await createAccount();
    await expectProblem(await call("/admin/orgs", { token: account.key.key }), 403, "forbidden");
  });

  it("creates an org with the free plan by default, and changes its plan", async () => {
    const org = await expectJson(await adminCall("/orgs", { body: { name: "Acme" } }), 201, Org);
    expect(org.plan).toBe("free");
    const updated = await expectJson(
      await adminCall(`/orgs/${org.id}`, { method: "PATCH", body: { plan: "business" } }),
      200,
      Org,
    );
    expect(updated.plan).toBe("business");
    const orgs = await expectJson(await adminCall("/orgs"), 200, listOf(Org));
    expect(orgs.data.map((o) => o.id)).toContain(org.id);
  });

  it("changes the plan a cached key sees at once", async () => {
    const account = await createAccount({ plan: "free" });
    await call("/v1/me", { token: account.key.key });
    await adminCall(`/orgs/${account.org.id}`, { method: "PATCH", body: { plan: "pro" } });
    const me = (await (await call("/v1/me", { token: account.key.key })).json()) as { org: Org };
    expect(me.org.plan).toBe("pro");
  });

  it("rejects an unknown plan, an unknown field and an empty patch with every offending field", async () => {
    const problem = await expectProblem(
      await adminCall("/orgs", { body: { name: "", plan: "platinum" } }),
      400,
      "invalid_request",
    );
    expect(problem.errors?.map((e) => e.path).sort()).toEqual(["name", "plan"]);
    await expectProblem(await adminCall("/orgs", { body: { name: "a", colour: "red" } }), 400, "invalid_request");
    const org = await expectJson(await adminCall("/orgs", { body: { name: "B" } }), 201, Org);
    await expectProblem(await adminCall(`/orgs/${org.id}`, { method: "PATCH", body: {} }), 400, "invalid_request");
  });

  it("returns 400 for malformed JSON and 415 for a non-JSON body", async () => {
    await expectProblem(await adminCall("/orgs", { body: "{not json" }), 400, "invalid_request");
    await expectProblem(
      await adminCall("/orgs", { body: "name=x", headers: { "Content-Type": "application/x-www-form-urlencoded" } }),
      415,
      "unsupported_media_type",
    );
  });

  it("returns 413 for an oversized body, declared or streamed", async () => {
    const big = JSON.stringify({ name: "x".repeat(2 * 1024 * 1024) });
    await expectProblem(await adminCall("/orgs", { body: big }), 413, "payload_too_large");
    const chunks = new ReadableStream({
      start(controller) {
        const chunk = new TextEncoder().encode("x".repeat(64 * 1024));
        for (let i = 0; i < 32; i++) controller.enqueue(chunk);
        controller.close();
      },
    });
    const response = await SELF.fetch("https://edge.test/admin/orgs", {
      method: "POST",
      headers: { Authorization: `Bearer ${env.ADMIN_SECRET}`, "Content-Type": "application/json" },
      body: chunks,
      // @ts-expect-error: workerd needs duplex for a streamed request body
      duplex: "half",
    });
    await expectProblem(response, 413, "payload_too_large");
  });

  it("creates users, refuses a duplicate email with 409 and finds a user by email", async () => {
    const org = await expectJson(await adminCall("/orgs", { body: { name: "Users Inc" } }), 201, Org);
    const email = `Dup-${crypto.randomUUID()}@Example.com`;
    const user = await expectJson(await adminCall(`/orgs/${org.id}/users`, { body: { email } }), 201, User);
    expect(user.email).toBe(email.toLowerCase());
    expect(user.role).toBe("member");
    await expectProblem(await adminCall(`/orgs/${org.id}/users`, { body: { email } }), 409, "conflict");
    const found = await expectJson(await adminCall(`/users?email=${encodeURIComponent(email)}`), 200, listOf(User));
    expect(found.data.map((u) => u.id)).toEqual([user.id]);
    const users = await expectJson(await adminCall(`/orgs/${org.id}/users`), 200, listOf(User));
    expect(users.data).toHaveLength(1);
    await expectProblem(await adminCall("/users?email=not-an-email"), 400, "invalid_request");
  });

  it("returns 404 for users and keys of an org or user that does not exist", async () => {
    await expectProblem(await adminCall("/orgs/org_missing"), 404, "not_found");
    await expectProblem(await adminCall("/orgs/org_missing/users", { body: { email: "a@b.co" } }), 404, "not_found");
    await expectProblem(await adminCall("/keys", { body: { userId: "usr_missing", name: "k" } }), 404, "not_found");
    await expectProblem(await adminCall("/keys?orgId=org_missing"), 404, "not_found");
    await expectProblem(await adminCall("/keys/key_missing", { method: "DELETE" }), 404, "not_found");
    await expectProblem(await adminCall("/keys"), 400, "invalid_request");
  });

  it("rejects a key expiry in the past", async () => {
    const account = await createAccount();
    await expectProblem(
      await adminCall("/keys", { body: { userId: account.user.id, name: "old", expiresAt: "2001-01-01T00:00:00Z" } }),
      400,
      "invalid_request",
    );
  });

  it("issues keys with the sxt_ prefix and revokes them idempotently", async () => {
    const account = await createAccount();
    expect(account.key.key).toMatch(/^sxt_[0-9A-Za-z]{46}$/);
    const first = await expectJson(
      await adminCall(`/keys/${account.key.id}`, { method: "DELETE" }),
      200,
      CreatedApiKey.omit({ key: true }),
    );
    const second = await expectJson(
      await adminCall(`/keys/${account.key.id}`, { method: "DELETE" }),
      200,
      CreatedApiKey.omit({ key: true }),
    );
    expect(first.revokedAt).not.toBeNull();
    expect(second.revokedAt).toBe(first.revokedAt);
  });
});
