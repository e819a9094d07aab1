/**
 * The agent's codebase_search end to end: a directory indexed with `sextant index`, a task started on
 * it with `sextant agent run`, and the scripted agent model searching it. The search is the
 * workspace's own hybrid search, read back from the task's tree (paths relative to it, a hit in a
 * file the agent changed marked stale); a task without an index is not offered it; the workspace
 * secret reaches only the sandbox; and the API refuses a workspace that is not the caller's.
 */
import { cpSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TaskEvent } from "../../protocol/agents/task.js";
import type { AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import { WorkspaceSecret } from "../../client/workspace/secret.js";
import { Sextant } from "../../client/sdk/client.js";
import {
  agentFixtures,
  rawCall,
  setAgentScripts,
  startAgentStack,
  startTestSandboxHost,
  taskEnded,
  taskEvents,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { savedLocalEdge, sextantAsync } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

let host: SandboxHostHandle;
let stack: AgentStack;
/** Every fixture repository as a package of one workspace: packages/<name>/… */
let monorepo: string;
const cli = (...args: string[]) => sextantAsync(args, stack.env);

const search = (query: string, extra: Record<string, unknown> = {}) => ({
  name: "codebase_search",
  arguments: { query, topK: 5, ...extra },
});
const finish = { toolCalls: [{ name: "finish", arguments: { summary: "Searched." } }] };

const SCRIPTS: AgentScript[] = [
  {
    name: "search-whole",
    match: "(search whole workspace)",
    turns: [
      { toolCalls: [search("range out push loop"), search("clamp lower upper", { path: "packages/clamp" })] },
      {
        toolCalls: [
          {
            name: "edit_file",
            arguments: { path: "packages/range/src/range.js", oldText: "i <= n", newText: "i < n" },
          },
        ],
      },
      { toolCalls: [search("range out push loop")] },
      finish,
    ],
  },
  {
    name: "search-below",
    match: "(search one package)",
    turns: [{ toolCalls: [search("range out push loop"), search("clamp lower upper")] }, finish],
  },
  {
    name: "revoked-key",
    match: "(revoked key wait)",
    turns: [{ toolCalls: [{ name: "run_terminal", arguments: { command: "sleep 2", timeoutMs: 30_000 } }] }, finish],
  },
  {
    name: "search-bad-scope",
    match: "(search outside)",
    turns: [{ toolCalls: [search("range", { path: "../elsewhere" })] }, finish],
  },
];

beforeAll(async () => {
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host });
  await setAgentScripts(stack.edge, SCRIPTS);
  monorepo = mkdtempSync(join(tmpdir(), "sextant-agent-search-"));
  for (const f of agentFixtures()) cpSync(f.repo, join(monorepo, "packages", f.name), { recursive: true });
  const indexed = await cli("index", monorepo);
  expect(indexed.code, indexed.stderr).toBe(0);
});
afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
});

interface SearchResult {
  ok: boolean;
  result?: { results: { path: string; startLine: number; stale: boolean }[]; text: string };
  error?: { code: string; message: string };
}

/** Runs a task with the CLI and returns its codebase_search results, in order. */
async function run(prompt: string, dir: string, ...flags: string[]) {
  const r = await cli("--json", "agent", "run", prompt, dir, ...flags);
  expect(r.code, r.stderr).toBe(0);
  const lines = r.stdout
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as { taskId?: string });
  const taskId = lines.find((l) => l.taskId)!.taskId!;
  const events = lines.filter((l) => TaskEvent.safeParse(l).success).map((l) => TaskEvent.parse(l));
  // In call order (turn, then place in the turn): calls of one turn may end in any order.
  const order = (callId: string) => callId.split(".").slice(-2).map(Number);
  const searches = events
    .filter((e) => e.type === "tool.result" && e.data?.tool === "codebase_search")
    .map((e) => e.data as unknown as SearchResult & { callId: string })
    .sort((a, b) => {
      const [x, y] = [order(a.callId), order(b.callId)];
      return x[0]! - y[0]! || x[1]! - y[1]!;
    });
  return { events, searches, taskId };
}

describe("codebase_search in an agent task", () => {
  it("answers from the workspace's index with the lines of the task's tree, and marks what the agent changed", async () => {
    const { searches, taskId } = await run("Look around (search whole workspace).", monorepo);
    expect(searches).toHaveLength(3);
    const [first, scoped, after] = searches;
    expect(first!.ok).toBe(true);
    const range = first!.result!.results.find((h) => h.path === "packages/range/src/range.js");
    expect(range, JSON.stringify(first)).toMatchObject({ path: "packages/range/src/range.js", stale: false });
    expect(first!.result!.text).toContain("for (let i = 0; i <= n; i++) out.push(i);");
    // A scope is a directory of the tree: every hit is below it.
    expect(scoped!.ok).toBe(true);
    expect(scoped!.result!.results.length).toBeGreaterThan(0);
    for (const hit of scoped!.result!.results) expect(hit.path.startsWith("packages/clamp/")).toBe(true);
    // After the agent's edit the index still has the old chunk: the hit says so, and shows the file as it is.
    const changed = after!.result!.results.find((h) => h.path === "packages/range/src/range.js");
    expect(changed!.stale).toBe(true);
    expect(after!.result!.text).toContain("(changed since indexed)");
    expect(after!.result!.text).toContain("i < n");
    const task = await stack.sdk.agents.get(taskId);
    expect(task.workspaceId).toMatch(/^ws_/);
  });

  it("searches only the directory the task was started on, with paths relative to it", async () => {
    const { searches } = await run("Look at one package (search one package).", join(monorepo, "packages", "range"));
    const [range, clamp] = searches;
    expect(range!.result!.results.map((h) => h.path)).toContain("src/range.js");
    for (const hit of [...range!.result!.results, ...clamp!.result!.results]) {
      expect(hit.path.startsWith("packages/")).toBe(false);
      expect(hit.path.startsWith("src/") || hit.path.startsWith("test/") || hit.path === "package.json").toBe(true);
    }
  });

  it("refuses a scope outside the tree as the model's error, not the task's", async () => {
    const { searches, events } = await run("Look elsewhere (search outside).", monorepo);
    expect(searches[0]!.ok).toBe(false);
    expect(searches[0]!.error!.code).toBe("invalid_arguments");
    expect(events.at(-1)!.data!.status).toBe("finished");
  });

  it("is off without an index (or with --no-codebase-search), and answers not_indexed if called anyway", async () => {
    const loose = mkdtempSync(join(tmpdir(), "sextant-agent-unindexed-"));
    cpSync(join(monorepo, "packages", "range"), loose, { recursive: true });
    for (const [dir, flags] of [
      [loose, []],
      [monorepo, ["--no-codebase-search"]],
    ] as const) {
      const { searches, taskId } = await run("Look around (search whole workspace).", dir, ...flags);
      expect((await stack.sdk.agents.get(taskId)).workspaceId).toBeNull();
      expect(searches[0]!.ok).toBe(false);
      expect(searches[0]!.error!.code).toBe("not_indexed");
    }
    const human = await cli("agent", "run", "Look around (search whole workspace).", loose);
    expect(human.stdout).toContain("codebase_search is off");
  });

  it("refuses another org's workspace, an unknown one and a malformed one", async () => {
    const key = savedLocalEdge(stack.edge).apiKey;
    const secret = WorkspaceSecret.generate().bytes.toString("base64url");
    const unknown = await rawCall(stack.edge, key, "POST", "/v1/agents/tasks", {
      prompt: "x",
      workspace: { id: "ws_00000000000000000000", secret },
    });
    expect([unknown.status, unknown.type, (unknown.json as { code: string }).code]).toEqual([
      404,
      "application/problem+json",
      "not_found",
    ]);
    for (const workspace of [
      { id: "ws_00000000000000000000", secret: "short" },
      { id: "not-a-workspace", secret },
      { id: "ws_00000000000000000000", secret, base: "../up" },
      { id: "ws_00000000000000000000", secret, extra: true },
    ]) {
      const bad = await rawCall(stack.edge, key, "POST", "/v1/agents/tasks", { prompt: "x", workspace });
      expect([bad.status, (bad.json as { code: string }).code], JSON.stringify(workspace)).toEqual([
        400,
        "invalid_request",
      ]);
    }
    // Our workspace, asked for with another org's key.
    const ours = (await stack.sdk.workspaces.list())[0]!.id;
    const admin = savedLocalEdge(stack.edge).adminSecret!;
    const adminApi = async (path: string, body: unknown) =>
      (await rawCall(stack.edge, admin, "POST", path, body)).json as { id: string; key: string };
    const org = await adminApi("/admin/orgs", { name: "Search other org" });
    const user = await adminApi(`/admin/orgs/${org.id}/users`, { email: `search-${Date.now()}@example.com` });
    const other = await adminApi("/admin/keys", { userId: user.id, name: "other" });
    const theirs = await rawCall(stack.edge, other.key, "POST", "/v1/agents/tasks", {
      prompt: "x",
      workspace: { id: ours, secret },
    });
    expect([theirs.status, (theirs.json as { code: string }).code]).toEqual([404, "not_found"]);
  });

  it("keeps the workspace secret and its vector key out of storage and the edge's log", async () => {
    const registry = JSON.parse(readFileSync(join(stack.env.SEXTANT_CONFIG_DIR!, "workspaces.json"), "utf8")) as {
      workspaces: { secret: string }[];
    };
    const secrets = registry.workspaces.map((e) => WorkspaceSecret.parse(e.secret));
    expect(secrets.length).toBeGreaterThan(0);
    const needles = secrets.flatMap((s) => [s.toString(), s.bytes.toString("base64url"), s.vectorKey]);
    expect(await scanDirectoryFor(join(stack.edge.persistTo, "v3"), needles)).toEqual([]);
    const log = stack.edge.output();
    expect(needles.filter((n) => log.includes(n))).toEqual([]);
  });
});

// Here rather than with the other agent tests: it needs a script of its own, and this file sets its scripts.
describe("the key that started a task", () => {
  it("stops the task at its next turn once revoked, though the gateway caches it between turns", async () => {
    const created = await stack.sdk.keys.create({ name: "agent revocation" });
    const sdk = new Sextant({ apiKey: created.key, baseURL: stack.edge.baseURL, maxRetries: 0 });
    const { id } = await sdk.agents.create({ prompt: "Wait (revoked key wait)." });
    await sdk.agents.uploadFiles(id, [{ path: "README.md", content: "eA==" }]);
    await sdk.agents.start(id);
    // Revoked while its first turn's command runs: the next turn asks the model as a revoked key.
    await taskEnded(stack.sdk, id, (t) => t.usage.turns >= 1);
    await stack.sdk.keys.revoke(created.id);
    const task = await taskEnded(stack.sdk, id);
    expect([task.status, task.endReason]).toEqual(["failed", "model_error"]);
    const end = (await taskEvents(stack.sdk, id)).at(-1)!;
    expect(String(end.data!.message)).toMatch(/revoked, expired or gone/);
  });
});
