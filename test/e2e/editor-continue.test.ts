/**
 * A real editor client against `npm start`'s edge: Continue's CLI (`cn -p`, headless) with the
 * config.yaml that docs/editors.md gives, checked by Continue's own schema, chats with the edge's
 * chat model and calls `sextant mcp`'s codebase_search. The chat model is the simulator's scripted
 * agent model (the stand-in for a GPU model server): its script makes the tool call, so whether the
 * tool's result reached the model is read from the requests the simulator received through the edge.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseConfigYaml, validateConfigYaml } from "@continuedev/config-yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import type { RequestRecord } from "../../gpu-backends/simulator/simulator.js";
import { setAgentScripts } from "../support/agent-stack.js";
import { makeTree } from "../support/fixture.js";
import { ORBIT_FILES } from "../support/orbit-fixture.js";
import { ROOT, savedLocalEdge, sextant, startLocalEdge, type LocalEdge } from "../support/local-edge.js";

const DOC = join(ROOT, "docs/editors.md");
const CN = join(ROOT, "node_modules/@continuedev/cli/dist/cn.js");
const GUARD = join(ROOT, "test/support/loopback-only-child.mjs");
/** Where the doc's config points: `npm start`'s default edge. */
const DOC_EDGE = "http://127.0.0.1:8787";

const PROMPT = "Where in this project is Kepler's equation solved? Look it up with codebase_search.";
const ANSWER = "Kepler's equation is solved by solveKeplerEquation in src/orbit/kepler.ts.";
const SCRIPT: AgentScript = {
  name: "continue-editor",
  match: "Where in this project is Kepler's equation solved?",
  turns: [
    {
      toolCalls: [
        { name: "codebase_search", arguments: { query: "solve Kepler's equation for the eccentric anomaly", topK: 3 } },
      ],
    },
    { content: ANSWER },
  ],
};
/** The id the simulator gives the script's first tool call (agent-script.ts). */
const CALL_ID = "call_continue-editor_0_0";

/** The docs' YAML blocks that are a whole Continue config (models and MCP servers). */
function docConfigs(markdown: string): string[] {
  return [...markdown.matchAll(/^```yaml\n([\s\S]*?)^```$/gm)]
    .map((m) => m[1]!)
    .filter((yaml) => /^models:/m.test(yaml) && /^mcpServers:/m.test(yaml));
}

/** Continue's verdict on a config.yaml: the schema's parse (which throws), then its further checks. */
function continueErrors(yaml: string): string[] {
  try {
    return validateConfigYaml(parseConfigYaml(yaml)).map((e) => e.message);
  } catch (err) {
    return [(err as Error).message];
  }
}

interface ChatBody {
  model: string;
  messages: { role: string; content?: unknown; tool_call_id?: string; tool_calls?: unknown[] }[];
  tools?: { type: string; function: { name: string; description?: string; parameters?: unknown } }[];
}

describe("Continue's CLI against npm start's edge", () => {
  let edge: LocalEdge;
  let env: Record<string, string>;
  let repo: string;
  let docConfig: string;

  beforeAll(async () => {
    const configs = docConfigs(readFileSync(DOC, "utf8"));
    expect(configs, "docs/editors.md has one whole Continue config.yaml").toHaveLength(1);
    docConfig = configs[0]!;
    edge = await startLocalEdge();
    env = { SEXTANT_CONFIG_DIR: edge.configDir, SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-cache-")) };
    repo = realpathSync(makeTree(ORBIT_FILES));
    const indexed = sextant(["index", repo], env);
    expect(indexed.code, indexed.stderr).toBe(0);
    await setAgentScripts(edge, [SCRIPT]);
  });
  afterAll(async () => {
    await edge?.stop();
  });

  it("validates the doc's config.yaml with Continue's schema, which rejects a broken one", () => {
    expect(continueErrors(docConfig)).toEqual([]);
    const config = parseConfigYaml(docConfig);
    expect(config.models).toEqual([
      expect.objectContaining({
        provider: "openai",
        apiBase: `${DOC_EDGE}/v1`,
        apiKey: "${{ secrets.SEXTANT_API_KEY }}",
        roles: expect.arrayContaining(["chat"]),
      }),
    ]);
    expect(config.mcpServers).toEqual([
      expect.objectContaining({ name: "sextant", command: "sextant", args: ["mcp"] }),
    ]);

    // Sextant's own name for the completion role, which Continue calls autocomplete.
    const tabRole = docConfig.replace("roles: [chat, edit, apply]", "roles: [chat, tab]");
    expect(tabRole).not.toBe(docConfig);
    expect(continueErrors(tabRole)).toEqual([expect.stringContaining("models.0")]);
    // An MCP server with neither a command nor a URL.
    const noCommand = docConfig.replace(/^    command: sextant\n/m, "");
    expect(noCommand).not.toBe(docConfig);
    expect(continueErrors(noCommand)).toEqual([expect.stringContaining("mcpServers.0")]);
  });

  it("the doc's other settings blocks are valid JSON", () => {
    const blocks = [...readFileSync(DOC, "utf8").matchAll(/^```json\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    for (const block of blocks) expect(() => JSON.parse(block), block).not.toThrow();
  });

  it("chats with the edge's model, which calls codebase_search through sextant mcp and gets its result", async () => {
    // The doc's config as written, but for this edge's address and the checkout's own `sextant`.
    const config = parseConfigYaml(docConfig);
    for (const model of config.models ?? []) {
      if (!("apiBase" in model) || !model.apiBase) throw new Error("the doc's model has no apiBase");
      model.apiBase = model.apiBase.replace(DOC_EDGE, edge.baseURL);
    }
    for (const server of config.mcpServers ?? []) {
      if (!("command" in server) || server.command !== "sextant")
        throw new Error("the doc's MCP server is not sextant");
      server.command = process.execPath;
      server.args = [join(ROOT, "client/bin/sextant.js"), ...(server.args ?? [])];
    }
    const home = mkdtempSync(join(tmpdir(), "continue-home-"));
    const configFile = join(home, "config.yaml");
    // JSON is YAML; the secret's template stays as the doc has it.
    writeFileSync(configFile, JSON.stringify(config, null, 2));
    expect(continueErrors(readFileSync(configFile, "utf8"))).toEqual([]);

    const refusedLog = join(home, "refused.log");
    const run = await runContinue(["-p", PROMPT, "--config", configFile], {
      cwd: repo,
      env: {
        // A home of its own: no login, sessions or settings from the machine's user.
        HOME: home,
        XDG_CONFIG_HOME: join(home, ".config"),
        XDG_CACHE_HOME: join(home, ".cache"),
        XDG_DATA_HOME: join(home, ".local/share"),
        CONTINUE_GLOBAL_DIR: join(home, ".continue"),
        CONTINUE_METRICS_ENABLED: "0",
        CONTINUE_CLI_ENABLE_TELEMETRY: "0",
        OTEL_EXPORTER_OTLP_ENDPOINT: undefined,
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: undefined,
        OTEL_METRICS_EXPORTER: undefined,
        HTTP_PROXY: undefined,
        HTTPS_PROXY: undefined,
        http_proxy: undefined,
        https_proxy: undefined,
        // Continue passes its environment on to `sextant mcp`, which finds the edge and key npm start saved.
        SEXTANT_API_KEY: savedLocalEdge(edge).apiKey,
        SEXTANT_BASE_URL: undefined,
        SEXTANT_ADMIN_SECRET: undefined,
        ...env,
        // Continue and everything it starts reach only loopback, and any attempt past it is logged.
        NODE_OPTIONS: `--import=${pathToFileURL(GUARD).href}`,
        SEXTANT_REFUSED_LOG: refusedLog,
      },
      timeoutMs: 90_000,
    });
    expect(run.code, `cn exited ${run.code}:\n${run.stdout}\n${run.stderr}`).toBe(0);
    expect(run.stdout).toContain(ANSWER);

    const chats = (await simulatorRecords(edge))
      .filter((r) => r.path === "/v1/chat/completions")
      .map((r) => r.body as ChatBody)
      .filter((body) => firstUserText(body).includes(SCRIPT.match));
    expect(chats, "the model was asked twice: the question, then with the tool's result").toHaveLength(2);
    const [question, followUp] = chats as [ChatBody, ChatBody];

    // Continue offered the model the tool `sextant mcp` lists, under its own name.
    const search = question.tools?.find((t) => t.function.name === "codebase_search");
    expect(search, `tools offered: ${question.tools?.map((t) => t.function.name).join(", ")}`).toBeDefined();
    expect(search!.function.description).toContain("natural language");
    expect(search!.function.parameters).toMatchObject({ required: ["query"] });

    // Continue ran the call and sent its result back: sextant mcp's answer for the indexed workspace.
    const call = followUp.messages.find((m) => m.role === "assistant" && m.tool_calls?.length);
    expect(call?.tool_calls).toEqual([expect.objectContaining({ id: CALL_ID, type: "function" })]);
    const result = followUp.messages.find((m) => m.role === "tool" && m.tool_call_id === CALL_ID);
    expect(result, JSON.stringify(followUp.messages.slice(-2))).toBeDefined();
    const text = typeof result!.content === "string" ? result!.content : JSON.stringify(result!.content);
    expect(text).toContain(`in ${repo}`);
    expect(text).toContain("src/orbit/kepler.ts:1-10");
    expect(text).toContain("export function solveKeplerEquation");

    // Nothing but the edge was reached; the one attempt past loopback is the CLI's version check at start.
    const refused = existsSync(refusedLog) ? readFileSync(refusedLog, "utf8").trim().split("\n") : [];
    expect(refused.map((line) => line.slice(line.lastIndexOf(" -> ") + 4))).toEqual(
      refused.length ? refused.map(() => "api.continue.dev:443") : [],
    );
    expect(refused.every((line) => line.includes("cn.js"))).toBe(true);
  });
});

function firstUserText(body: ChatBody): string {
  const first = body.messages.find((m) => m.role === "user");
  if (!first) return "";
  if (typeof first.content === "string") return first.content;
  return Array.isArray(first.content)
    ? first.content
        .map((p) => (typeof (p as { text?: unknown }).text === "string" ? (p as { text: string }).text : ""))
        .join("")
    : "";
}

/** Every request the simulated backends behind the edge received, in the order they arrived. */
async function simulatorRecords(edge: LocalEdge): Promise<RequestRecord[]> {
  const { url, headers } = edge.simulatorControl();
  const { backends } = (await (await fetch(`${url}/backends`, { headers })).json()) as { backends: { id: string }[] };
  const records: RequestRecord[] = [];
  for (const { id } of backends) {
    const response = await fetch(`${url}/backends/${id}/records`, { headers });
    records.push(...((await response.json()) as { records: RequestRecord[] }).records);
  }
  return records.sort((a, b) => a.receivedAt - b.receivedAt);
}

/**
 * Runs Continue's CLI in a process group of its own, and ends the group (the MCP server it started
 * with it) when it exits or runs out of time.
 */
function runContinue(
  args: string[],
  options: { cwd: string; env: Record<string, string | undefined>; timeoutMs: number },
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  mkdirSync(options.env.CONTINUE_GLOBAL_DIR!, { recursive: true });
  const env = { ...process.env, ...options.env };
  for (const [name, value] of Object.entries(env)) if (value === undefined) delete env[name];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CN, ...args], {
      cwd: options.cwd,
      env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const endGroup = () => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
      }
    };
    const timer = setTimeout(() => {
      endGroup();
      reject(new Error(`cn did not finish in ${options.timeoutMs} ms:\n${stdout}\n${stderr}`));
    }, options.timeoutMs);
    child.once("error", reject);
    child.once("close", (code) => {
      clearTimeout(timer);
      endGroup();
      resolve({ code, stdout, stderr });
    });
  });
}
