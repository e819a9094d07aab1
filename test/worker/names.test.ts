import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { CreatedApiKey, Org, User, Workspace } from "../../protocol/schemas.js";
import { SYNC_PROTOCOL } from "../../protocol/sync.js";
import { adminCall, call, createAccount, expectJson, expectProblem, ORIGIN } from "./harness.js";

/** Names no one should be able to store: each breaks a terminal, a log line or UTF-8. */
const UNPRINTABLE = {
  nul: "Acme\u0000Corp",
  escape: "Acme\u001b[31mCorp",
  newline: "Acme\nCorp",
  c1: "Acme\u0085Corp",
  "line separator": "Acme\u2028Corp",
  "lone high surrogate": "Acme\ud800Corp",
  "lone low surrogate": "Acme\udc00",
};

/** A body sent as bytes, so that it can hold what no JavaScript string encodes to. */
function sendBytes(path: string, bytes: Uint8Array, token: string, method = "POST"): Promise<Response> {
  return SELF.fetch(`${ORIGIN}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: bytes,
  });
}

/** `{"name":"Acme <byte> Corp"}` with a byte that is not UTF-8 where the space would be. */
const withByte = (byte: number) => {
  const [before, after] = ['{"name":"Acme', 'Corp"}'].map((s) => new TextEncoder().encode(s));
  return new Uint8Array([...before!, byte, ...after!]);
};

describe("names given through the API", () => {
  for (const [kind, bad] of Object.entries(UNPRINTABLE)) {
    it(`refuses a ${kind} in an org, user, key or workspace name, and stores nothing`, async () => {
      const org = await adminCall("/orgs", { body: { name: bad } });
      expect((await expectProblem(org, 400, "invalid_request")).errors?.map((e) => e.path)).toEqual(["name"]);

      const account = await createAccount({ plan: "pro" });
      await expectProblem(
        await adminCall(`/orgs/${account.org.id}`, { method: "PATCH", body: { name: bad } }),
        400,
        "invalid_request",
      );
      await expectProblem(
        await adminCall(`/orgs/${account.org.id}/users`, { body: { email: "named@example.com", name: bad } }),
        400,
        "invalid_request",
      );
      await expectProblem(
        await adminCall("/keys", { body: { userId: account.user.id, name: bad } }),
        400,
        "invalid_request",
      );
      const token = account.key.key;
      await expectProblem(await call("/v1/keys", { token, body: { name: bad } }), 400, "invalid_request");
      await expectProblem(await call("/v1/workspaces", { token, body: { name: bad } }), 400, "invalid_request");

      const orgs = (await (await adminCall("/orgs")).json()) as { data: Org[] };
      expect(orgs.data.some((o) => o.name === bad)).toBe(false);
      const keys = (await (await call("/v1/keys", { token })).json()) as { data: { name: string }[] };
      expect(keys.data.map((k) => k.name)).toEqual([account.key.name]);
      const workspaces = (await (await call("/v1/workspaces", { token })).json()) as { data: Workspace[] };
      expect(workspaces.data).toEqual([]);
    });
  }

  it("keeps names with accents, emoji and joined emoji, trimmed", async () => {
    const name = "  Ôrg 👩‍💻 Zürich  ";
    const org = await expectJson(await adminCall("/orgs", { body: { name } }), 201, Org);
    expect(org.name).toBe(name.trim());
    const account = await createAccount({ org });
    const key = await expectJson(
      await call("/v1/keys", { token: account.key.key, body: { name: "ключ 🔑" } }),
      201,
      CreatedApiKey,
    );
    expect(key.name).toBe("ключ 🔑");
    const user = await expectJson(
      await adminCall(`/orgs/${org.id}/users`, { body: { email: "accents@example.com", name: "Zoë" } }),
      201,
      User,
    );
    expect(user.name).toBe("Zoë");
  });
});

describe("JSON bodies that are not UTF-8", () => {
  for (const [kind, byte] of [
    ["a stray continuation byte", 0x80],
    ["a byte UTF-8 never uses", 0xff],
    ["a lead byte with nothing after it", 0xc3],
  ] as const) {
    it(`refuses ${kind} with 400 rather than storing U+FFFD`, async () => {
      const problem = await expectProblem(
        await sendBytes("/admin/orgs", withByte(byte), env.ADMIN_SECRET!),
        400,
        "invalid_request",
      );
      expect(problem.detail).toContain("UTF-8");
      const orgs = (await (await adminCall("/orgs")).json()) as { data: Org[] };
      expect(orgs.data.some((o) => o.name.includes("\ufffd"))).toBe(false);
    });
  }

  it("refuses them on every JSON route: keys, workspaces, commits and the gateway", async () => {
    const account = await createAccount({ plan: "pro" });
    const token = account.key.key;
    await expectProblem(await sendBytes("/v1/keys", withByte(0xff), token), 400, "invalid_request");
    await expectProblem(await sendBytes("/v1/workspaces", withByte(0xff), token), 400, "invalid_request");
    const ws = await expectJson(
      await call("/v1/workspaces", { token, body: { name: "w".repeat(43) } }),
      201,
      Workspace,
    );
    const commit = new TextEncoder().encode(`{"protocol":${SYNC_PROTOCOL},"upserts":[],"deletes":["`);
    await expectProblem(
      await sendBytes(
        `/v1/workspaces/${ws.id}/tree/commit`,
        new Uint8Array([...commit, 0xfe, 0x22, 0x5d, 0x7d]),
        token,
      ),
      400,
      "invalid_request",
    );
    const chat = new TextEncoder().encode('{"model":"tab-test","messages":[{"role":"user","content":"hi ');
    const gateway = await expectProblem(
      await sendBytes("/v1/chat/completions", new Uint8Array([...chat, 0xff, 0x22, 0x7d, 0x5d, 0x7d]), token),
      400,
      "invalid_request",
    );
    expect(gateway.detail).toContain("UTF-8");
  });

  it("still takes a body that starts with a byte order mark", async () => {
    const body = new Uint8Array([0xef, 0xbb, 0xbf, ...new TextEncoder().encode('{"name":"Bom Org"}')]);
    const org = await expectJson(await sendBytes("/admin/orgs", body, env.ADMIN_SECRET!), 201, Org);
    expect(org.name).toBe("Bom Org");
  });
});
