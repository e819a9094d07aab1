/**
 * Environment sessions end to end, through `npm start`'s edge and a sandbox host of the test's own:
 * a task set from a small Harbor task (its archive built here, as the client builds it), a session
 * stepped with the production agent's tools, steps replayed by index and refused out of order,
 * verification (the reference edit scores 1, no edit 0), deletion and the idle end, the error and
 * tenancy paths, parity with a production agent task running the same calls, and privacy.
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  makeOrg,
  setAgentScripts,
  startAgentStack,
  startTestSandboxHost,
  taskEnded,
  taskEvents,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import {
  appendStep,
  call,
  envClient,
  INSTRUCTION,
  MARK,
  NOTES,
  pushTaskSet,
  taskArchive,
  taskFiles,
  type EnvClient,
} from "../support/env-session.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

let host: SandboxHostHandle;
let stack: AgentStack;
let client: EnvClient;
let set: { id: string; sha256: string };

beforeAll(async () => {
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host });
  client = envClient(stack);
  set = await pushTaskSet(stack, client);
}, 120_000);
afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
});

const open = async (limits: Record<string, number> = {}) => {
  const r = await client.call("POST", "/v1/envs/sessions", { taskset: set.id, task: 0, limits });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json as { id: string; tools: { function: { name: string } }[]; observation: { messages: any[] } };
};

describe("an environment session", () => {
  it("starts with the production tools and the task's instruction, runs steps, and scores the edit", async () => {
    const session = await open();
    expect(session.tools.map((t) => t.function.name)).toContain("run_terminal");
    expect(session.tools.map((t) => t.function.name)).not.toContain("codebase_search");
    expect(session.observation.messages[0].role).toBe("system");
    expect(session.observation.messages[1]).toEqual({ role: "user", content: `${INSTRUCTION}\n` });
    const base = `/v1/envs/sessions/${session.id}`;

    const first = await client.call("POST", `${base}/step`, {
      index: 1,
      content: "Reading first.",
      tool_calls: [call("a", "read_file", { path: "value.txt" }), call("b", "nonexistent_tool", {})],
    });
    expect(first.status, JSON.stringify(first.json)).toBe(200);
    expect(first.json.index).toBe(1);
    expect(first.json.done).toBe(false);
    expect(first.json.results.map((r: any) => r.tool_call_id)).toEqual(["a", "b"]);
    expect(first.json.results[0].content).toContain("0");
    expect(JSON.parse(first.json.results[1].content).error.code).toBe("unknown_tool");

    // Index 1 again: its recorded results, nothing run again; index 3 skips 2: refused.
    const replay = await client.call("POST", `${base}/step`, { index: 1, tool_calls: [] });
    expect(replay.json.results).toEqual(first.json.results);
    const skipped = await client.call("POST", `${base}/step`, appendStep(3));
    expect([skipped.status, skipped.json.code]).toEqual([409, "conflict"]);

    const edit = await client.call("POST", `${base}/step`, {
      index: 2,
      tool_calls: [call("w", "edit_file", { path: "value.txt", oldText: "0", newText: "42" })],
    });
    expect(edit.status, JSON.stringify(edit.json)).toBe(200);
    const state = await client.call("GET", base);
    expect(state.json).toMatchObject({ status: "running", done: false, steps: 2, reward: null });

    const diff = await client.call("GET", `${base}/diff`);
    expect(diff.json.diff).toContain("+42");

    const verified = await client.call("POST", `${base}/verify`);
    expect(verified.status, JSON.stringify(verified.json)).toBe(200);
    expect(verified.json.reward).toBe(1);
    // Idempotent: the same verdict, from the record.
    expect((await client.call("POST", `${base}/verify`)).json).toEqual(verified.json);
    const after = await client.call("POST", `${base}/step`, appendStep(3));
    expect([after.status, after.json.code]).toEqual([409, "conflict"]);
    expect((await client.call("GET", base)).json).toMatchObject({ done: true, reason: "verified", reward: 1 });

    const deleted = await client.call("DELETE", base);
    expect(deleted.status).toBe(204);
    expect((await client.call("GET", base)).json).toMatchObject({ done: true });
    expect((await client.call("GET", `${base}/diff`)).status).toBe(409);
  }, 120_000);

  it("scores 0 when nothing was done, and ends on finish", async () => {
    const session = await open();
    const base = `/v1/envs/sessions/${session.id}`;
    const done = await client.call("POST", `${base}/step`, {
      index: 1,
      tool_calls: [call("f", "finish", { summary: "nothing" })],
    });
    expect(done.json).toMatchObject({ done: true, reason: "finished" });
    expect((await client.call("POST", `${base}/step`, appendStep(2))).status).toBe(409);
    expect((await client.call("POST", `${base}/verify`)).json.reward).toBe(0);
    expect((await client.call("DELETE", base)).status).toBe(204);
  }, 120_000);

  it("ends when its turns are spent", async () => {
    const session = await open({ turns: 2 });
    const base = `/v1/envs/sessions/${session.id}`;
    expect((await client.call("POST", `${base}/step`, appendStep(1))).json.done).toBe(false);
    expect((await client.call("POST", `${base}/step`, appendStep(2))).json).toMatchObject({
      done: true,
      reason: "turns",
    });
    expect((await client.call("POST", `${base}/step`, appendStep(3))).status).toBe(409);
    expect((await client.call("POST", `${base}/verify`)).json.reward).toBe(1);
    await client.call("DELETE", base);
  }, 120_000);

  it("runs concurrent requests for one step once", async () => {
    const session = await open();
    const base = `/v1/envs/sessions/${session.id}`;
    const answers = await Promise.all([1, 2, 3].map(() => client.call("POST", `${base}/step`, appendStep(1))));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200]);
    expect(answers[1]!.json.results).toEqual(answers[0]!.json.results);
    expect(answers[2]!.json.results).toEqual(answers[0]!.json.results);
    const after = await Promise.all([
      client.call("POST", `${base}/step`, appendStep(2)),
      client.call("GET", base),
      client.call("POST", `${base}/step`, appendStep(2)),
    ]);
    expect(after[0].json.results).toEqual(after[2].json.results);
    // One result counted per call, however many requests asked for it.
    expect((await client.call("GET", base)).json.usage.toolCalls).toBe(2);
    expect((await client.call("POST", `${base}/verify`)).json.reward).toBe(1);
    await client.call("DELETE", base);
  }, 120_000);

  it("ends itself and destroys its sandbox once idle", async () => {
    const session = await open({ idleSeconds: 10 });
    const base = `/v1/envs/sessions/${session.id}`;
    expect((await client.call("POST", `${base}/step`, appendStep(1))).status).toBe(200);
    let state: any;
    for (let i = 0; i < 600; i++) {
      state = (await client.call("GET", base)).json;
      if (state.done) break;
      // Reading the state is a request too: it keeps the session alive, so the test reads seldom.
      await new Promise((r) => setTimeout(r, 12_000));
    }
    expect(state).toMatchObject({ done: true, reason: "idle", status: "failed" });
    expect((await client.call("GET", `${base}/diff`)).status).toBe(409);
  }, 300_000);

  it("is not listed with agent tasks", async () => {
    const session = await open();
    const listed = await client.call("GET", "/v1/agents/tasks");
    expect(listed.json.data.map((t: { id: string }) => t.id)).not.toContain(session.id);
    expect((await client.call("GET", `/v1/agents/tasks/${session.id}`)).status).toBe(404);
    await client.call("DELETE", `/v1/envs/sessions/${session.id}`);
  }, 60_000);
});

describe("the environment API's error and security paths", () => {
  it("answers another org's task set and session as missing, on every route", async () => {
    const session = await open();
    const other = await makeOrg(stack.edge, "intruder");
    const intruder = envClient(stack, other.key);
    const base = `/v1/envs/sessions/${session.id}`;
    const attempts = [
      await intruder.call("GET", `/v1/envs/tasksets/${set.id}`),
      await intruder.call("POST", "/v1/envs/sessions", { taskset: set.id, task: 0 }),
      await intruder.call("GET", base),
      await intruder.call("POST", `${base}/step`, appendStep(1)),
      await intruder.call("POST", `${base}/verify`),
      await intruder.call("GET", `${base}/diff`),
      await intruder.call("DELETE", base),
    ];
    expect(attempts.map((a) => [a.status, a.json.code])).toEqual(attempts.map(() => [404, "not_found"]));
    // None of it touched the session.
    expect((await client.call("GET", base)).json).toMatchObject({ steps: 0, done: false });
    await client.call("DELETE", base);
  }, 60_000);

  it("takes an archive larger than a JSON body may be, and only as gzip", async () => {
    const files = taskFiles();
    // Random bytes do not compress: the archive is larger than the edge's 1 MiB body limit.
    files.set("environment/blob.bin", new Uint8Array(randomBytes(1536 * 1024)));
    const { archive, sha256 } = await taskArchive(files);
    expect(archive.byteLength).toBeGreaterThan(2 ** 20);
    const put = (headers: Record<string, string>, body: Uint8Array | string) =>
      fetch(`${stack.edge.baseURL}/v1/envs/archives/${sha256}`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${client.key}`, "Content-Type": "application/gzip", ...headers },
        body: body as BodyInit,
      });
    const stored = await put({}, archive);
    expect(stored.status, await stored.clone().text()).toBe(201);
    expect(await stored.json()).toEqual({ sha256, bytes: archive.byteLength });
    const json = await put({ "Content-Type": "application/json" }, "{}");
    expect(json.status).toBe(415);
  }, 60_000);

  it("refuses requests without a key or with a bad one", async () => {
    for (const auth of [undefined, "Bearer sxt_not_a_real_key"]) {
      const response = await fetch(`${stack.edge.baseURL}/v1/envs/sessions`, {
        method: "POST",
        headers: { "Content-Type": "application/json", ...(auth ? { Authorization: auth } : {}) },
        body: JSON.stringify({ taskset: set.id, task: 0 }),
      });
      expect(response.status).toBe(401);
      expect(response.headers.get("content-type")).toMatch(/application\/problem\+json/);
    }
  });

  it("answers malformed, invalid and oversized bodies as problems", async () => {
    const session = await open();
    const base = `/v1/envs/sessions/${session.id}`;
    const cases: [string, string, unknown, number][] = [
      ["POST", "/v1/envs/tasksets", "{not json", 400],
      ["POST", "/v1/envs/tasksets", { tasks: [] }, 400],
      ["POST", "/v1/envs/tasksets", { tasks: [{ sha256: "XYZ", bytes: 1 }] }, 400],
      ["POST", "/v1/envs/sessions", { taskset: set.id, task: 5 }, 404],
      ["POST", "/v1/envs/sessions", { taskset: set.id, task: 0, limits: { idleSeconds: 1 } }, 400],
      ["POST", "/v1/envs/sessions", { taskset: set.id, task: 0, surprise: 1 }, 400],
      ["POST", `${base}/step`, { index: 0, tool_calls: [] }, 400],
      ["POST", `${base}/step`, { index: 1, tool_calls: [{ id: "x", type: "function" }] }, 400],
      ["POST", `${base}/step`, { index: 1, tool_calls: [], content: "x".repeat(2 * 2 ** 20) }, 413],
    ];
    for (const [method, path, body, status] of cases) {
      const r = await client.call(method, path, body);
      expect([path, r.status, r.type]).toEqual([path, status, expect.stringMatching(/problem\+json/)]);
    }
    const notGzip = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${"a".repeat(64)}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${client.key}`, "Content-Type": "application/gzip" },
      body: "not an archive",
    });
    expect(notGzip.status).toBe(400);
    const badName = await fetch(`${stack.edge.baseURL}/v1/envs/archives/nothex`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${client.key}`, "Content-Type": "application/gzip" },
      body: "x",
    });
    expect(badName.status).toBe(400);
    await client.call("DELETE", base);
  }, 60_000);
});

describe("parity with a production agent task", () => {
  /** The same calls, turn by turn: reads, a search, an edit, a command, a failing call. */
  const turns = [
    [
      { name: "read_file", arguments: { path: "notes.txt" } },
      { name: "list_dir", arguments: {} },
    ],
    [{ name: "grep", arguments: { pattern: "quartz" } }],
    [{ name: "edit_file", arguments: { path: "value.txt", oldText: "0", newText: "42" } }],
    [
      { name: "run_terminal", arguments: { command: "cat value.txt; echo 7 >> steps.log" } },
      { name: "read_file", arguments: { path: "missing.txt" } },
    ],
    [{ name: "finish", arguments: { summary: "set it" } }],
  ];

  /** A tool message's content with what differs between any two runs (timings) taken out. */
  const stable = (content: string) =>
    JSON.stringify(JSON.parse(content), (k, v) => (k === "durationMs" || k === "elapsedMs" ? 0 : v));

  it("gives the same tool results step for step, and the same diff", async () => {
    await setAgentScripts(stack.edge, [
      {
        name: "env-parity",
        match: MARK,
        turns: turns.map((calls) => ({ toolCalls: calls })),
      },
    ]);
    const files = [...taskFiles()]
      .filter(([path]) => path.startsWith("environment/"))
      .map(([path, bytes]) => ({
        path: path.slice("environment/".length),
        content: Buffer.from(bytes).toString("base64"),
      }));
    const { id } = await stack.sdk.agents.create({ prompt: INSTRUCTION });
    await stack.sdk.agents.uploadFiles(id, files);
    await stack.sdk.agents.start(id);
    const task = await taskEnded(stack.sdk, id);
    expect(task.status).toBe("finished");
    const events = await taskEvents(stack.sdk, id);
    // Results are logged as they arrive (calls of a turn run concurrently): put back in call order.
    const order = (callId: string) => callId.split(".").slice(-2).map(Number) as [number, number];
    const produced = events
      .filter((e) => e.type === "tool.result")
      .map((e) => e.data as { callId: string; ok: boolean; result?: unknown; error?: unknown })
      .sort((a, b) => order(a.callId)[0] - order(b.callId)[0] || order(a.callId)[1] - order(b.callId)[1])
      .map((d) => JSON.stringify(d.ok ? d.result : { error: d.error }));

    const session = await open();
    const base = `/v1/envs/sessions/${session.id}`;
    const stepped: string[] = [];
    for (const [i, calls] of turns.entries()) {
      const r = await client.call("POST", `${base}/step`, {
        index: i + 1,
        tool_calls: calls.map((c, j) => call(`call_${i}_${j}`, c.name, c.arguments)),
      });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      stepped.push(...r.json.results.map((m: { content: string }) => m.content));
    }
    expect(stepped.map(stable)).toEqual(produced.map(stable));
    expect(stepped).toHaveLength(7);
    const sessionDiff = (await client.call("GET", `${base}/diff`)).json.diff;
    expect(sessionDiff).toBe((await stack.sdk.agents.diff(id)).diff);
    expect(sessionDiff).toContain("+42");
    await client.call("DELETE", base);
  }, 180_000);
});

describe("privacy", () => {
  it("keeps the instruction and the task's files out of D1, DO storage, R2 and the edge's log", async () => {
    const session = await open();
    const base = `/v1/envs/sessions/${session.id}`;
    await client.call("POST", `${base}/step`, {
      index: 1,
      tool_calls: [
        call("r", "read_file", { path: "notes.txt" }),
        call("t", "run_terminal", { command: "cat notes.txt" }),
      ],
    });
    await client.call("POST", `${base}/verify`);
    const storage = join(stack.edge.persistTo, "v3");
    // The scan reads where sessions are kept: the session's id is found in D1 and in its object.
    const found = await scanDirectoryFor(storage, [session.id]);
    expect(found.some((hit) => hit.includes("/d1/"))).toBe(true);
    expect(found.some((hit) => hit.includes("/do/"))).toBe(true);
    const needles = [MARK, INSTRUCTION, NOTES, "quartz-lantern"];
    expect(await scanDirectoryFor(storage, needles)).toEqual([]);
    const log = stack.edge.output();
    expect(needles.filter((n) => log.includes(n))).toEqual([]);
    await client.call("DELETE", base);
  }, 120_000);
});
