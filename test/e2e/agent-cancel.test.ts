/**
 * A cancel stands, however the task's turns interleave with it: many tasks taking turns at once are
 * cancelled mid-run, and each answers `cancelled`, stays cancelled, takes no turn after it and ends
 * once. (A turn that saved the state it had read before a cancel landed once undid the cancel.)
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  setAgentScripts,
  startAgentStack,
  startTask,
  taskEnded,
  taskEvents,
  type AgentStack,
} from "../support/agent-stack.js";

const TASKS = 16;
const README = [{ path: "README.md", content: Buffer.from("# Cancel\n").toString("base64") }];

let stack: AgentStack;
beforeAll(async () => {
  stack = await startAgentStack();
  await setAgentScripts(stack.edge, [
    {
      name: "endless-reads",
      match: "(cancel me)",
      turns: Array.from({ length: 400 }, () => ({
        toolCalls: [{ name: "read_file", arguments: { path: "README.md" } }],
      })),
    },
  ]);
});
afterAll(async () => {
  await stack?.edge.stop();
});

describe("cancelling agent tasks mid-run", () => {
  it(`stands for each of ${TASKS} tasks taking turns at once`, async () => {
    const { sdk } = stack;
    const limits = { turns: 500, tokens: 50_000_000, wallSeconds: 600 };
    const ids = await Promise.all(
      Array.from({ length: TASKS }, () => startTask(sdk, "Go (cancel me)", README, limits)),
    );
    // Every task is mid-run, a few turns in, before any is cancelled.
    await Promise.all(ids.map((id) => taskEnded(sdk, id, (task) => task.usage.turns >= 3)));
    const answers = await Promise.all(ids.map((id) => sdk.agents.cancel(id)));
    expect(answers.map((t) => t.status)).toEqual(ids.map(() => "cancelled"));

    for (const [i, id] of ids.entries()) {
      // The event log is read to its end (the stream closes once the task has ended); a turn
      // after the cancel would show as events after its end, or as a status other than cancelled.
      const events = await taskEvents(sdk, id);
      const ended = events.filter((e) => e.type === "task.ended");
      expect(ended, id).toHaveLength(1);
      expect(ended[0]!.data?.reason, id).toBe("cancelled");
      expect(events.at(-1)?.type, id).toBe("task.ended");
      const task = await sdk.agents.get(id);
      expect(task.status, id).toBe("cancelled");
      expect(task.usage.turns, id).toBe(answers[i]!.usage.turns);
    }
  });
});
