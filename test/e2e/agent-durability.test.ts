/**
 * A ten-turn agent task (one write and one command per turn) interrupted at every turn boundary,
 * once by stopping the whole edge and starting it again on the same state, once by restarting the
 * task's object alone: it ends with the same diff as an uninterrupted run, and no write or command
 * ran twice (the command appends its turn to a file, and every write creates a new one).
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Task, TaskEvent } from "../../protocol/agents/task.js";
import {
  filesOf,
  startAgentStack,
  startTestSandboxHost,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { freePort, ROOT, savedLocalEdge } from "../support/local-edge.js";

const PROMPT = "Take nine steps (agent task fixture ten-turns).";
const REPO = join(ROOT, "test/fixtures/agent-durability/repo");
const TURNS = 10;

let host: SandboxHostHandle;
beforeAll(async () => {
  host = await startTestSandboxHost();
});
afterAll(async () => {
  await host?.stop();
});

class Client {
  constructor(
    readonly stack: AgentStack,
    readonly key = savedLocalEdge(stack.edge).apiKey,
  ) {}

  async call(method: string, path: string, body?: unknown, auth = `Bearer ${this.key}`): Promise<unknown> {
    const response = await fetch(`${this.stack.edge.baseURL}${path}`, {
      method,
      headers: { Authorization: auth, ...(body ? { "Content-Type": "application/json" } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
    return response.status === 202 ? undefined : response.json();
  }

  async start(): Promise<string> {
    const id = Task.parse(await this.call("POST", "/v1/agents/tasks", { prompt: PROMPT })).id;
    await this.call("POST", `/v1/agents/tasks/${id}/files`, { files: filesOf(REPO) });
    await this.call("POST", `/v1/agents/tasks/${id}/start`);
    return id;
  }

  task(id: string) {
    return this.call("GET", `/v1/agents/tasks/${id}`).then((t) => Task.parse(t));
  }

  async events(id: string): Promise<TaskEvent[]> {
    const response = await fetch(`${this.stack.edge.baseURL}/v1/agents/tasks/${id}/events?after=0`, {
      headers: { Authorization: `Bearer ${this.key}` },
    });
    // The stream stays open while the task runs: read what is there now, then let go.
    const reader = response.body!.getReader();
    let text = "";
    const timer = setTimeout(() => void reader.cancel(), 1500);
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    clearTimeout(timer);
    return text
      .split("\n\n")
      .flatMap((block) => block.split("\n").filter((l) => l.startsWith("data: ")))
      .map((line) => TaskEvent.parse(JSON.parse(line.slice(6))));
  }

  /** Waits until turn `turn`'s calls all have results (or the task has ended). */
  async turnDone(id: string, turn: number): Promise<void> {
    for (let i = 0; i < 600; i++) {
      const task = await this.task(id);
      if (
        task.status !== "running" ||
        task.usage.turns > turn ||
        (task.usage.turns === turn && task.usage.toolCalls >= 3 * turn)
      )
        return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`turn ${turn} of ${id} never finished`);
  }

  async ended(id: string): Promise<Task> {
    for (let i = 0; i < 900; i++) {
      const task = await this.task(id);
      if (task.status !== "running") return task;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`task ${id} did not end`);
  }

  diff(id: string) {
    return this.call("GET", `/v1/agents/tasks/${id}/diff`) as Promise<{ diff: string; filesChanged: number }>;
  }
}

/** What a run left: its diff, and every result's outcome (each write and command said ok once). */
async function outcome(client: Client, id: string) {
  const task = await client.ended(id);
  expect(task.status).toBe("finished");
  expect(task.usage.turns).toBe(TURNS);
  const log = await client.events(id);
  const results = log.filter((e) => e.type === "tool.result");
  expect(results.filter((e) => e.data?.ok !== true)).toEqual([]);
  // One result per call: a call re-sent after a restart is answered once, from the host's record.
  const callIds = results.map((e) => e.data!.callId as string);
  expect(new Set(callIds).size).toBe(callIds.length);
  expect(callIds).toHaveLength(3 * (TURNS - 1) + 1);
  return (await client.diff(id)).diff;
}

describe("a ten-turn task interrupted at every turn boundary", () => {
  let expected: string;

  it("runs uninterrupted, appending each turn's command once", async () => {
    const stack = await startAgentStack({ host });
    try {
      const client = new Client(stack);
      expected = await outcome(client, await client.start());
      expect(expected).toContain("+1\n+2\n+3\n+4\n+5\n+6\n+7\n+8\n+9\n");
      for (let i = 1; i < TURNS; i++) expect(expected).toContain(`+++ b/steps/step-${i}.txt`);
    } finally {
      await stack.edge.stop();
    }
  });

  it("ends with the same diff when the edge stops and starts again after every turn", async () => {
    const port = await freePort();
    const persistTo = mkdtempSync(join(tmpdir(), "sextant-state-"));
    const configDir = mkdtempSync(join(tmpdir(), "sextant-config-"));
    let stack = await startAgentStack({ host, port, persistTo, configDir });
    try {
      let client = new Client(stack);
      const id = await client.start();
      for (let turn = 1; turn < TURNS; turn++) {
        await client.turnDone(id, turn);
        await stack.edge.stop();
        stack = await startAgentStack({ host, port, persistTo, configDir });
        client = new Client(stack);
      }
      expect(await outcome(client, id)).toBe(expected);
    } finally {
      await stack.edge.stop();
    }
  });

  it("ends with the same diff when the task's object restarts after every turn", async () => {
    const stack = await startAgentStack({ host });
    try {
      const client = new Client(stack);
      const admin = `Bearer ${savedLocalEdge(stack.edge).adminSecret}`;
      const id = await client.start();
      for (let turn = 1; turn < TURNS; turn++) {
        await client.turnDone(id, turn);
        await client.call("POST", `/admin/agents/tasks/${id}/restart`, undefined, admin);
      }
      expect(await outcome(client, id)).toBe(expected);
    } finally {
      await stack.edge.stop();
    }
  });
});
