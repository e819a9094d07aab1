/**
 * An org's agent quota through the task API: tasks at once and sandbox seconds a day, as `AGENT_LIMITS`
 * sets them for the development org's plan, refused with 429 and the limit's name, and given back
 * when a task ends.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Task } from "../../protocol/agents/task.js";
import { rawCall, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { savedLocalEdge } from "../support/local-edge.js";

let stack: AgentStack;
let key: string;
beforeAll(async () => {
  stack = await startAgentStack({
    vars: { AGENT_LIMITS: JSON.stringify({ business: { concurrentTasks: 2, dailySandboxSeconds: 100 } }) },
  });
  key = savedLocalEdge(stack.edge).apiKey;
});
afterAll(async () => {
  await stack?.edge.stop();
});

const api = (method: string, path: string, body?: unknown) => rawCall(stack.edge, key, method, path, body);

const create = (sandboxSeconds: number) =>
  api("POST", "/v1/agents/tasks", { prompt: "x (agent task fixture none)", limits: { sandboxSeconds } });

describe("an org's agent quota", () => {
  it("refuses a task past the tasks at once, until one ends", async () => {
    const a = Task.parse((await create(10)).json);
    Task.parse((await create(10)).json);
    const refused = await create(10);
    expect(refused.status).toBe(429);
    expect(refused.json).toMatchObject({ code: "rate_limited", limit: "agent-concurrency" });
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    await api("POST", `/v1/agents/tasks/${a.id}/cancel`);
    expect((await create(10)).status).toBe(201);
  });

  it("refuses a task whose sandbox budget is more than the day has left, and takes back what ended tasks left", async () => {
    const cancelAll = async () => {
      const list = (await api("GET", "/v1/agents/tasks")).json as { data: Task[] };
      for (const task of list.data) await api("POST", `/v1/agents/tasks/${task.id}/cancel`);
    };
    // The tasks above were cancelled having run nothing: none of their reservations is still counted.
    await cancelAll();
    const big = Task.parse((await create(90)).json);
    const tooMuch = await create(20);
    expect(tooMuch.status).toBe(429);
    expect(tooMuch.json).toMatchObject({ code: "rate_limited", limit: "agent-sandbox-seconds" });
    await api("POST", `/v1/agents/tasks/${big.id}/cancel`);
    expect((await create(20)).status).toBe(201);
  });
});
