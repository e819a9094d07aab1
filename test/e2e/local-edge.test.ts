import OpenAI from "openai";
import { generateApiKey } from "../../protocol/api-key.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeyInfo, CreatedApiKey, Health, Me } from "../../protocol/schemas.js";
import { LOCAL_ANTHROPIC_MODEL } from "../../scripts/local-gateway.js";
import {
  savedLocalEdge,
  sextant,
  simulatedTabCompletion,
  startLocalEdge,
  type LocalEdge,
} from "../support/local-edge.js";

/** The newcomer's path: `npm start`, then the CLI from another directory with nothing configured. */
describe("local edge end to end", () => {
  let edge: LocalEdge;
  let cli: (args: string[]) => ReturnType<typeof sextant>;

  beforeAll(async () => {
    // The newcomer's `npm start`: it bundles the Worker and applies the migrations itself.
    edge = await startLocalEdge({ prebuilt: false });
    cli = (args) => sextant(args, { SEXTANT_CONFIG_DIR: edge.configDir });
  });
  afterAll(async () => {
    await edge?.stop();
  });

  it("serves /healthz", async () => {
    const response = await fetch(`${edge.baseURL}/healthz`);
    expect(Health.parse(await response.json()).status).toBe("ok");
  });

  it("says in one line which migrations it applied, not wrangler's table of them once per file", () => {
    const output = edge.output();
    expect(output.match(/^D1 migrations applied: (\S+\.sql(, |\.$))+$/gm)).toHaveLength(1);
    expect(output).not.toContain("┌");
    expect(output).not.toMatch(/\.sql\s+│/);
  });

  it("answers model requests from the simulated backends it starts when none is configured", async () => {
    const { text, fingerprints } = await simulatedTabCompletion(edge);
    expect(text).toBe("sim0 sim1 sim2 sim3 ");
    expect([...fingerprints]).toEqual(["sextant-simulator"]);
  });

  it("answers chat through the simulated Anthropic Messages API, translated by the edge", async () => {
    const openai = new OpenAI({ baseURL: `${edge.baseURL}/v1`, apiKey: savedLocalEdge(edge).apiKey, maxRetries: 0 });
    const models = await openai.models.list();
    expect(models.data.map((m) => m.id)).toContain(LOCAL_ANTHROPIC_MODEL);
    const completion = await openai.chat.completions.create({
      model: LOCAL_ANTHROPIC_MODEL,
      messages: [{ role: "user", content: "Hello" }],
      max_tokens: 3,
    });
    expect(completion.choices[0]!.message.content).toBe("sim0 sim1 sim2 ");
    expect(completion.choices[0]!.finish_reason).toBe("length");
  });

  it("lets `sextant whoami` find the local edge and its development key by itself", () => {
    const human = cli(["whoami"]);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain("dev@sextant.localhost");
    expect(human.stdout).toContain(edge.baseURL);
    const json = cli(["--json", "whoami"]);
    expect(Me.parse(JSON.parse(json.stdout)).org.plan).toBe("business");
  });

  it("creates, lists and revokes keys through the CLI; a revoked key is refused", () => {
    const created = CreatedApiKey.parse(JSON.parse(cli(["--json", "keys", "create", "e2e", "--expires", "1d"]).stdout));
    const asNewKey = sextant(["--json", "--base-url", edge.baseURL, "--api-key", created.key, "whoami"]);
    expect(asNewKey.code, asNewKey.stderr).toBe(0);

    const listed = ApiKeyInfo.array().parse(JSON.parse(cli(["--json", "keys", "list"]).stdout));
    expect(listed.map((k) => k.id)).toContain(created.id);
    expect(JSON.stringify(listed)).not.toContain(created.key);

    expect(cli(["keys", "revoke", created.id]).code).toBe(0);
    const refused = sextant(["--json", "--base-url", edge.baseURL, "--api-key", created.key, "whoami"]);
    expect(refused.code).toBe(3);
    expect(JSON.parse(refused.stderr).error).toMatchObject({ status: 401, code: "unauthenticated" });
  });

  it("runs the admin surface with the local admin secret", () => {
    const org = JSON.parse(cli(["--json", "admin", "orgs", "create", "Beta", "--plan", "pro"]).stdout);
    const user = JSON.parse(
      cli(["--json", "admin", "users", "create", "--org", org.id, "--email", "b@beta.dev", "--role", "owner"]).stdout,
    );
    const key = CreatedApiKey.parse(
      JSON.parse(cli(["--json", "admin", "keys", "create", "--user", user.id, "--name", "ci"]).stdout),
    );
    const whoami = sextant(["--json", "--base-url", edge.baseURL, "--api-key", key.key, "whoami"]);
    expect(Me.parse(JSON.parse(whoami.stdout)).org.id).toBe(org.id);

    // That org's key cannot touch the development org's keys.
    const devKeys = ApiKeyInfo.array().parse(JSON.parse(cli(["--json", "keys", "list"]).stdout));
    const foreign = sextant(["--base-url", edge.baseURL, "--api-key", key.key, "keys", "revoke", devKeys[0]!.id]);
    expect(foreign.code).toBe(4);
  });

  it("exits with meaningful codes and clear messages", () => {
    expect(cli(["keys", "revoke", "key_missing"]).code).toBe(4);
    const badKey = sextant(["--base-url", edge.baseURL, "--api-key", "sk-nope", "whoami"]);
    expect(badKey.code).toBe(2);
    expect(badKey.stderr).toContain("malformed");
    const unreachable = sextant(["--base-url", "http://127.0.0.1:9", "--api-key", generateApiKey(), "whoami"]);
    expect(unreachable.code).toBe(6);
    expect(unreachable.stderr).toContain("Could not reach");
    expect(cli(["no-such-command"]).code).toBe(2);
    const help = cli(["keys", "create", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--expires");
  });

  it("keeps accounts and the development key across a restart", async () => {
    const before = Me.parse(JSON.parse(cli(["--json", "whoami"]).stdout));
    await edge.stop();
    const port = Number(new URL(edge.baseURL).port);
    edge = await startLocalEdge({ port, configDir: edge.configDir, persistTo: edge.persistTo, prebuilt: false });
    expect(edge.output()).toMatch(/^D1 migrations: up to date\.$/m);
    const after = Me.parse(JSON.parse(cli(["--json", "whoami"]).stdout));
    expect(after.key.id).toBe(before.key.id);
    expect(after.org.id).toBe(before.org.id);
  });

  it("leaves the CLI with a running edge when a second one starts, which SEXTANT_BASE_URL reaches", async () => {
    const before = Me.parse(JSON.parse(cli(["--json", "whoami"]).stdout));
    const second = await startLocalEdge({ configDir: edge.configDir });
    try {
      expect(second.output()).toContain(`The CLI keeps using the local edge at ${edge.baseURL}`);
      expect(savedLocalEdge(edge).baseURL).toBe(edge.baseURL);
      expect(Me.parse(JSON.parse(cli(["--json", "whoami"]).stdout)).key.id).toBe(before.key.id);
      const there = sextant(["--json", "whoami"], {
        SEXTANT_CONFIG_DIR: edge.configDir,
        SEXTANT_BASE_URL: second.baseURL,
      });
      expect(there.code).toBe(0);
      expect(Me.parse(JSON.parse(there.stdout)).org.id).not.toBe(before.org.id);
    } finally {
      await second.stop();
    }
    // Once the default edge has stopped, the next edge to start becomes the CLI's.
    await edge.stop();
    edge = await startLocalEdge({ configDir: edge.configDir });
    expect(savedLocalEdge(edge).baseURL).toBe(edge.baseURL);
    expect(cli(["whoami"]).code).toBe(0);
  });
});
