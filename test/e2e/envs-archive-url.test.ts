/**
 * Task sets whose archives come from a URL, through `npm start`'s edge and a sandbox host of the
 * test's own: `sextant envs push --archive-base-url --out` uploads nothing and names each archive
 * at `<base>/<sha256>.tar.gz`; a session on a task the host has never held fetches the archive
 * from there, checks its hash, hands it to the host and runs and scores; an archive whose bytes are
 * not the set's is refused with the reason and never reaches the host; a rollout run's members
 * fetch theirs the same way (a tampered one ends unplayed, with the reason); and URLs the edge must not
 * fetch are refused when the set is made. The archives come from 127.0.0.1, an origin this edge
 * lets through by `ALLOW_PRIVATE_ARCHIVE_ORIGINS` (a local edge's default refuses it).
 */
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  setAgentScripts,
  startAgentStack,
  startTestSandboxHost,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { call, envClient, MARK, taskArchive, taskFiles, type EnvClient } from "../support/env-session.js";
import { sextantAsync } from "../support/local-edge.js";

let host: SandboxHostHandle;
let stack: AgentStack;
let client: EnvClient;
let server: Server;
let base: string;
let work: string;
/** What the archive server serves, by path. */
const served = new Map<string, Uint8Array>();
const fetched: string[] = [];

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sextant-archive-url-"));
  server = createServer((req, res) => {
    fetched.push(req.url ?? "");
    const body = served.get(req.url ?? "");
    if (!body) return void res.writeHead(404).end("no such archive");
    res.writeHead(200, { "Content-Type": "application/gzip" }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host, vars: { ALLOW_PRIVATE_ARCHIVE_ORIGINS: base } });
  client = envClient(stack);
}, 180_000);
afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
  server?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

const archiveOnHost = async (sha256: string) => (await client.call("GET", `/v1/envs/archives/${sha256}`)).status;

describe("task archives from a URL", () => {
  it("push names the published archives, and a session on a task the host never held runs and scores", async () => {
    const task = join(work, "set", "answer");
    for (const [path, bytes] of taskFiles()) {
      mkdirSync(dirname(join(task, path)), { recursive: true });
      writeFileSync(join(task, path), bytes);
    }
    const out = join(work, "published");
    const run = await sextantAsync(
      ["--json", "envs", "push", join(work, "set"), "--archive-base-url", `${base}/tasks/`, "--out", out],
      stack.env,
    );
    expect(run.code, run.stderr).toBe(0);
    const pushed = JSON.parse(run.stdout) as {
      id: string;
      tasks: Record<string, { sha256: string }>;
      uploaded: number;
    };
    expect(pushed.uploaded).toBe(0);
    const sha256 = pushed.tasks["answer"]!.sha256;
    expect(readdirSync(out)).toEqual([`${sha256}.tar.gz`]);
    const url = `${base}/tasks/${sha256}.tar.gz`;
    expect((await client.call("GET", `/v1/envs/tasksets/${pushed.id}`)).json.tasks[0]).toMatchObject({ sha256, url });
    // Nothing was sent: the host has never seen the task.
    expect(await archiveOnHost(sha256)).toBe(404);

    served.set(`/tasks/${sha256}.tar.gz`, readFileSync(join(out, `${sha256}.tar.gz`)));
    const opened = await client.call("POST", "/v1/envs/sessions", { taskset: pushed.id, task: 0 });
    expect(opened.status, JSON.stringify(opened.json)).toBe(201);
    expect(fetched).toContain(`/tasks/${sha256}.tar.gz`);
    expect(await archiveOnHost(sha256)).toBe(200);
    const session = `/v1/envs/sessions/${opened.json.id}`;
    const step = await client.call("POST", `${session}/step`, {
      index: 1,
      tool_calls: [call("w", "edit_file", { path: "value.txt", oldText: "0", newText: "42" })],
    });
    expect(step.status, JSON.stringify(step.json)).toBe(200);
    const verified = await client.call("POST", `${session}/verify`);
    expect(verified.status, JSON.stringify(verified.json)).toBe(200);
    expect(verified.json.reward).toBe(1);
  }, 180_000);

  it("refuses an archive whose bytes are not the set's, and the host never gets them", async () => {
    const files = taskFiles();
    files.set("environment/value.txt", new TextEncoder().encode("tampered-zq81\n"));
    const { archive: genuine, sha256 } = await taskArchive(files);
    // Another valid task's archive at the URL: the host would take it, so only the hash check stops it.
    const { archive: other } = await taskArchive();
    served.set(`/tampered/${sha256}.tar.gz`, other);
    const set = await client.call("POST", "/v1/envs/tasksets", {
      tasks: [{ sha256, bytes: genuine.byteLength, url: `${base}/tampered/${sha256}.tar.gz` }],
    });
    expect(set.status, JSON.stringify(set.json)).toBe(201);
    const opened = await client.call("POST", "/v1/envs/sessions", { taskset: set.json.id, task: 0 });
    expect(opened.status, JSON.stringify(opened.json)).toBe(409);
    expect(opened.type).toContain("application/problem+json");
    expect(opened.json.code).toBe("conflict");
    expect(opened.json.detail).toContain("does not match the task set");
    expect(opened.json.detail).toContain(sha256);
    expect(await archiveOnHost(sha256)).toBe(404);

    // A URL that answers nothing usable: the one message archives fail with, and no session.
    const missing = await client.call("POST", "/v1/envs/tasksets", {
      tasks: [{ sha256, bytes: genuine.byteLength, url: `${base}/nowhere/${sha256}.tar.gz` }],
    });
    const none = await client.call("POST", "/v1/envs/sessions", { taskset: missing.json.id, task: 0 });
    expect(none.status, JSON.stringify(none.json)).toBe(409);
    expect(none.json.detail).toContain("could not be fetched");
  }, 120_000);

  it("plays a rollout member on a task the host never held, and ends a tampered one unplayed with the reason", async () => {
    // The simulator's scripted agent model (a stand-in for a model server) makes the reference edit.
    await setAgentScripts(stack.edge, [
      {
        name: "archive-url",
        match: MARK,
        turns: [
          { toolCalls: [{ name: "edit_file", arguments: { path: "value.txt", oldText: "0", newText: "42" } }] },
          { toolCalls: [{ name: "finish", arguments: { summary: "set it" } }] },
        ],
      },
    ]);
    const files = taskFiles();
    files.set("environment/rollout.txt", new TextEncoder().encode("a task only this run names\n"));
    const genuine = await taskArchive(files);
    files.set("environment/rollout.txt", new TextEncoder().encode("another\n"));
    const tampered = await taskArchive(files);
    served.set(`/runs/${genuine.sha256}.tar.gz`, genuine.archive);
    served.set(`/runs/${tampered.sha256}.tar.gz`, genuine.archive);
    const set = await client.call("POST", "/v1/envs/tasksets", {
      tasks: [genuine, tampered].map((t) => ({
        sha256: t.sha256,
        bytes: t.archive.byteLength,
        url: `${base}/runs/${t.sha256}.tar.gz`,
        settings: { verifierTimeoutSec: 30 },
      })),
    });
    expect(set.status, JSON.stringify(set.json)).toBe(201);
    expect(await archiveOnHost(genuine.sha256)).toBe(404);
    const response = await fetch(`${stack.edge.baseURL}/v1/envs/rollouts`, {
      method: "POST",
      headers: { Authorization: `Bearer ${client.key}`, "Content-Type": "application/json" },
      body: JSON.stringify({
        taskset: set.json.id,
        policy: { model: "chat-simulated" },
        group_size: 1,
        limits: { turns: 4, wallSeconds: 300 },
      }),
    });
    expect(response.status).toBe(200);
    const ended = (await response.text())
      .split("\n\n")
      .filter((block) => block.includes("event: rollout.ended"))
      .map((block) => (JSON.parse(block.slice(block.indexOf("data: ") + 6)) as { data: Record<string, any> }).data)
      .sort((a, b) => a.member - b.member);
    expect(ended.map((e) => e.task.sha256)).toEqual([genuine.sha256, tampered.sha256]);
    expect(ended[0]).toMatchObject({ reward: 1, outcome: "finished" });
    expect(ended[1]).toMatchObject({ reward: null, outcome: "start_error" });
    expect(ended[1]!.verifyError).toContain("does not match the task set");
    expect(await archiveOnHost(genuine.sha256)).toBe(200);
    expect(await archiveOnHost(tampered.sha256)).toBe(404);
  }, 240_000);

  it("refuses, when the set is made, URLs the edge must not fetch or must not keep", async () => {
    const { archive, sha256 } = await taskArchive();
    const port = new URL(base).port;
    for (const url of [
      `http://localhost:${port}/${sha256}.tar.gz`,
      `http://10.0.0.7/${sha256}.tar.gz`,
      `http://[::1]:${port}/${sha256}.tar.gz`,
      `http://tasks.example.com/${sha256}.tar.gz`,
      `https://user:secret@tasks.example.com/${sha256}.tar.gz`,
      `https://tasks.example.com/${sha256}.tar.gz?X-Amz-Signature=abc`,
    ]) {
      const made = await client.call("POST", "/v1/envs/tasksets", {
        tasks: [
          { sha256, bytes: archive.byteLength, url: `${base}/ok.tar.gz` },
          { sha256, bytes: archive.byteLength, url },
        ],
      });
      expect(made.status, url).toBe(400);
      expect(made.json.code).toBe("invalid_request");
      expect(made.json.detail).toContain("Task 1's archive URL");
    }
    const ok = await client.call("POST", "/v1/envs/tasksets", {
      tasks: [{ sha256, bytes: archive.byteLength, url: `https://tasks.example.com/${sha256}.tar.gz` }],
    });
    expect(ok.status, JSON.stringify(ok.json)).toBe(201);
  });
});
