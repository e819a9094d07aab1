/**
 * A hostile agent task and another org's benign one, through `npm start`'s edge and its sandbox host
 * (bubblewrap): the hostile task makes FIFOs and reads them with the file tools in one turn, links
 * out of its tree and writes through the link, rewrites a big file, and runs
 * Node's `fetch`. The other org's task, started meanwhile, finishes with every call answered; the
 * hostile task's calls are refused, not hung; its diff is the rewrite; nothing lands outside its tree.
 */
import { existsSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Sextant } from "../../client/sdk/index.js";
import type { AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import type { TaskEvent } from "../../protocol/agents/task.js";
import {
  makeOrg,
  setAgentScripts,
  startAgentStack,
  startTask,
  taskEnded,
  taskEvents,
  type AgentStack,
} from "../support/agent-stack.js";

const MARK = `sextant-escape-${process.pid}`;
const call = (name: string, args: Record<string, unknown>) => ({ name, arguments: args });

const HOSTILE: AgentScript = {
  name: "hostile",
  match: "(agent hostile task)",
  turns: [
    {
      toolCalls: [
        call("run_terminal", {
          command: "mkfifo p1 p2 p3 p4 p5 p6; ln -s /etc out; seq 1 40000 | sed 's/^/new /' > big.lock; echo made",
        }),
      ],
    },
    {
      toolCalls: [
        ...["p1", "p2", "p3", "p4", "p5"].map((path) => call("read_file", { path })),
        call("edit_file", { path: "p6", oldText: "a", newText: "b" }),
        call("grep", { pattern: "new 1$" }),
        call("read_file", { path: "out/passwd" }),
        call("create_file", { path: `out/${MARK}`, content: "escaped" }),
      ],
    },
    {
      toolCalls: [
        call("run_terminal", {
          command: `node -e "fetch('http://127.0.0.1:8/').then(() => console.log('fetched'), e => console.log('fetch failed', e.cause?.code ?? e.message))"`,
        }),
      ],
    },
    { toolCalls: [call("finish", { summary: "done" })] },
  ],
};

const BENIGN: AgentScript = {
  name: "benign",
  match: "(agent benign task)",
  turns: [
    { toolCalls: [call("create_file", { path: "notes.txt", content: "benign\n" })] },
    { toolCalls: [call("read_file", { path: "notes.txt" }), call("run_terminal", { command: "cat notes.txt" })] },
    { toolCalls: [call("finish", { summary: "done" })] },
  ],
};

let stack: AgentStack;
let other: Sextant;

beforeAll(async () => {
  stack = await startAgentStack();
  await setAgentScripts(stack.edge, [HOSTILE, BENIGN]);
  other = (await makeOrg(stack.edge, "Benign org")).sdk;
});
afterAll(async () => {
  await stack?.edge.stop();
});

const results = (events: TaskEvent[], tool: string) =>
  events.filter((e) => e.type === "tool.result" && e.data?.tool === tool).map((e) => e.data!);

describe("a hostile agent task beside another org's", () => {
  it("holds the hostile task's calls to its tree and lets the other org's task finish", async () => {
    const old = Buffer.from(Array.from({ length: 40_000 }, (_, i) => `old ${i + 1}`).join("\n") + "\n");
    const hostile = await startTask(stack.sdk, "Go (agent hostile task)", [
      { path: "big.lock", content: old.toString("base64") },
    ]);
    const benign = await startTask(other, "Go (agent benign task)", [
      { path: "README.md", content: Buffer.from("# benign\n").toString("base64") },
    ]);
    const [benignTask, hostileTask] = await Promise.all([taskEnded(other, benign), taskEnded(stack.sdk, hostile)]);

    expect(benignTask).toMatchObject({ status: "finished", endReason: "finished" });
    const benignEvents = await taskEvents(other, benign);
    for (const tool of ["create_file", "read_file", "run_terminal"])
      for (const r of results(benignEvents, tool)) expect(r, tool).toMatchObject({ ok: true });

    expect(hostileTask.status).toBe("finished");
    const events = await taskEvents(stack.sdk, hostile);
    const reads = results(events, "read_file");
    expect(reads.filter((r) => (r.error as { code?: string })?.code === "not_regular")).toHaveLength(5);
    expect(reads.filter((r) => (r.error as { code?: string })?.code === "outside_tree")).toHaveLength(1);
    expect(results(events, "edit_file")[0]).toMatchObject({ ok: false, error: { code: "not_regular" } });
    expect(results(events, "create_file")[0]).toMatchObject({ ok: false, error: { code: "outside_tree" } });
    expect(results(events, "grep")[0]).toMatchObject({ ok: true });
    expect(existsSync(`/etc/${MARK}`)).toBe(false);

    const [, fetched] = results(events, "run_terminal").map((r) => (r.result as { stdout: string }).stdout);
    // fetch runs (no WebAssembly out of memory) and finds no network in the sandbox.
    expect(fetched).toMatch(/^fetch failed (ECONNREFUSED|ENETUNREACH|EHOSTUNREACH)\n$/);

    const diff = await stack.sdk.agents.diff(hostile);
    expect(diff.diff).toContain("+new 40000");
    expect(diff.diff).toContain("-old 40000");
  }, 300_000);
});
