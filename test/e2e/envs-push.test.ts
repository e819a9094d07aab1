/**
 * `sextant envs push` end to end, through `npm start`'s edge and a sandbox host of the test's own:
 * the repository's task set (with a refused task and a symlink added) goes up as one set, the map
 * it writes names every task's index and hash as the edge lists them, the refused task is named
 * with its reason, and a pushed task opens as a session whose reference edit the host scores 1.
 */
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentScriptsBody } from "../../gpu-backends/simulator/agent-script.js";
import { TASKSET_FILE } from "../../client/envs/task-archive.js";
import {
  startAgentStack,
  startTestSandboxHost,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { call, envClient, type EnvClient } from "../support/env-session.js";
import { sextantAsync } from "../support/local-edge.js";

const FIXTURES = join(import.meta.dirname, "../fixtures/env-tasks");

let host: SandboxHostHandle;
let stack: AgentStack;
let client: EnvClient;
let set: string;
/** The CLI in a child process, waited on without blocking this one: the sandbox host answers from here. */
const cli = (args: string[]) => sextantAsync(args, stack.env);

beforeAll(async () => {
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host });
  client = envClient(stack);
  set = mkdtempSync(join(tmpdir(), "sextant-envs-push-"));
  cpSync(FIXTURES, set, { recursive: true });
  rmSync(join(set, "scripts.json"));
  // A task the sandboxes cannot run, and a link that is no part of any archive.
  cpSync(join(FIXTURES, "median-even"), join(set, "zz-builds-an-image"), { recursive: true });
  writeFileSync(join(set, "zz-builds-an-image/environment/Dockerfile"), "FROM node:20\nRUN npm ci\n");
  symlinkSync("/etc/passwd", join(set, "roman/environment/passwd"));
  mkdirSync(join(set, "notes"));
}, 180_000);
afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
  if (set) rmSync(set, { recursive: true, force: true });
});

interface Pushed {
  id: string;
  tasks: Record<string, { index: number; sha256: string; bytes: number }>;
  uploaded: number;
  present: number;
  map: string;
  ready: { name: string; skipped: { path: string; reason: string }[] }[];
  refused: { name: string; reason: string }[];
}

describe("sextant envs push", () => {
  let pushed: Pushed;

  it("pushes every task the sandboxes take as one set, names the refused one, and writes the map", async () => {
    const run = await cli(["--json", "envs", "push", set]);
    expect(run.code, run.stderr).toBe(0);
    pushed = JSON.parse(run.stdout) as Pushed;
    const names = Object.keys(pushed.tasks);
    expect(names).toHaveLength(25);
    expect(names).toEqual([...names].sort());
    expect(names.map((n) => pushed.tasks[n]!.index)).toEqual([...Array(25).keys()]);
    expect(pushed.uploaded).toBe(25);
    expect(pushed.refused).toEqual([
      {
        name: "zz-builds-an-image",
        reason: expect.stringMatching(/^environment\/Dockerfile:2: .*do not build images/),
        skipped: [],
      },
    ]);
    expect(pushed.ready.find((t) => t.name === "roman")!.skipped).toEqual([
      { path: "environment/passwd", reason: "symlink" },
    ]);
    expect(pushed.map).toBe(join(set, TASKSET_FILE));
    const map = JSON.parse(readFileSync(pushed.map, "utf8"));
    expect(map).toMatchObject({ id: pushed.id, baseUrl: stack.edge.baseURL, tasks: pushed.tasks });
  });

  it("is listed by the edge with the map's hashes at the map's indexes, and honoured settings", async () => {
    const listed = await stack.sdk.envs.getTaskSet(pushed.id);
    expect(listed.tasks).toHaveLength(25);
    for (const [name, t] of Object.entries(pushed.tasks)) {
      expect(listed.tasks[t.index], name).toMatchObject({ index: t.index, sha256: t.sha256, bytes: t.bytes });
      expect(listed.tasks[t.index]!.settings, name).toMatchObject({ verifierTimeoutSec: 120, agentTimeoutSec: 300 });
    }
  });

  it("makes the same archives again for the same files, sends none of them, and keeps the map but for the set's id", async () => {
    const run = await cli(["--json", "envs", "push", set]);
    expect(run.code, run.stderr).toBe(0);
    const again = JSON.parse(run.stdout) as Pushed;
    expect(again.id).not.toBe(pushed.id);
    expect(again.tasks).toEqual(pushed.tasks);
    expect({ uploaded: again.uploaded, present: again.present }).toEqual({ uploaded: 0, present: 25 });
  });

  it("prints a line per refusal and per skip in human output", async () => {
    const run = await cli(["envs", "push", "--dry-run", set]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain("refused zz-builds-an-image: environment/Dockerfile:2:");
    expect(run.stdout).toContain("roman: skipped environment/passwd (symlink)");
    expect(run.stdout).toContain("25 tasks ready, 1 refused; nothing uploaded (--dry-run).");
  });

  it("gives a pushed task as a session by its index, which the script's reference edit solves", async () => {
    const { scripts } = AgentScriptsBody.parse(JSON.parse(readFileSync(join(FIXTURES, "scripts.json"), "utf8")));
    const script = scripts.find((s) => s.name === "env-median-even")!;
    const opened = await client.call("POST", "/v1/envs/sessions", {
      taskset: pushed.id,
      task: pushed.tasks["median-even"]!.index,
    });
    expect(opened.status, JSON.stringify(opened.json)).toBe(201);
    expect(JSON.stringify(opened.json.observation.messages)).toContain(script.match);
    const base = `/v1/envs/sessions/${opened.json.id}`;
    const edits = script.turns.flatMap((t) => (t.toolCalls ?? []).filter((c) => c.name === "edit_file"));
    const step = await client.call("POST", `${base}/step`, {
      index: 1,
      tool_calls: edits.map((c, i) => call(`e${i}`, c.name, c.arguments)),
    });
    expect(step.status, JSON.stringify(step.json)).toBe(200);
    const verified = await client.call("POST", `${base}/verify`);
    expect(verified.status, JSON.stringify(verified.json)).toBe(200);
    expect(verified.json.reward).toBe(1);
  });

  it("fails, naming every refusal, when no task of the set can go", async () => {
    const only = mkdtempSync(join(tmpdir(), "sextant-envs-refused-"));
    try {
      cpSync(join(set, "zz-builds-an-image"), join(only, "builds"), { recursive: true });
      const run = await cli(["envs", "push", only]);
      expect(run.code).toBe(1);
      expect(run.stdout).toContain("refused builds: environment/Dockerfile:2:");
      expect(run.stderr).toContain("was refused");
    } finally {
      rmSync(only, { recursive: true, force: true });
    }
  });
});
