import { readFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { LocalEdge as SavedLocalEdge } from "../../client/cli/credentials.js";
import { Sextant } from "../../client/sdk/client.js";
import { startSimulator } from "../../gpu-backends/simulator/simulator.js";
import { generateApiKey } from "../../protocol/api-key.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeyInfo, CreatedApiKey, Health, Me } from "../../protocol/schemas.js";
import { LOCAL_ANTHROPIC_MODEL, REAL_MODEL_RECIPES } from "../../scripts/local-gateway.js";
import { taskEnded } from "../support/agent-stack.js";
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

  it("says, while only simulators serve, the line that points it at a real model", () => {
    const output = edge.output();
    expect(output).toContain("To use a real model, start with one of:");
    for (const recipe of REAL_MODEL_RECIPES)
      expect(output).toContain(`  ${recipe.vars} npm start   # ${recipe.server}`);
  });

  it("leaves the CLI with a running edge when a second one starts (a real model server by the one-line recipe), which SEXTANT_BASE_URL reaches", async () => {
    const before = Me.parse(JSON.parse(cli(["--json", "whoami"]).stdout));
    // The second edge is pointed at a real model the one-line way the first one printed, at a
    // stand-in for Ollama's OpenAI-compatible API: the simulator, as another server, serving one model
    // under an Ollama tag, with a one-turn script for the agent task below.
    const model = "qwen2.5-coder:7b";
    const standIn = await startSimulator({
      backends: [
        {
          id: "ollama-stand-in",
          kind: "openai",
          models: [model],
          agentScripts: [
            { name: "hello", match: "(stand-in hello)", turns: [{ content: "Hello from the stand-in." }] },
          ],
        },
      ],
    });
    const ollama = standIn.backend("ollama-stand-in");
    const second = await startLocalEdge({
      configDir: edge.configDir,
      env: { INFERENCE_UPSTREAM: ollama.url, AGENT_MODEL: model },
    }).catch(async (err: unknown) => {
      await standIn.stop();
      throw err;
    });
    try {
      expect(second.output()).toContain(
        `Model requests go to ${ollama.url}; agent tasks ask it for ${model} (AGENT_MODEL).`,
      );
      expect(second.output()).not.toContain("To use a real model");
      expect(second.output()).not.toContain("simulated GPU backends");
      const key = SavedLocalEdge.parse(
        JSON.parse(
          readFileSync(
            join(edge.configDir, "local-edges", `${new URL(second.baseURL).host.replace(":", "_")}.json`),
            "utf8",
          ),
        ),
      ).apiKey;
      const openai = new OpenAI({ baseURL: `${second.baseURL}/v1`, apiKey: key, maxRetries: 0 });
      const chat = await openai.chat.completions.create({
        model,
        messages: [{ role: "user", content: "Hi" }],
        max_tokens: 2,
      });
      expect([chat.model, chat.system_fingerprint]).toEqual([model, "sextant-simulator"]);
      const sdk = new Sextant({ apiKey: key, baseURL: second.baseURL, maxRetries: 0 });
      const { id } = await sdk.agents.create({ prompt: "Say hello (stand-in hello)." });
      await sdk.agents.uploadFiles(id, [{ path: "README.md", content: "eA==" }]);
      await sdk.agents.start(id);
      const task = await taskEnded(sdk, id);
      expect([task.status, task.endReason, task.model]).toEqual(["finished", "finished", model]);
      const asked = ollama
        .records()
        .filter((r) => r.path === "/v1/chat/completions")
        .map((r) => r.body as { model: string; tools?: unknown[] });
      expect(asked.map((b) => [b.model, (b.tools?.length ?? 0) > 0])).toEqual([
        [model, false],
        [model, true],
      ]);

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
      await standIn.stop();
    }
    // Once the default edge has stopped, the next edge to start becomes the CLI's.
    await edge.stop();
    edge = await startLocalEdge({ configDir: edge.configDir });
    expect(savedLocalEdge(edge).baseURL).toBe(edge.baseURL);
    expect(cli(["whoami"]).code).toBe(0);
    // Two more edges start here, each given up to 90 s to become ready on a busy machine, and an agent task runs.
  }, 300_000);
});
