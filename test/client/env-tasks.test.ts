/**
 * The repository's Harbor task set (test/fixtures/env-tasks) and its scripted policy, as data: every
 * task is one the sandboxes take, and every script plays its task with edits that apply to the
 * task's starting tree. Whether the plays earn the rewards they should is test/sandboxes/env-task-set.test.ts.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { isHeldOut } from "../../eval/packages.js";
import { AgentScriptsBody, loadAgentScripts, type AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import { checkTaskDir, type CheckedTask } from "../../client/envs/task-archive.js";
import { findTaskDirs } from "../../client/envs/task-set.js";

const SET = join(import.meta.dirname, "../fixtures/env-tasks");
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

type Turns = AgentScript["turns"];
type Tree = Map<string, string>;

/** Plays a script's file tools over a tree as the sandbox runs them; throws where the sandbox would refuse. */
function play(start: Tree, turns: Turns): { tree: Tree; finished: boolean } {
  const tree = new Map(start);
  let finished = false;
  for (const turn of turns)
    for (const call of turn.toolCalls ?? []) {
      const a = call.arguments as Record<string, string>;
      if (call.name === "create_file") {
        if (tree.has(a.path!)) throw new Error(`create_file ${a.path}: exists`);
        tree.set(a.path!, a.content!);
      } else if (call.name === "edit_file") {
        const file = tree.get(a.path!);
        if (file === undefined) throw new Error(`edit_file ${a.path}: no such file`);
        const found = file.split(a.oldText!).length - 1;
        if (found !== 1) throw new Error(`edit_file ${a.path}: oldText occurs ${found} times`);
        tree.set(
          a.path!,
          file.replace(a.oldText!, () => a.newText!),
        );
      } else if (call.name === "delete_file") {
        if (!tree.delete(a.path!)) throw new Error(`delete_file ${a.path}: no such file`);
      } else if (call.name === "read_file") {
        if (!tree.has(a.path!)) throw new Error(`read_file ${a.path}: no such file`);
      } else if (call.name === "finish") finished = true;
      else if (call.name !== "run_terminal") throw new Error(`unexpected tool ${call.name}`);
    }
  return { tree, finished };
}

const same = (a: Tree, b: Tree) => a.size === b.size && [...a].every(([k, v]) => b.get(k) === v);

describe("the env task set", () => {
  const tasks = new Map<string, CheckedTask>();
  let scripts: AgentScript[] = [];

  beforeAll(async () => {
    for (const { name, dir } of await findTaskDirs(SET)) tasks.set(name, await checkTaskDir(dir));
    scripts = AgentScriptsBody.parse(JSON.parse(readFileSync(join(SET, "scripts.json"), "utf8"))).scripts;
  });

  it("has 25 tasks, each one the sandboxes take as written, with a reference solution and its tree at /workspace", () => {
    expect(tasks.size).toBe(25);
    for (const [name, t] of tasks) {
      expect(t.skipped, name).toEqual([]);
      expect(t.task.settings.workdir, name).toBe("/workspace");
      expect(t.task.solution?.has("solve.sh"), name).toBe(true);
      expect(t.task.startingTree.size, name).toBeGreaterThan(0);
      // The verifier's checks and the expected values are not in the agent's tree.
      for (const path of t.task.startingTree.keys()) expect(path, name).not.toMatch(/^tests\/|check\.(js|py|sh)$/);
      const testSh = text(t.task.tests.get("test.sh")!.bytes);
      expect(testSh, name).toContain("cd /workspace");
      // Only the verifier writes the reward, after the agent's code has run.
      expect(testSh, name).toContain("rm -f /logs/verifier/reward.txt /logs/verifier/reward.json");
    }
  });

  it("mixes languages, and at least three tasks report several reward components", () => {
    const runners = [...tasks.values()].map((t) => text(t.task.tests.get("test.sh")!.bytes));
    expect(runners.filter((s) => s.includes("node /tests/check.js")).length).toBeGreaterThanOrEqual(15);
    expect(runners.filter((s) => s.includes("python3 /tests/check.py")).length).toBeGreaterThanOrEqual(3);
    expect(runners.filter((s) => s.includes("bash /tests/check.sh")).length).toBeGreaterThanOrEqual(3);
    expect(runners.filter((s) => />\/logs\/verifier\/reward\.json/.test(s)).length).toBeGreaterThanOrEqual(3);
  });

  it("uses no package at all (the sandbox has no network), so none of the held-out ones", () => {
    const imported = /(?:require\(|from |import\()\s*["']([^"']+)["']|^\s*(?:import|from)\s+([A-Za-z_][\w.]*)/gm;
    for (const [name, t] of tasks) {
      const files = [...t.files].filter(([p]) => /\.(js|mjs|py)$/.test(p));
      for (const [path, bytes] of files)
        for (const m of text(bytes).matchAll(imported)) {
          const spec = (m[1] ?? m[2])!;
          expect(isHeldOut(spec), `${name}/${path}: ${spec}`).toBe(false);
          const local =
            spec.startsWith("node:") ||
            spec.startsWith(".") ||
            spec.startsWith("/workspace/") ||
            /^(sys|os|csv|signal|tempfile|importlib|mathx|textkit|shop|report)\b/.test(spec);
          expect(local, `${name}/${path} imports ${spec}`).toBe(true);
        }
    }
  });

  it("has one script per task, each matching that task's instruction alone", () => {
    expect(scripts.map((s) => s.name).sort()).toEqual([...tasks.keys()].map((n) => `env-${n}`).sort());
    const fixtureScripts = loadAgentScripts(join(import.meta.dirname, "../../gpu-backends/simulator/agent-scripts"));
    for (const script of scripts) {
      const matching = [...tasks].filter(([, t]) => t.task.instruction.includes(script.match)).map(([n]) => n);
      expect(matching, script.name).toEqual([script.name.replace(/^env-/, "")]);
      for (const other of [...scripts, ...fixtureScripts])
        if (other !== script) expect(script.match.includes(other.match), `${script.name} vs ${other.name}`).toBe(false);
    }
  });

  it("plays each task's turns to a finish that changes its tree, and offers 2 to 4 variants of which some do not solve it", () => {
    for (const script of scripts) {
      const t = tasks.get(script.name.replace(/^env-/, ""))!;
      const start: Tree = new Map([...t.task.startingTree].map(([p, f]) => [p, text(f.bytes)]));
      const solved = play(start, script.turns);
      expect(solved.finished, script.name).toBe(true);
      expect(same(solved.tree, start), script.name).toBe(false);
      const variants = script.variants ?? [];
      expect(variants.length, script.name).toBeGreaterThanOrEqual(2);
      expect(variants.length, script.name).toBeLessThanOrEqual(4);
      const ends = variants.map((v) => play(start, v));
      for (const end of ends) expect(end.finished, script.name).toBe(true);
      expect(
        ends.some((e) => same(e.tree, solved.tree)),
        `${script.name}: a variant solves it`,
      ).toBe(true);
      expect(
        ends.some((e) => !same(e.tree, solved.tree)),
        `${script.name}: a variant does not`,
      ).toBe(true);
    }
  });

  it("lists the set's files and nothing else", () => {
    const entries = readdirSync(SET).sort();
    expect(entries).toEqual([...[...tasks.keys()], "scripts.json"].sort());
  });
});
