/**
 * Every task of the repository's task set (test/fixtures/env-tasks), run in a sandbox host of the
 * test's own: packed as `sextant envs push` packs it, its reference solution scores 1 and doing
 * nothing scores 0, and its scripted policy (scripts.json), played call by call through the host's
 * tools, earns 1 with its `turns` and less with a variant that edits otherwise, so a group of
 * rollouts of it has something to learn from.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { SolveResponse, VerifyResponse } from "../../protocol/agents/sandbox.js";
import { AgentScriptsBody, type AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import { packTaskDir } from "../../client/envs/task-archive.js";
import { findTaskDirs } from "../../client/envs/task-set.js";
import { callId, isolationTestsRun, TOKEN, useHost, type TestHost } from "./harness.js";

const SET = join(import.meta.dirname, "../fixtures/env-tasks");
const SCRIPTS = AgentScriptsBody.parse(JSON.parse(readFileSync(join(SET, "scripts.json"), "utf8"))).scripts;
/** Tasks checked at once: each runs node or python3 a few times, on a machine that may be busy. */
const AT_ONCE = 3;
const WRITES = new Set(["create_file", "edit_file", "delete_file"]);

let sandboxes = 0;

async function putArchive(host: TestHost, dir: string): Promise<string> {
  const { archive, sha256 } = await packTaskDir(dir);
  const response = await fetch(`${host.url}/v1/archives/${sha256}`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/gzip" },
    body: archive as Uint8Array<ArrayBuffer>,
  });
  expect(response.status, await response.clone().text()).toBe(201);
  return sha256;
}

async function sandboxOf(host: TestHost, sha256: string): Promise<string> {
  const id = `env-set-${++sandboxes}`;
  await host.create(id, { task: { archive: sha256 } });
  return id;
}

async function verify(host: TestHost, id: string): Promise<VerifyResponse> {
  const r = await host.request("POST", `/v1/sandboxes/${id}/verify/${callId()}`, {});
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return VerifyResponse.parse(r.body);
}

/** Plays a script's tool calls through the host's tools, up to its finish; a refused call fails the test. */
async function play(host: TestHost, id: string, turns: AgentScript["turns"]): Promise<void> {
  for (const turn of turns)
    for (const call of turn.toolCalls ?? []) {
      if (call.name === "finish") return;
      const answer = await host.call(id, callId(), call.name, call.arguments);
      expect(answer.ok, `${call.name}: ${JSON.stringify(answer)}`).toBe(true);
    }
}

interface Outcome {
  name: string;
  noop: VerifyResponse;
  solved: VerifyResponse;
  turns: number;
  failing: number;
}

async function runTask(host: TestHost, name: string, dir: string): Promise<Outcome> {
  const sha256 = await putArchive(host, dir);
  const script = SCRIPTS.find((s) => s.name === `env-${name}`);
  if (!script) throw new Error(`no script for ${name}`);

  const noop = await verify(host, await sandboxOf(host, sha256));

  const solving = await sandboxOf(host, sha256);
  const solve = await host.request("POST", `/v1/sandboxes/${solving}/solve/${callId()}`, {});
  expect(solve.status, JSON.stringify(solve.body)).toBe(200);
  expect(SolveResponse.parse(solve.body).exitCode, `${name}: ${solve.body.log}`).toBe(0);
  const solved = await verify(host, solving);

  const rewardOf = async (turns: AgentScript["turns"]) => {
    const id = await sandboxOf(host, sha256);
    await play(host, id, turns);
    return (await verify(host, id)).reward;
  };
  const turns = await rewardOf(script.turns);
  // One variant whose writes differ from the solving ones is played for its reward
  // (test/client/env-tasks.test.ts checks every variant's writes against the starting tree).
  const writes = (t: AgentScript["turns"]) =>
    JSON.stringify(t.flatMap((turn) => (turn.toolCalls ?? []).filter((c) => WRITES.has(c.name))));
  const other = (script.variants ?? []).find((v) => writes(v) !== writes(script.turns));
  if (!other) throw new Error(`${name}: no variant that edits otherwise`);
  return { name, noop, solved, turns, failing: await rewardOf(other) };
}

describe.runIf(isolationTestsRun)("the env task set in a sandbox host", () => {
  const host = useHost({ driver: "bubblewrap" });

  it("scores 1 for every reference solution and for every script's turns, 0 for doing nothing, and less for a variant that edits otherwise", async () => {
    const tasks = await findTaskDirs(SET);
    expect(tasks).toHaveLength(25);
    const outcomes: Outcome[] = [];
    for (let at = 0; at < tasks.length; at += AT_ONCE)
      outcomes.push(...(await Promise.all(tasks.slice(at, at + AT_ONCE).map((t) => runTask(host, t.name, t.dir)))));

    for (const o of outcomes) {
      expect(o.solved.reward, `${o.name} solved: ${o.solved.log}`).toBe(1);
      expect(o.noop.reward, `${o.name} untouched: ${o.noop.log}`).toBe(0);
      expect(o.turns, `${o.name}: the script's turns`).toBe(1);
      expect(o.failing, `${o.name}: the variant that edits otherwise`).toBeLessThan(1);
    }
    // The components of reward.json reach the verifier's answer.
    const multi = outcomes.filter((o) => "lint" in o.solved.components);
    expect(multi.map((o) => o.name).sort()).toEqual(["config-merge", "py-palindrome", "rename-getusr", "slugify"]);
    for (const o of multi) {
      expect(o.solved.components, o.name).toEqual({ reward: 1, tests: 1, lint: 1 });
      expect(Object.keys(o.noop.components).sort(), o.name).toEqual(["lint", "reward", "tests"]);
    }
  }, 600_000);
});
