/**
 * A ten-step environment session interrupted at every step, once by stopping the whole edge while
 * the step is in flight (every other step, while its command runs in the sandbox) and starting it
 * again on the same state, once by restarting the session's object: the client sends the same index
 * again (as a client whose answer was lost does), and every step's command, which appends its index
 * to steps.log, ran once. The task's tests score the log 1 only when it holds each index once, in
 * order; the diff shows it too. Last, a rollout whose sandbox create was made on the host but whose
 * answer was lost still plays, on a sandbox made afresh.
 */
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRun } from "../../protocol/envs/rollouts.js";
import {
  rawCall,
  startAgentStack,
  startTestSandboxHost,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { appendStep, call, envClient, pushTaskSet, type EnvClient } from "../support/env-session.js";
import { savedLocalEdge } from "../support/local-edge.js";
import { restartCheaply } from "../support/restart-edge.js";

const STEPS = 10;
const EXPECTED_LOG = Array.from({ length: STEPS }, (_, i) => `+${i + 1}\n`).join("");

// Eleven edge starts in one test: each runs the runtime alone, not a bundle and a migration check.
restartCheaply();

let host: SandboxHostHandle;
beforeAll(async () => {
  host = await startTestSandboxHost();
});
afterAll(async () => {
  await host?.stop();
});

async function open(client: EnvClient, taskset: string): Promise<string> {
  const r = await client.call("POST", "/v1/envs/sessions", { taskset, task: 0 });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json.id as string;
}

/** Step `index` until it is answered: a request cut off by an interruption is sent again, as it was. */
async function stepUntilAnswered(client: () => EnvClient, id: string, index: number, step = appendStep(index)) {
  for (let attempt = 0; attempt < 20; attempt++) {
    const r = await client()
      .call("POST", `/v1/envs/sessions/${id}/step`, step)
      .catch(() => null);
    if (r?.status === 200) return r.json;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error(`step ${index} was never answered`);
}

async function outcome(client: EnvClient, id: string) {
  const base = `/v1/envs/sessions/${id}`;
  const state = (await client.call("GET", base)).json;
  expect(state).toMatchObject({ steps: STEPS, done: false });
  // Every step's one command ran once, each answered with exit code 0 (a replay is the record).
  const diff = (await client.call("GET", `${base}/diff`)).json.diff as string;
  expect(diff).toContain(`@@ -0,0 +1,${STEPS} @@\n${EXPECTED_LOG}`);
  const verdict = (await client.call("POST", `${base}/verify`)).json;
  expect(verdict.reward).toBe(1);
  return diff;
}

/** `appendStep`'s command, then a pause: the call is still running at the sandbox host while the edge stops. */
const heldStep = (index: number) => ({
  index,
  tool_calls: [call(`c${index}`, "run_terminal", { command: `echo ${index} >> steps.log && sleep 2` })],
});

/** Waits until step `index`'s command has appended its index to the session's steps.log on the sandbox host. */
async function appended(id: string, index: number): Promise<void> {
  const log = join(host.root, id, "disk", "tree", "steps.log");
  for (let i = 0; i < 600; i++) {
    let text = "";
    try {
      text = readFileSync(log, "utf8");
    } catch {
      // Not written yet.
    }
    if (text.trimEnd().split("\n").at(-1) === String(index)) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`step ${index}'s command never ran`);
}

describe("a ten-step session interrupted at every step", () => {
  it("runs each step once when the edge stops mid-request and starts again, every step", async () => {
    const persistTo = mkdtempSync(join(tmpdir(), "sextant-state-"));
    const configDir = mkdtempSync(join(tmpdir(), "sextant-config-"));
    let stack: AgentStack = await startAgentStack({ host, persistTo, configDir });
    const port = Number(new URL(stack.edge.baseURL).port);
    try {
      const client = () => envClient(stack);
      const set = await pushTaskSet(stack, client());
      const id = await open(client(), set.id);
      for (let index = 1; index <= STEPS; index++) {
        // The step is sent, and the edge stopped while it may be anywhere in it; every other step, once
        // its command has run and while it still runs: the object started again finds the call
        // recorded and unanswered, sends it again under its call id, and must get the host's record
        // of it, not a second run.
        const step = heldStep(index);
        const inFlight = client()
          .call("POST", `/v1/envs/sessions/${id}/step`, step)
          .catch(() => null);
        if (index % 2 === 0) await appended(id, index);
        await stack.edge.stop();
        await inFlight;
        stack = await startAgentStack({ host, port, persistTo, configDir });
        const answer = await stepUntilAnswered(client, id, index, step);
        expect(answer.index).toBe(index);
        expect(JSON.parse(answer.results[0].content).exitCode).toBe(0);
        // And once more: the same index answers the same record.
        expect(await stepUntilAnswered(client, id, index, step)).toEqual(answer);
      }
      await outcome(client(), id);
    } finally {
      await stack.edge.stop();
    }
    // Eleven edge starts, each a few seconds alone and several times that on a machine whose cores are busy.
  }, 480_000);

  it("runs each step once when the session's object restarts after every step", async () => {
    const stack = await startAgentStack({ host });
    try {
      const client = envClient(stack);
      const admin = savedLocalEdge(stack.edge).adminSecret!;
      const set = await pushTaskSet(stack, client);
      const id = await open(client, set.id);
      for (let index = 1; index <= STEPS; index++) {
        const answer = await stepUntilAnswered(() => client, id, index);
        expect((await rawCall(stack.edge, admin, "POST", `/admin/agents/tasks/${id}/restart`)).status).toBe(202);
        expect(await stepUntilAnswered(() => client, id, index)).toEqual(answer);
      }
      await outcome(client, id);
    } finally {
      await stack.edge.stop();
    }
  }, 300_000);
});

/**
 * A stand-in network between the edge and the sandbox host that loses the answer to the first
 * sandbox create: the host makes the sandbox, and the edge's connection breaks before it hears so
 * (as when the edge stops at that moment). Everything else passes through as it is.
 */
async function losingFirstCreate(target: string): Promise<{ url: string; log: string[]; close: () => Promise<void> }> {
  const log: string[] = [];
  let lost = false;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", async () => {
      const upstream = await fetch(`${target}${req.url}`, {
        method: req.method,
        headers: Object.fromEntries(
          Object.entries(req.headers).filter(([k]) => ["authorization", "content-type"].includes(k)),
        ) as Record<string, string>,
        ...(chunks.length ? { body: Buffer.concat(chunks) } : {}),
      });
      const body = Buffer.from(await upstream.arrayBuffer());
      const create = req.method === "POST" && req.url === "/v1/sandboxes";
      log.push(`${req.method} ${req.url} ${upstream.status}`);
      if (create && !lost) {
        lost = true;
        req.socket.destroy();
        return;
      }
      res.writeHead(upstream.status, Object.fromEntries(upstream.headers));
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    log,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe("a rollout whose sandbox create lost its answer", () => {
  it("plays on a sandbox made afresh, and leaves none behind", async () => {
    const network = await losingFirstCreate(host.url);
    const stack = await startAgentStack({ host: { ...host, url: network.url } });
    try {
      const client = envClient(stack);
      const set = await pushTaskSet(stack, client);
      const made = await fetch(`${stack.edge.baseURL}/v1/envs/rollouts`, {
        method: "POST",
        headers: { Authorization: `Bearer ${client.key}`, "Content-Type": "application/json" },
        body: JSON.stringify({ taskset: set.id, agent: "noop", group_size: 1, limits: { wallSeconds: 120 } }),
      });
      expect(made.status, made.ok ? "" : await made.clone().text()).toBe(200);
      // The run goes on without its stream: it is followed here by its view.
      await made.body?.cancel();
      const runId = made.headers.get("Location")!.split("/").pop()!;
      let run: RolloutRun;
      for (let i = 0; ; i++) {
        run = RolloutRun.parse((await client.call("GET", `/v1/envs/rollouts/${runId}`)).json);
        if (run.status === "ended" || i >= 600) break;
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
      // The member played and was scored (noop's 0), rather than ending `start_error` on the host's 409s.
      expect(run.members.map((m) => [m.state, m.outcome, m.reward])).toEqual([["ended", "finished", 0]]);
      const rolloutId = run.members[0]!.rolloutId!;
      const creates = network.log.filter((l) => l.startsWith("POST /v1/sandboxes "));
      // The lost create made the sandbox; the next met it (409), destroyed it, and made it again.
      expect(creates.slice(0, 3)).toEqual([
        "POST /v1/sandboxes 201",
        "POST /v1/sandboxes 409",
        "POST /v1/sandboxes 201",
      ]);
      expect(network.log).toContain(`DELETE /v1/sandboxes/${rolloutId} 204`);
      // And once it reported, its sandbox was destroyed.
      for (let i = 0; ; i++) {
        const res = await fetch(`${host.url}/v1/sandboxes/${rolloutId}`, {
          headers: { Authorization: `Bearer ${host.token}` },
        });
        await res.body?.cancel();
        if (res.status === 404) break;
        expect(i, "the rollout's sandbox is still on the host").toBeLessThan(300);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    } finally {
      await stack.edge.stop();
      await network.close();
    }
  }, 300_000);
});
