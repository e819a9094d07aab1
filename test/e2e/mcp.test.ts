import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey } from "../../protocol/api-key.js";
import { makeTree, writeTree } from "../support/fixture.js";
import { KEPLER, ORBIT_FILES } from "../support/orbit-fixture.js";
import { freePort, savedLocalEdge, sextant, startLocalEdge, type LocalEdge } from "../support/local-edge.js";
import type { LocalHit } from "../../client/workspace/search.js";

const ROOT = new URL("../../", import.meta.url).pathname;

type Hit = LocalHit;
interface SearchResult {
  isError?: boolean;
  content: { type: string; text: string }[];
  structuredContent?: { root: string; hits: Hit[] };
}

/** `sextant mcp` as an editor runs it: the real bin over stdio, talking to the real local edge. */
describe("sextant mcp end to end", () => {
  let edge: LocalEdge;
  let env: Record<string, string>;
  let repo: string;
  const servers: { client: Client; stderr: () => string }[] = [];

  /** `sextant mcp <dir>` as the editor starts it: the real bin, with this suite's edge and no ambient key. */
  const serverCommand = (dir: string, overrides: Record<string, string> = {}) => ({
    command: process.execPath,
    args: [join(ROOT, "client/bin/sextant.js"), "mcp", dir],
    cwd: tmpdir(),
    env: {
      ...(Object.fromEntries(Object.entries(process.env).filter(([, v]) => v !== undefined)) as Record<string, string>),
      SEXTANT_API_KEY: "",
      SEXTANT_BASE_URL: "",
      SEXTANT_ADMIN_SECRET: "",
      ...env,
      ...overrides,
    },
  });

  async function serve(dir: string, overrides: Record<string, string> = {}) {
    const transport = new StdioClientTransport({ ...serverCommand(dir, overrides), stderr: "pipe" });
    let stderr = "";
    transport.stderr?.on("data", (d) => (stderr += d));
    const client = new Client({ name: "sextant-e2e", version: "0.0.0" });
    await client.connect(transport);
    const server = { client, stderr: () => stderr };
    servers.push(server);
    return server;
  }

  const search = (client: Client, args: Record<string, unknown>) =>
    client.callTool({ name: "codebase_search", arguments: args }) as Promise<SearchResult>;

  beforeAll(async () => {
    edge = await startLocalEdge();
    env = { SEXTANT_CONFIG_DIR: edge.configDir, SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-cache-")) };
    repo = realpathSync(makeTree(ORBIT_FILES));
    const indexed = sextant(["index", repo], env);
    expect(indexed.code, indexed.stderr).toBe(0);
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.client.close()));
    await edge?.stop();
  });

  it("lists codebase_search with its input and output schemas", async () => {
    const { client, stderr } = await serve(repo);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(["codebase_search"]);
    const [tool] = tools;
    expect(tool!.description).toContain("natural language");
    expect(tool!.annotations).toMatchObject({ readOnlyHint: true });
    expect(tool!.inputSchema).toMatchObject({
      type: "object",
      required: ["query"],
      properties: {
        query: { type: "string", minLength: 1, maxLength: 2000 },
        topK: { type: "integer", minimum: 1, maximum: 50, default: 10 },
        path: { type: "string" },
      },
    });
    expect(tool!.outputSchema).toMatchObject({
      type: "object",
      properties: { root: { type: "string" }, hits: { type: "array" } },
    });
    expect(stderr()).toContain(`sextant mcp: serving ${repo}`);
  });

  it("finds a function by what it does, with its real path, lines and snippet", async () => {
    const { client } = await serve(repo);
    const result = await search(client, { query: "solve kepler's equation for the eccentric anomaly", topK: 3 });
    expect(result.isError).toBeFalsy();
    const { root, hits } = result.structuredContent!;
    expect(root).toBe(repo);
    expect(hits.length).toBeGreaterThan(0);
    expect(hits.length).toBeLessThanOrEqual(3);
    expect(hits[0]).toMatchObject({ path: "src/orbit/kepler.ts", startLine: 1, endLine: 10, stale: false });
    expect(hits[0]!.snippet).toBe(KEPLER.slice(0, -1));
    const text = result.content[0]!.text;
    expect(text).toContain(`in ${repo}`);
    expect(text).toContain("src/orbit/kepler.ts:1-10  score ");
    expect(text).toContain("```\n/** Solves Kepler's equation");
    expect(text).not.toContain("changed since indexed");

    const byName = await search(client, { query: "computeInvoiceTotal" });
    expect(byName.structuredContent!.hits[0]).toMatchObject({ path: "src/billing/invoice.ts", startLine: 1 });
  });

  it("searches only below a directory given by path, relative or absolute", async () => {
    const { client } = await serve(repo);
    const query = "solve kepler's equation for the eccentric anomaly";
    const tools = await search(client, { query, path: "tools" });
    expect(tools.isError).toBeFalsy();
    expect(tools.structuredContent!.hits.map((h) => h.path)).toEqual(["tools/kepler_table.py"]);
    expect(tools.content[0]!.text).toContain("below tools/");

    const billing = await search(client, { query, path: join(repo, "src/billing") + "/" });
    const paths = billing.structuredContent!.hits.map((h) => h.path).sort();
    expect(paths).toEqual(["src/billing/invoice.ts", "src/billing/refunds.ts"]);

    const outside = await search(client, { query, path: "../elsewhere" });
    expect(outside.isError).toBe(true);
    expect(outside.content[0]!.text).toContain("outside the workspace root");
  });

  it("rejects invalid input through the schema", async () => {
    const { client } = await serve(repo);
    for (const args of [{ query: "" }, { query: "   " }, { query: "x", topK: 51 }, { query: "x", topK: 1.5 }, {}]) {
      const result = await search(client, args);
      expect(result.isError, JSON.stringify(args)).toBe(true);
      expect(result.content[0]!.text).toContain("Input validation error");
    }
    // The server is still there after refusing.
    expect((await search(client, { query: "refund an invoice" })).isError).toBeFalsy();
  });

  it("explains a directory that is not indexed, then serves it once it is", async () => {
    const fresh = realpathSync(
      makeTree({ "lib/haversine.ts": "export function haversineDistance(a: number, b: number) {}\n" }),
    );
    const { client, stderr } = await serve(fresh);
    expect(stderr()).toContain("is not indexed");
    const missing = await search(client, { query: "great-circle distance" });
    expect(missing.isError).toBe(true);
    expect(missing.content[0]!.text).toBe(
      `${fresh} is not indexed on ${edge.baseURL} yet: run \`sextant index ${fresh}\`, then search again.`,
    );

    expect(sextant(["index", fresh], env).code).toBe(0);
    const found = await search(client, { query: "haversineDistance" });
    expect(found.isError).toBeFalsy();
    expect(found.structuredContent!.hits[0]).toMatchObject({ path: "lib/haversine.ts", startLine: 1, endLine: 1 });
  });

  it("fails to start for a directory that does not exist", () => {
    const result = sextant(["mcp", join(repo, "no-such-dir")], env);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("no-such-dir is not a directory");
    expect(result.stdout).toBe("");
  });

  it("reports an unreachable edge and a refused key as tool errors", async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const local = savedLocalEdge(edge);
    const registry = JSON.parse(readFileSync(join(edge.configDir, "workspaces.json"), "utf8"));
    const elsewhere = mkdtempSync(join(tmpdir(), "sextant-config-"));
    writeFileSync(
      join(elsewhere, "workspaces.json"),
      JSON.stringify({ workspaces: registry.workspaces.map((w: object) => ({ ...w, baseURL: dead })) }),
    );
    const unreachable = await serve(repo, {
      SEXTANT_CONFIG_DIR: elsewhere,
      SEXTANT_BASE_URL: dead,
      SEXTANT_API_KEY: local.apiKey,
    });
    const down = await search(unreachable.client, { query: "kepler" });
    expect(down.isError).toBe(true);
    expect(down.content[0]!.text).toMatch(
      new RegExp(`^Could not reach the Sextant edge at ${dead}: .*; start the edge`),
    );
    expect(down.content[0]!.text).not.toContain("\n");

    const refused = await serve(repo, { SEXTANT_API_KEY: generateApiKey() });
    const denied = await search(refused.client, { query: "kepler" });
    expect(denied.isError).toBe(true);
    expect(denied.content[0]!.text).toMatch(
      new RegExp(`^The edge at ${edge.baseURL} refused the search: .*\\[unauthenticated, request `),
    );
  }, 60_000);

  it("marks a hit whose file changed since it was indexed", async () => {
    const { client } = await serve(repo);
    writeTree(repo, { "src/orbit/kepler.ts": "// moved to a library\n" + KEPLER });
    const result = await search(client, { query: "solve kepler's equation for the eccentric anomaly", topK: 1 });
    expect(result.structuredContent!.hits[0]).toMatchObject({ path: "src/orbit/kepler.ts", stale: true });
    expect(result.content[0]!.text).toContain("src/orbit/kepler.ts:1-10  score ");
    expect(result.content[0]!.text).toContain("(changed since indexed)");
  });

  it("exits by itself when the editor closes its stdin", async () => {
    // Spawned here rather than through the SDK's transport, whose close() falls back to SIGTERM after 2 s:
    // no signal is ever sent, so an exit at all is the server's own.
    const { command, args, cwd, env: childEnv } = serverCommand(repo);
    const child = spawn(command, args, { cwd, env: childEnv, stdio: ["pipe", "pipe", "pipe"] });
    const exited = new Promise<[number | null, NodeJS.Signals | null]>((done) =>
      child.once("exit", (code, signal) => done([code, signal])),
    );
    const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
    const initialize = {
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: {
        protocolVersion: "2025-06-18",
        capabilities: {},
        clientInfo: { name: "sextant-e2e", version: "0.0.0" },
      },
    };
    child.stdin!.write(JSON.stringify(initialize) + "\n");
    const answer = JSON.parse((await lines.next()).value as string) as { id: number; result?: unknown };
    expect(answer).toMatchObject({ id: 1, result: { serverInfo: { name: expect.any(String) } } });
    child.stdin!.end();
    expect(await exited).toEqual([0, null]);
  });
});
