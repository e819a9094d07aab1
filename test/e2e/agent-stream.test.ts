/**
 * One task's event stream, from the real edge, cut at random points more than a hundred times while
 * the task runs and after it ends: the SDK resumes each time with `Last-Event-ID`, and what it
 * yields is the task's log exactly, every event once, in order.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rng } from "../../bench/code-fixture.js";
import { Sextant } from "../../client/sdk/client.js";
import { Task, type TaskEvent } from "../../protocol/agents/task.js";
import { filesOf, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { ROOT, savedLocalEdge } from "../support/local-edge.js";

let stack: AgentStack;
beforeAll(async () => {
  stack = await startAgentStack();
});
afterAll(async () => {
  await stack?.edge.stop();
});

/** `fetch`, with every event stream's body broken off after a random number of bytes. */
function cuttingFetch(random: () => number, cuts: { count: number; resumedFrom: string[] }): typeof fetch {
  return async (input, init) => {
    const response = await fetch(input, init);
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    if (!url.includes("/events") || !response.body) return response;
    cuts.resumedFrom.push(new Headers(init?.headers).get("Last-Event-ID") ?? "none");
    const limit = 200 + Math.floor(random() * 1500);
    const reader = response.body.getReader();
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) return controller.close();
        if (sent + value.byteLength > limit) {
          controller.enqueue(value.subarray(0, Math.max(0, limit - sent)));
          cuts.count++;
          await reader.cancel();
          controller.error(new TypeError("terminated: the connection was cut"));
          return;
        }
        sent += value.byteLength;
        controller.enqueue(value);
      },
      cancel: () => reader.cancel(),
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
}

describe("a task's event stream cut at random", () => {
  it("yields every event exactly once, in order, across more than a hundred cuts", async () => {
    const key = savedLocalEdge(stack.edge).apiKey;
    const cuts = { count: 0, resumedFrom: [] as string[] };
    const flaky = new Sextant({
      apiKey: key,
      baseURL: stack.edge.baseURL,
      maxRetries: 0,
      fetch: cuttingFetch(rng(100).next, cuts),
    });
    const clean = new Sextant({ apiKey: key, baseURL: stack.edge.baseURL, maxRetries: 0 });
    const task = await clean.agents.create({ prompt: "Take nine steps (agent task fixture ten-turns)." });
    await clean.agents.uploadFiles(task.id, filesOf(`${ROOT}/test/fixtures/agent-durability/repo`));
    await clean.agents.start(task.id);

    const seen: TaskEvent[] = [];
    // Followed from the start, while the task runs; then read again from the start until the cuts
    // pass a hundred, each pass over the whole log.
    while (cuts.count < 100) {
      let previous = 0;
      for await (const event of flaky.agents.events(task.id, { maxReconnects: 1000, reconnectDelayMs: 1 })) {
        expect(event.id, "one event after another, never one twice or one skipped").toBe(previous + 1);
        previous = event.id;
        seen.push(event);
      }
      const final = Task.parse(await clean.agents.get(task.id));
      expect(final.status).toBe("finished");
      expect(previous).toBe(final.lastEventId);
    }
    // Every pass yielded the log as the edge holds it.
    const whole: TaskEvent[] = [];
    for await (const event of clean.agents.events(task.id)) whole.push(event);
    expect(seen.length % whole.length).toBe(0);
    for (let i = 0; i < seen.length; i++) expect(seen[i]).toEqual(whole[i % whole.length]);
    expect(cuts.count).toBeGreaterThanOrEqual(100);
    // Each reconnection asked for the events after the last one it had.
    expect(cuts.resumedFrom.filter((id) => id !== "none" && id !== "0").length).toBeGreaterThan(50);
  }, 300_000);
});
