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
import {
  filesOf,
  rawCall,
  startAgentStack,
  startTask,
  startTestSandboxHost,
  taskEnded,
  taskEvents,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { ROOT, savedLocalEdge } from "../support/local-edge.js";

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

const start = (stack: AgentStack) => startTask(stack.sdk, PROMPT, filesOf(REPO));

/** Waits until turn `turn`'s calls all have results (or the task has ended). */
const turnDone = (stack: AgentStack, id: string, turn: number) =>
  taskEnded(
    stack.sdk,
    id,
    (task) => task.usage.turns > turn || (task.usage.turns === turn && task.usage.toolCalls >= 3 * turn),
  );

/** What a run left: its diff, and every result's outcome (each write and command said ok once). */
async function outcome(stack: AgentStack, id: string) {
  const task = await taskEnded(stack.sdk, id);
  expect(task.status).toBe("finished");
  expect(task.usage.turns).toBe(TURNS);
  const log = await taskEvents(stack.sdk, id);
  const results = log.filter((e) => e.type === "tool.result");
  expect(results.filter((e) => e.data?.ok !== true)).toEqual([]);
  // One result per call: a call re-sent after a restart is answered once, from the host's record.
  const callIds = results.map((e) => e.data!.callId as string);
  expect(new Set(callIds).size).toBe(callIds.length);
  expect(callIds).toHaveLength(3 * (TURNS - 1) + 1);
  return (await stack.sdk.agents.diff(id)).diff;
}

describe("a ten-turn task interrupted at every turn boundary", () => {
  let expected: string;

  it("runs uninterrupted, appending each turn's command once", async () => {
    const stack = await startAgentStack({ host });
    try {
      expected = await outcome(stack, await start(stack));
      expect(expected).toContain("+1\n+2\n+3\n+4\n+5\n+6\n+7\n+8\n+9\n");
      for (let i = 1; i < TURNS; i++) expect(expected).toContain(`+++ b/steps/step-${i}.txt`);
    } finally {
      await stack.edge.stop();
    }
  });

  it("ends with the same diff when the edge stops and starts again after every turn", async () => {
    const persistTo = mkdtempSync(join(tmpdir(), "sextant-state-"));
    const configDir = mkdtempSync(join(tmpdir(), "sextant-config-"));
    let stack = await startAgentStack({ host, persistTo, configDir });
    // Restarts keep the first start's port: the task's events and the CLI's saved edge name it.
    const port = Number(new URL(stack.edge.baseURL).port);
    try {
      const id = await start(stack);
      for (let turn = 1; turn < TURNS; turn++) {
        await turnDone(stack, id, turn);
        await stack.edge.stop();
        stack = await startAgentStack({ host, port, persistTo, configDir });
      }
      expect(await outcome(stack, id)).toBe(expected);
    } finally {
      await stack.edge.stop();
    }
    // Ten edge starts: on a machine whose cores are busy each can take several seconds.
  }, 360_000);

  it("ends with the same diff when the task's object restarts after every turn", async () => {
    const stack = await startAgentStack({ host });
    try {
      const admin = savedLocalEdge(stack.edge).adminSecret!;
      const id = await start(stack);
      for (let turn = 1; turn < TURNS; turn++) {
        await turnDone(stack, id, turn);
        expect((await rawCall(stack.edge, admin, "POST", `/admin/agents/tasks/${id}/restart`)).status).toBe(202);
      }
      expect(await outcome(stack, id)).toBe(expected);
    } finally {
      await stack.edge.stop();
    }
  });
});
