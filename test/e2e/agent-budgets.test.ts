/**
 * Two hundred agent tasks with random scripts (reads, writes, commands that print a lot or take a
 * while) under random budgets: none passes any budget, and each ends for a reason its usage shows.
 * The scripts are set on the simulated backends `npm start` runs, through the simulator's control API.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rng } from "../../bench/code-fixture.js";
import type { AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import type { Task, TaskEvent, TaskLimits } from "../../protocol/agents/task.js";
import {
  setAgentScripts,
  startAgentStack,
  startTask,
  taskEnded,
  taskEvents,
  type AgentStack,
} from "../support/agent-stack.js";

const RUNS = 200;
const AT_ONCE = 8;

interface Run {
  script: AgentScript;
  limits: Partial<TaskLimits>;
}

function randomRun(i: number, random: () => number): Run {
  const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  const call = (turn: number, j: number): { name: string; arguments: Record<string, unknown> } => {
    switch (int(0, 5)) {
      case 0:
        return { name: "read_file", arguments: { path: "README.md" } };
      case 1:
        return { name: "run_terminal", arguments: { command: `head -c ${int(10, 40_000)} /dev/zero | tr '\\0' a` } };
      case 2:
        return { name: "run_terminal", arguments: { command: `sleep 0.${int(1, 6)}` } };
      case 4:
        return { name: "run_terminal", arguments: { command: `sleep ${int(1, 3)}` } };
      case 3:
        return { name: "create_file", arguments: { path: `f-${turn}-${j}.txt`, content: "x".repeat(int(1, 2000)) } };
      default:
        return { name: "grep", arguments: { pattern: "a" } };
    }
  };
  const turns: AgentScript["turns"] = Array.from({ length: int(1, 8) }, (_, turn) => ({
    toolCalls: Array.from({ length: int(1, 3) }, (_, j) => call(turn, j)),
  }));
  if (random() < 0.7) turns.push({ toolCalls: [{ name: "finish", arguments: { summary: "done" } }] });
  return {
    script: { name: `budget-${i}`, match: `(agent budget run ${i})`, turns },
    limits: {
      turns: int(1, 10),
      tokens: int(3000, 40_000),
      wallSeconds: int(5, 30),
      sandboxSeconds: int(1, 4),
      outputBytes: int(1024, 20_000),
    },
  };
}

let stack: AgentStack;
// Seeded: the runs are the same every time.
const random = rng(27).next;
const runs = Array.from({ length: RUNS }, (_, i) => randomRun(i, random));

beforeAll(async () => {
  stack = await startAgentStack();
  await setAgentScripts(
    stack.edge,
    runs.map((r) => r.script),
  );
});
afterAll(async () => {
  await stack?.edge.stop();
});

const README = [{ path: "README.md", content: Buffer.from("# Budgets\n\nA line with a in it.\n").toString("base64") }];

async function runTask(i: number): Promise<{ task: Task; events: TaskEvent[] }> {
  const id = await startTask(stack.sdk, `Go (agent budget run ${i})`, README, runs[i]!.limits);
  const task = await taskEnded(stack.sdk, id);
  return { task, events: await taskEvents(stack.sdk, id) };
}

describe("agent task budgets", () => {
  it(`are never passed, over ${RUNS} random runs`, async () => {
    const reasons = new Map<string, number>();
    // AT_ONCE runs at a time, each runner taking the next run as soon as its last one ends.
    const done: Awaited<ReturnType<typeof runTask>>[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: AT_ONCE }, async () => {
        while (next < RUNS) {
          const i = next++;
          done[i] = await runTask(i);
        }
      }),
    );
    for (const [i, { task, events }] of done.entries()) {
      const where = `run ${i}: ${JSON.stringify({ limits: task.limits, usage: task.usage, end: task.endReason })}`;
      expect(["finished", "failed"], where).toContain(task.status);
      expect(task.usage.turns, where).toBeLessThanOrEqual(task.limits.turns);
      expect(task.usage.tokens, where).toBeLessThanOrEqual(task.limits.tokens);
      expect(task.usage.outputBytes, where).toBeLessThanOrEqual(task.limits.outputBytes);
      expect(task.usage.sandboxSeconds, where).toBeLessThanOrEqual(task.limits.sandboxSeconds);
      // The host's own measure of each command agrees: their sum is within the budget too.
      const commandMs = events
        .filter((e) => e.type === "tool.result" && e.data?.tool === "run_terminal" && e.data.ok)
        .reduce((sum, e) => sum + (e.data!.result as { durationMs: number }).durationMs, 0);
      expect(commandMs, where).toBeLessThanOrEqual(task.limits.sandboxSeconds * 1000);
      // A budget's end is named, and the usage shows it.
      const reason = task.endReason!;
      reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
      if (reason === "turns") expect(task.usage.turns, where).toBe(task.limits.turns);
      if (reason === "output_bytes") expect(task.usage.outputBytes, where).toBe(task.limits.outputBytes);
      expect(events.at(-1)?.type, where).toBe("task.ended");
      expect(events.at(-1)?.data?.reason, where).toBe(reason);
    }
    // The runs meet the budgets, not only the end of their scripts: most budgets end some run (which
    // ones end how many depends on the machine's pace, so no one of them is required).
    expect(reasons.get("finished") ?? 0).toBeGreaterThan(0);
    expect(
      [...reasons.keys()].filter((r) => r !== "finished").length,
      JSON.stringify([...reasons]),
    ).toBeGreaterThanOrEqual(3);
    console.log(`endings over ${RUNS} runs: ${JSON.stringify(Object.fromEntries(reasons))}`);
  }, 900_000);
});
