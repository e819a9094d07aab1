/**
 * A ten-step environment session interrupted at every step, once by stopping the whole edge while
 * the step's request is in flight and starting it again on the same state, once by restarting the
 * session's object: the client sends the same index again (as a client whose answer was lost does),
 * and every step's command, which appends its index to steps.log, ran once. The task's tests score
 * the log 1 only when it holds each index once, in order; the diff shows it too.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  rawCall,
  startAgentStack,
  startTestSandboxHost,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { appendStep, envClient, pushTaskSet, type EnvClient } from "../support/env-session.js";
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
async function stepUntilAnswered(client: () => EnvClient, id: string, index: number) {
  for (let attempt = 0; attempt < 20; attempt++) {
    const r = await client()
      .call("POST", `/v1/envs/sessions/${id}/step`, appendStep(index))
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
        // The step is sent, and the edge stopped while it may be anywhere in it.
        const inFlight = client()
          .call("POST", `/v1/envs/sessions/${id}/step`, appendStep(index))
          .catch(() => null);
        await stack.edge.stop();
        await inFlight;
        stack = await startAgentStack({ host, port, persistTo, configDir });
        const answer = await stepUntilAnswered(client, id, index);
        expect(answer.index).toBe(index);
        expect(JSON.parse(answer.results[0].content).exitCode).toBe(0);
        // And once more: the same index answers the same record.
        expect(await stepUntilAnswered(client, id, index)).toEqual(answer);
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
