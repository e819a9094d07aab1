/**
 * Agent tasks through `npm start`: the scripted agent model solves each fixture repository's failing
 * test in a bubblewrap sandbox, the diff it leaves applies and passes, and the API's error and
 * security paths answer with problem documents.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Task, TaskEvent } from "../../protocol/agents/task.js";
import {
  agentFixtures,
  copyOfRepo,
  filesOf,
  makeOrg,
  rawCall,
  startAgentStack,
  startTask,
  taskEnded,
  taskEvents,
  type AgentFixture,
  type AgentStack,
} from "../support/agent-stack.js";
import { savedLocalEdge } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

let stack: AgentStack;
let key: string;

beforeAll(async () => {
  stack = await startAgentStack();
  key = savedLocalEdge(stack.edge).apiKey;
});
afterAll(async () => {
  await stack?.edge.stop();
});

const api = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  rawCall(stack.edge, key, method, path, body, headers);
const ended = (id: string) => taskEnded(stack.sdk, id);
const events = (id: string) => taskEvents(stack.sdk, id);

/** Every task the suite ran, so the storage scan can check it looked where they are kept. */
const taskIds: string[] = [];

async function runFixture(fixture: AgentFixture): Promise<{ task: Task; events: TaskEvent[] }> {
  const id = await startTask(stack.sdk, fixture.prompt, filesOf(fixture.repo));
  taskIds.push(id);
  const task = await ended(id);
  return { task, events: await events(id) };
}

describe("agent tasks through npm start", () => {
  const fixtures = agentFixtures();
  it("has at least ten fixture repositories, each with a failing test", () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(10);
    for (const fixture of fixtures) {
      const run = spawnSync("node", ["--test", "test/"], { cwd: fixture.repo, encoding: "utf8" });
      expect(run.status, `${fixture.name}'s test should fail before the task`).not.toBe(0);
    }
  });

  it.each(agentFixtures().map((f) => [f.name, f] as const))(
    "solves %s: the test passes in the sandbox and the diff applies and passes here",
    async (_, fixture) => {
      const { task, events: log } = await runFixture(fixture);
      expect(task.status, JSON.stringify(log.at(-1))).toBe("finished");
      expect(task.endReason).toBe("finished");
      expect(task.usage.turns).toBe(4);
      // The simulator counts each answer's prompt and completion tokens apart; the task sums each.
      expect(task.usage.promptTokens).toBeGreaterThan(0);
      expect(task.usage.completionTokens).toBeGreaterThan(0);
      expect(task.usage.promptTokens! + task.usage.completionTokens!).toBe(task.usage.tokens);
      // The last command the agent ran is the test suite, and it passed in the sandbox.
      const results = log.filter((e) => e.type === "tool.result" && e.data?.tool === "run_terminal");
      expect(results).toHaveLength(2);
      expect((results[0]!.data!.result as { exitCode: number }).exitCode).not.toBe(0);
      expect((results[1]!.data!.result as { exitCode: number }).exitCode, JSON.stringify(log, null, 1)).toBe(0);
      // Event ids run 1, 2, 3, … with nothing missing, and the log ends with the task's end.
      expect(log.map((e) => e.id)).toEqual(log.map((_, i) => i + 1));
      expect(log.at(-1)!.type).toBe("task.ended");

      const diff = await api("GET", `/v1/agents/tasks/${task.id}/diff`);
      expect(diff.status).toBe(200);
      const { diff: patch, filesChanged } = diff.json as { diff: string; filesChanged: number };
      expect(filesChanged).toBe(Object.keys(fixture.changed).length);
      const copy = copyOfRepo(fixture);
      writeFileSync(join(copy, "agent.patch"), patch);
      execFileSync("git", ["apply", "agent.patch"], { cwd: copy });
      for (const [path, content] of Object.entries(fixture.changed))
        expect(readFileSync(join(copy, path), "utf8")).toBe(content);
      expect(spawnSync("node", ["--test", "test/"], { cwd: copy }).status).toBe(0);
    },
  );

  it("ends a task over its wall time, cutting its command off at the deadline", async () => {
    const created = await api("POST", "/v1/agents/tasks", {
      prompt: "Wait (agent task fixture sleeper).",
      limits: { wallSeconds: 5, sandboxSeconds: 600 },
      source: "empty",
    });
    const task = await ended(Task.parse(created.json).id);
    expect([task.status, task.endReason]).toEqual(["failed", "wall_time"]);
    const log = await events(task.id);
    const result = log.find((e) => e.type === "tool.result")!.data!;
    expect(result.ok).toBe(true);
    expect((result.result as { timedOut: boolean }).timedOut).toBe(true);
    expect(log.at(-1)!.data!.reason).toBe("wall_time");
  });

  it("cancels a task in the middle of a command, and nothing of it follows the task's end", async () => {
    const created = await api("POST", "/v1/agents/tasks", {
      prompt: "Wait (agent task fixture sleeper).",
      limits: { wallSeconds: 600, sandboxSeconds: 600 },
      source: "empty",
    });
    const id = Task.parse(created.json).id;
    for (let i = 0; i < 300; i++) {
      const task = Task.parse((await api("GET", `/v1/agents/tasks/${id}`)).json);
      if (task.usage.turns >= 1) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    const cancelled = Task.parse((await api("POST", `/v1/agents/tasks/${id}/cancel`)).json);
    expect([cancelled.status, cancelled.endReason]).toEqual(["cancelled", "cancelled"]);
    const log = await events(id);
    expect(log.map((e) => e.type)).toEqual([
      "task.created",
      "task.started",
      "turn.started",
      "assistant.message",
      "tool.call",
      "task.ended",
    ]);
    // The tree stays for review; a follow-up to a cancelled task is refused.
    expect((await api("GET", `/v1/agents/tasks/${id}/diff`)).status).toBe(200);
    const again = await api("POST", `/v1/agents/tasks/${id}/messages`, { content: "go on" });
    expect([again.status, (again.json as { code: string }).code]).toEqual([409, "conflict"]);
  });

  it("takes a follow-up to a finished task, which runs again from where it ended", async () => {
    const [fixture] = fixtures;
    const { task } = await runFixture(fixture!);
    expect(task.status).toBe("finished");
    const followed = await api("POST", `/v1/agents/tasks/${task.id}/messages`, { content: "Anything else?" });
    expect(Task.parse(followed.json).status).toBe("running");
    const again = await ended(task.id);
    expect(again.status).toBe("finished");
    expect(again.usage.turns).toBe(task.usage.turns + 1);
    const log = await events(task.id);
    const after = log.slice(log.findIndex((e) => e.type === "task.ended") + 1);
    expect(after.map((e) => e.type)).toEqual(["user.message", "turn.started", "assistant.message", "task.ended"]);
    expect(after[0]!.data).toEqual({ content: "Anything else?" });
    // The script has no fifth turn: the scripted model says so in text, which ends the task.
    expect(after[2]!.data!.content).toMatch(/has no turn 4/);
  });

  it("keeps none of the tasks' code, prompts or paths in storage or the edge's log", async () => {
    const needles = fixtures.flatMap((f) => [
      f.prompt,
      ...Object.keys(f.changed),
      ...Object.values(f.changed).flatMap((c) => c.split("\n").filter((line) => line.trim().length >= 12)),
      ...filesOf(f.repo).flatMap((file) =>
        Buffer.from(file.content, "base64")
          .toString("utf8")
          .split("\n")
          .map((line) => line.trim())
          .filter((line) => line.length >= 16 && !/^[{}"\s,:]*$/.test(line) && !line.startsWith('"')),
      ),
    ]);
    expect(needles.length).toBeGreaterThan(40);
    const storage = join(stack.edge.persistTo, "v3");
    // The scan reads where the tasks are kept: their ids (not secret) are found there, in D1 and in
    // the task objects' own storage.
    expect(taskIds.length).toBeGreaterThanOrEqual(10);
    const found = await scanDirectoryFor(storage, [taskIds[0]!]);
    expect(found.some((hit) => hit.includes("/d1/"))).toBe(true);
    expect(found.some((hit) => hit.includes("/do/"))).toBe(true);
    expect(await scanDirectoryFor(storage, [...new Set(needles)])).toEqual([]);
    const log = stack.edge.output();
    expect(needles.filter((n) => log.includes(n))).toEqual([]);
  });
});

describe("the agent task API's error and security paths", () => {
  it("refuses a request without a key, or with a bad one", async () => {
    for (const auth of [undefined, "Bearer sxt_not_a_real_key", "Basic abc"]) {
      const response = await fetch(`${stack.edge.baseURL}/v1/agents/tasks`, {
        method: "POST",
        headers: { "Content-Type": "application/json", ...(auth ? { Authorization: auth } : {}) },
        body: JSON.stringify({ prompt: "x" }),
      });
      expect(response.status).toBe(401);
      expect(response.headers.get("content-type")).toMatch(/application\/problem\+json/);
      expect(((await response.json()) as { code: string }).code).toBe("unauthenticated");
    }
  });

  it("answers malformed, invalid and oversized bodies with 400 and 413", async () => {
    const bad = await api("POST", "/v1/agents/tasks", "{not json");
    expect([bad.status, (bad.json as { code: string }).code]).toEqual([400, "invalid_request"]);
    expect(bad.type).toMatch(/problem\+json/);
    for (const body of [{}, { prompt: "" }, { prompt: "x", limits: { turns: 0 } }, { prompt: "x", extra: 1 }]) {
      const r = await api("POST", "/v1/agents/tasks", body);
      expect([r.status, (r.json as { code: string }).code], JSON.stringify(body)).toEqual([400, "invalid_request"]);
    }
    const huge = await api("POST", "/v1/agents/tasks", { prompt: "x".repeat(2 * 1024 * 1024) });
    expect([huge.status, (huge.json as { code: string }).code]).toEqual([413, "payload_too_large"]);
  });

  it("reports an unknown task, and another org's, as missing", async () => {
    for (const path of ["", "/events", "/diff"]) {
      const r = await api("GET", `/v1/agents/tasks/task_doesnotexist000000${path}`);
      expect([r.status, (r.json as { code: string }).code]).toEqual([404, "not_found"]);
    }
    const created = await api("POST", "/v1/agents/tasks", { prompt: "List the files (agent task fixture none)." });
    const id = Task.parse(created.json).id;
    // A second org, made with the admin secret, with its own key.
    const other = await makeOrg(stack.edge, "Other org");
    for (const [method, path] of [
      ["GET", ""],
      ["GET", "/events"],
      ["GET", "/diff"],
      ["POST", "/start"],
      ["POST", "/cancel"],
    ] as const) {
      const r = await fetch(`${stack.edge.baseURL}/v1/agents/tasks/${id}${path}`, {
        method,
        headers: { Authorization: `Bearer ${other.key}` },
      });
      expect(r.status, `${method} ${path}`).toBe(404);
    }
    const list = await fetch(`${stack.edge.baseURL}/v1/agents/tasks`, {
      headers: { Authorization: `Bearer ${other.key}` },
    });
    expect(((await list.json()) as { data: unknown[] }).data).toEqual([]);
    await api("POST", `/v1/agents/tasks/${id}/cancel`);
  });

  it("takes files only before the start, and refuses paths outside the tree", async () => {
    const id = Task.parse((await api("POST", "/v1/agents/tasks", { prompt: "x (agent task fixture none)" })).json).id;
    const escape = await api("POST", `/v1/agents/tasks/${id}/files`, {
      files: [{ path: "../outside.txt", content: Buffer.from("x").toString("base64") }],
    });
    expect(escape.status).toBe(400);
    const cancelled = await api("POST", `/v1/agents/tasks/${id}/cancel`);
    expect(Task.parse(cancelled.json).status).toBe("cancelled");
    const late = await api("POST", `/v1/agents/tasks/${id}/files`, {
      files: [{ path: "a.txt", content: Buffer.from("x").toString("base64") }],
    });
    expect([late.status, (late.json as { code: string }).code]).toEqual([409, "conflict"]);
    const bad = await api("GET", `/v1/agents/tasks/${id}/events`, undefined, { "Last-Event-ID": "abc" });
    expect([bad.status, (bad.json as { code: string }).code]).toEqual([400, "invalid_request"]);
  });
});
