/**
 * The environment benchmarks' stack: `npm start`'s edge with the sandbox host and each simulated
 * backend in a process of its own (`bench/agent-processes.ts`, so the bench can also call the host
 * straight, the bare floor), the repository's Harbor task set (test/fixtures/env-tasks) pushed to it
 * as the client pushes one, its scripted policy loaded on the simulators, and the requests the
 * benchmarks make: to the edge under the development key, to the host under its token, and a
 * rollout run read from its event stream.
 */
import { join } from "node:path";
import { readFileSync } from "node:fs";
import { createParser } from "eventsource-parser";
import { AgentScriptsBody } from "../gpu-backends/simulator/agent-script.js";
import { checkTaskDir } from "../client/envs/task-archive.js";
import { findTaskDirs, manifestSettings } from "../client/envs/task-set.js";
import { RolloutEvent, type RunSummary } from "../protocol/envs/rollouts.js";
import { startAgentStack, type AgentStack } from "../test/support/agent-stack.js";
import { ROOT, savedLocalEdge } from "../test/support/local-edge.js";
import { startAgentProcesses, type AgentProcesses } from "./agent-processes.js";

export const ENV_TASKS = join(ROOT, "test/fixtures/env-tasks");

export interface BenchTask {
  name: string;
  index: number;
  sha256: string;
  /** A file of the task's starting tree, for a read_file. */
  file: string;
}

export interface EnvStack {
  stack: AgentStack;
  processes: AgentProcesses;
  driver: string;
  taskset: string;
  tasks: BenchTask[];
  /** A request to the edge under the development key; the answer's status and JSON. */
  edge(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }>;
  /** A request to the sandbox host under its token. */
  host(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }>;
  stop(): Promise<void>;
}

async function request(url: string, token: string, method: string, body?: unknown) {
  const response = await fetch(url, {
    method,
    headers: {
      Authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  return { status: response.status, json: text ? (JSON.parse(text) as unknown) : undefined } as {
    status: number;
    json: any;
  };
}

/** Throws with the answer unless its status is `want`. */
export function expectStatus(r: { status: number; json: unknown }, want: number, what: string): void {
  if (r.status !== want) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.json)}`);
}

/** The stack, with the first `taskCount` tasks of the fixture set (in name order) pushed as one set. */
export async function startEnvStack(taskCount = Infinity): Promise<EnvStack> {
  const processes = await startAgentProcesses();
  const stack = await startAgentStack({ vars: processes.vars }).catch(async (err: unknown) => {
    await processes.stop();
    throw err;
  });
  const stop = async () => {
    await stack.edge.stop();
    await processes.stop();
  };
  try {
    const key = savedLocalEdge(stack.edge).apiKey;
    const edge = (method: string, path: string, body?: unknown) =>
      request(`${stack.edge.baseURL}${path}`, key, method, body);
    const hostUrl = processes.vars.SANDBOX_URL!.replace(/\/$/, "");
    const host = (method: string, path: string, body?: unknown) =>
      request(`${hostUrl}${path}`, processes.vars.SANDBOX_TOKEN!, method, body);

    const { scripts } = AgentScriptsBody.parse(JSON.parse(readFileSync(join(ENV_TASKS, "scripts.json"), "utf8")));
    await processes.setScripts(scripts);

    const dirs = (await findTaskDirs(ENV_TASKS)).slice(0, taskCount);
    const manifest = [];
    const tasks: BenchTask[] = [];
    for (const [index, { name, dir }] of dirs.entries()) {
      const checked = await checkTaskDir(dir);
      const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${checked.sha256}`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
        body: checked.archive as Uint8Array<ArrayBuffer>,
      });
      if (put.status !== 201) throw new Error(`pushing ${name}: ${put.status} ${await put.text()}`);
      manifest.push({
        sha256: checked.sha256,
        bytes: checked.archive.byteLength,
        settings: manifestSettings(checked.task.settings),
      });
      tasks.push({ name, index, sha256: checked.sha256, file: [...checked.task.startingTree.keys()].sort()[0]! });
    }
    const set = await edge("POST", "/v1/envs/tasksets", { tasks: manifest });
    expectStatus(set, 201, "creating the task set");
    return { stack, processes, driver: processes.driver, taskset: set.json.id, tasks, edge, host, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

export interface RunOutcome {
  id: string;
  /** From the request to the summary event. */
  ms: number;
  summary: RunSummary;
}

/**
 * Reads a run's event stream (a rollout run's or an eval run's) to its summary, `onEvent` seeing each
 * event as it comes; `ms` is from `started` to the summary.
 */
export async function readRunToSummary(
  response: Response,
  started: number,
  onEvent: (event: RolloutEvent) => void = () => {},
): Promise<{ ms: number; summary: RunSummary }> {
  let summary: RunSummary | undefined;
  let ms = 0;
  const parser = createParser({
    onEvent: (m) => {
      const event = RolloutEvent.parse(JSON.parse(m.data));
      onEvent(event);
      if (event.type === "summary") {
        ms = performance.now() - started;
        summary = event.data;
      }
    },
  });
  const decoder = new TextDecoder();
  const reader = response.body!.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
    parser.feed(decoder.decode(chunk.value, { stream: true }));
  if (!summary) throw new Error("the run's stream ended without a summary");
  return { ms, summary };
}

/**
 * Starts a rollout run and reads its events to the summary; `onEvent` sees each as it comes (the
 * benchmark counts the members in flight from them).
 */
export async function rolloutRun(
  env: EnvStack,
  body: Record<string, unknown>,
  onEvent: (event: RolloutEvent) => void = () => {},
): Promise<RunOutcome> {
  const started = performance.now();
  const response = await fetch(`${env.stack.edge.baseURL}/v1/envs/rollouts`, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${savedLocalEdge(env.stack.edge).apiKey}`,
      "Content-Type": "application/json",
    },
    body: JSON.stringify({ taskset: env.taskset, ...body }),
  });
  if (!response.ok) throw new Error(`starting a rollout run: ${response.status} ${await response.text()}`);
  const { ms, summary } = await readRunToSummary(response, started, onEvent);
  const id = response.headers.get("Location")?.split("/").pop() ?? "";
  return { id, ms, summary };
}
