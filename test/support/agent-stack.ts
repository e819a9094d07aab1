/**
 * Agent tasks end to end: `npm start`'s edge (whose simulator answers the scripted agent model from
 * `gpu-backends/simulator/agent-scripts/`) and, when asked, a sandbox host of the test's own, so a
 * test can stop and restart the edge while the task's sandbox lives on.
 */
import { cpSync, mkdtempSync, readFileSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { bubblewrapWorks } from "../../sandboxes/drivers.js";
import { startSandboxHost } from "../../sandboxes/host.js";
import { Sextant } from "../../client/sdk/client.js";
import type { AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import { isTerminal, type Task, type TaskEvent, type TaskLimits } from "../../protocol/agents/task.js";
import { ROOT, savedLocalEdge, sextant, startLocalEdge, type CliResult, type LocalEdge } from "./local-edge.js";

export const AGENT_FIXTURES = join(ROOT, "test/fixtures/agent-tasks");

export interface AgentFixture {
  name: string;
  /** The task's files, as the client uploads them. */
  repo: string;
  prompt: string;
  /** Files the expected solution changes, with their expected content. */
  changed: Record<string, string>;
}

export function agentFixtures(): AgentFixture[] {
  return readdirSync(AGENT_FIXTURES)
    .filter((name) => statSync(join(AGENT_FIXTURES, name, "task.json"), { throwIfNoEntry: false }))
    .sort()
    .map((name) => {
      const task = JSON.parse(readFileSync(join(AGENT_FIXTURES, name, "task.json"), "utf8")) as {
        prompt: string;
        changed: Record<string, string>;
      };
      return { name, repo: join(AGENT_FIXTURES, name, "repo"), ...task };
    });
}

/** A fixture's repository copied to a temporary directory (tests may change it). */
export function copyOfRepo(fixture: AgentFixture): string {
  const dir = mkdtempSync(join(tmpdir(), `sextant-agent-${fixture.name}-`));
  cpSync(fixture.repo, dir, { recursive: true });
  return dir;
}

/** Every file under `dir`, relative, as base64 upload entries. */
export function filesOf(dir: string): { path: string; content: string }[] {
  const out: { path: string; content: string }[] = [];
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) out.push({ path: relative(dir, path), content: readFileSync(path).toString("base64") });
    }
  };
  walk(dir);
  return out;
}

export interface SandboxHostHandle {
  url: string;
  token: string;
  root: string;
  stop(): Promise<void>;
}

/**
 * A sandbox host of the test's own: bubblewrap where it runs, and under CI=true always (a machine
 * where it cannot fails the agent tests, rather than run them with less isolation than users get).
 */
export async function startTestSandboxHost(): Promise<SandboxHostHandle> {
  const bwrap = bubblewrapWorks();
  if (!bwrap && process.env.CI)
    throw new Error(
      "bubblewrap cannot make a sandbox on this machine (apt-get install bubblewrap): CI runs agents under it.",
    );
  const token = `test-${crypto.randomUUID()}`;
  const root = mkdtempSync(join(tmpdir(), "sextant-sandboxes-"));
  const host = await startSandboxHost({
    host: "127.0.0.1",
    port: 0,
    token,
    root,
    driver: bwrap ? "bubblewrap" : "direct",
  });
  return { url: host.url, token, root, stop: () => host.stop() };
}

export interface AgentStack {
  edge: LocalEdge;
  sdk: Sextant;
  env: Record<string, string>;
  cli: (args: string[]) => CliResult;
}

/** `npm start` (with its own sandbox host, or `host` when given) and an SDK client with the development key. */
export async function startAgentStack(
  options: {
    host?: SandboxHostHandle;
    port?: number;
    persistTo?: string;
    configDir?: string;
    vars?: Record<string, string>;
  } = {},
): Promise<AgentStack> {
  const vars = {
    ...(options.host ? { SANDBOX_URL: options.host.url, SANDBOX_TOKEN: options.host.token } : {}),
    ...options.vars,
  };
  const edge = await startLocalEdge({
    vars,
    ...(options.port ? { port: options.port } : {}),
    ...(options.persistTo ? { persistTo: options.persistTo } : {}),
    ...(options.configDir ? { configDir: options.configDir } : {}),
  });
  const sdk = new Sextant({ apiKey: savedLocalEdge(edge).apiKey, baseURL: edge.baseURL, maxRetries: 0 });
  const env = { SEXTANT_CONFIG_DIR: edge.configDir, SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-cache-")) };
  return { edge, sdk, env, cli: (args) => sextant(args, env) };
}

/** Creates a task, uploads `files` and starts it; its id. */
export async function startTask(
  sdk: Sextant,
  prompt: string,
  files: { path: string; content: string }[],
  limits: Partial<TaskLimits> = {},
): Promise<string> {
  const { id } = await sdk.agents.create({ prompt, limits });
  await sdk.agents.uploadFiles(id, files);
  await sdk.agents.start(id);
  return id;
}

/**
 * Polls until the task has ended, or until `done` says so of it (the bound only keeps a broken run
 * from hanging a suite).
 */
export async function taskEnded(
  sdk: Sextant,
  id: string,
  done: (task: Task) => boolean = (task) => isTerminal(task.status),
): Promise<Task> {
  for (let i = 0; i < 3000; i++) {
    const task = await sdk.agents.get(id);
    if (done(task) || isTerminal(task.status)) return task;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`task ${id} did not end`);
}

/** An ended task's whole event log, as the SDK reads the stream. */
export async function taskEvents(sdk: Sextant, id: string): Promise<TaskEvent[]> {
  const events: TaskEvent[] = [];
  for await (const event of sdk.agents.events(id)) events.push(event);
  return events;
}

/**
 * A request to the edge as it comes back, status and body, for tests of what the API answers
 * (the SDK would turn a problem into an exception).
 */
export async function rawCall(
  edge: LocalEdge,
  token: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; type: string; retryAfter: string | null; json: never }> {
  const response = await fetch(`${edge.baseURL}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${token}`,
      ...(body !== undefined ? { "Content-Type": "application/json" } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return {
    status: response.status,
    type: response.headers.get("content-type") ?? "",
    retryAfter: response.headers.get("retry-after"),
    json: json as never,
  };
}

/** Replaces the scripted agent model's scripts on every simulated backend `npm start` runs. */
export async function setAgentScripts(edge: LocalEdge, scripts: AgentScript[]): Promise<void> {
  const { url: control, headers } = edge.simulatorControl();
  const { backends } = (await (await fetch(`${control}/backends`, { headers })).json()) as {
    backends: { id: string }[];
  };
  for (const { id } of backends) {
    const response = await fetch(`${control}/backends/${id}/agent-scripts`, {
      method: "PUT",
      headers: { ...headers, "Content-Type": "application/json" },
      body: JSON.stringify({ scripts }),
    });
    if (!response.ok) throw new Error(`setting ${id}'s scripts: ${response.status} ${await response.text()}`);
  }
}

/** An org of its own, made with the edge's admin secret, with a user and an SDK client on that user's key. */
export async function makeOrg(edge: LocalEdge, name: string): Promise<{ key: string; sdk: Sextant }> {
  const admin = savedLocalEdge(edge).adminSecret!;
  const adminApi = (path: string, body: unknown) =>
    fetch(`${edge.baseURL}${path}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    }).then((r) => r.json() as Promise<{ id: string; key: string }>);
  const org = await adminApi("/admin/orgs", { name });
  const user = await adminApi(`/admin/orgs/${org.id}/users`, { email: `${crypto.randomUUID()}@example.com` });
  const { key } = await adminApi("/admin/keys", { userId: user.id, name });
  return { key, sdk: new Sextant({ apiKey: key, baseURL: edge.baseURL }) };
}
