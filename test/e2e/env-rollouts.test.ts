/**
 * Rollout runs end to end through `npm start`'s edge and its sandbox host, with the simulator's
 * scripted agent model as the policy (a stand-in for a model server, speaking OpenAI's chat API):
 * three tasks × a group of four, each member seeded `seed + i` so each plays the script variant its
 * seed picks. Every member's reward is the one its variant earns from the task's own verifier, each
 * group's advantages are the hand-computed GRPO values, the stream resumes from Last-Event-ID, and
 * another org, bad bodies and unknown names are refused as problem documents.
 */
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";
import { createParser } from "eventsource-parser";
import { packTar } from "modern-tar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import { PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { RolloutEvent, RolloutRun, type GroupEnded, type RolloutEnded } from "../../protocol/envs/rollouts.js";
import { makeOrg, rawCall, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { savedLocalEdge, sextantAsync } from "../support/local-edge.js";

let stack: AgentStack;
let key: string;
let taskset: string;
let other: { key: string };
const shas: string[] = [];

/**
 * The tasks: write a word into answer.txt. `beta` scores with reward.json (the reward and two
 * components), the others with reward.txt.
 */
const TASKS = [
  { word: "alpha", json: false },
  { word: "beta", json: true },
  { word: "gamma", json: false },
];

const write = (word: string): AgentScript["turns"] => [
  { toolCalls: [{ name: "create_file", arguments: { path: "answer.txt", content: word } }] },
  { toolCalls: [{ name: "finish", arguments: { summary: `wrote ${word}` } }] },
];
const giveUp: AgentScript["turns"] = [{ toolCalls: [{ name: "finish", arguments: { summary: "nothing" } }] }];

/** Each task's script; the seed (mod 4) picks the variant. gamma has none: every seed plays `turns`. */
const SCRIPTS: AgentScript[] = [
  {
    name: "rollout-alpha",
    match: "(rollout task alpha)",
    turns: write("alpha"),
    variants: [write("alpha"), write("wrong"), write("alpha"), write("alpha")],
  },
  {
    name: "rollout-beta",
    match: "(rollout task beta)",
    turns: write("beta"),
    variants: [write("beta"), giveUp, write("betamax"), write("beta")],
  },
  { name: "rollout-gamma", match: "(rollout task gamma)", turns: write("gamma") },
];
/** The reward each task's member i earns (seeds 0..3): what its variant writes, as the verifier scores it. */
const EXPECTED_REWARDS = [
  [1, 0, 1, 1],
  [1, 0, 0, 1],
  [1, 1, 1, 1],
];
/** beta's components: `exact` (the reward) and `written` (answer.txt exists). */
const EXPECTED_BETA_COMPONENTS = [
  { reward: 1, exact: 1, written: 1 },
  { reward: 0, exact: 0, written: 0 },
  { reward: 0, exact: 0, written: 1 },
  { reward: 1, exact: 1, written: 1 },
];
/**
 * GRPO by hand. alpha [1,0,1,1]: mean 0.75, population std sqrt(0.1875) = 0.4330127, so
 * 0.25 / 0.4330137 = 0.5773489 and -0.75 / 0.4330137 = -1.7320468. beta [1,0,0,1]: mean 0.5, std 0.5,
 * ±0.5 / 0.500001 = ±0.999998. gamma: all equal, all 0.
 */
const EXPECTED_ADVANTAGES = [
  [0.5773489, -1.7320468, 0.5773489, 0.5773489],
  [0.999998, -0.999998, -0.999998, 0.999998],
  [0, 0, 0, 0],
];

function taskDir(word: string, json: boolean): string {
  const dir = mkdtempSync(join(tmpdir(), `sextant-rollout-${word}-`));
  mkdirSync(join(dir, "environment"));
  mkdirSync(join(dir, "tests"));
  writeFileSync(join(dir, "instruction.md"), `Write the word \`${word}\` into answer.txt. (rollout task ${word})\n`);
  writeFileSync(join(dir, "task.toml"), "[verifier]\ntimeout_sec = 30\n");
  writeFileSync(join(dir, "environment", "README.md"), "The answer goes in answer.txt.\n");
  const check = `[ "$(cat answer.txt 2>/dev/null)" = "${word}" ] && exact=1 || exact=0`;
  const score = json
    ? `[ -f answer.txt ] && written=1 || written=0\necho "{\\"reward\\": $exact, \\"exact\\": $exact, \\"written\\": $written}" > /logs/verifier/reward.json`
    : "echo $exact > /logs/verifier/reward.txt";
  writeFileSync(join(dir, "tests", "test.sh"), `#!/bin/bash\n${check}\n${score}\n`, { mode: 0o755 });
  return dir;
}

/** A task directory as a gzip'd tar, entries sorted, paths relative to the task's root. */
async function archiveOf(dir: string): Promise<Buffer> {
  const files: string[] = [];
  const walk = (at: string) => {
    for (const name of readdirSync(at).sort()) {
      const path = join(at, name);
      if (statSync(path).isDirectory()) walk(path);
      else files.push(path);
    }
  };
  walk(dir);
  const entries = files.map((path) => {
    const body = readFileSync(path);
    const header = { name: relative(dir, path), type: "file" as const, size: body.byteLength, mtime: new Date(0) };
    return { header: { ...header, mode: statSync(path).mode & 0o777 }, body };
  });
  return gzipSync(await packTar(entries));
}

/** Every event of an SSE response, read to its end. */
async function readEvents(response: Response): Promise<RolloutEvent[]> {
  expect(response.headers.get("Content-Type")).toMatch(/^text\/event-stream/);
  const events: RolloutEvent[] = [];
  const parser = createParser({
    onEvent: (m) => {
      const event = RolloutEvent.parse(JSON.parse(m.data));
      expect(m.event).toBe(event.type);
      expect(m.id).toBe(String(event.id));
      events.push(event);
    },
  });
  const decoder = new TextDecoder();
  const reader = response.body!.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
    parser.feed(decoder.decode(chunk.value, { stream: true }));
  return events;
}

const post = (token: string, body: unknown) =>
  fetch(`${stack.edge.baseURL}/v1/envs/rollouts`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

async function expectProblem(response: Response, status: number, code: string): Promise<void> {
  expect(response.status).toBe(status);
  expect(response.headers.get("Content-Type")).toContain(PROBLEM_CONTENT_TYPE);
  expect(((await response.json()) as { code: string }).code).toBe(code);
}

beforeAll(async () => {
  stack = await startAgentStack();
  key = savedLocalEdge(stack.edge).apiKey;
  const tasks = [];
  for (const t of TASKS) {
    const archive = await archiveOf(taskDir(t.word, t.json));
    const sha256 = createHash("sha256").update(archive).digest("hex");
    const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${sha256}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
      body: new Uint8Array(archive),
    });
    expect(put.status, await put.clone().text()).toBe(201);
    shas.push(sha256);
    tasks.push({ sha256, bytes: archive.byteLength });
  }
  const created = await rawCall(stack.edge, key, "POST", "/v1/envs/tasksets", { tasks });
  expect(created.status, JSON.stringify(created.json)).toBe(201);
  taskset = (created.json as { id: string }).id;
  // The policy's scripts, on every simulated backend (the scripted agent model's control API).
  const { url, headers } = stack.edge.simulatorControl();
  const { backends } = (await (await fetch(`${url}/backends`, { headers })).json()) as { backends: { id: string }[] };
  for (const b of backends) {
    const res = await fetch(`${url}/backends/${encodeURIComponent(b.id)}/agent-scripts`, {
      method: "PUT",
      headers: { ...headers, "Content-Type": "application/json" },
      body: JSON.stringify({ scripts: SCRIPTS }),
    });
    expect(res.status).toBe(200);
  }
  other = await makeOrg(stack.edge, "rollouts-other");
}, 180_000);
afterAll(async () => {
  await stack?.edge.stop();
});

describe("a rollout run", () => {
  let events: RolloutEvent[];
  let runId: string;

  it("streams every member's start and end, each group's advantages and the summary", async () => {
    const response = await post(key, {
      taskset,
      // By index and by hash, in the run's own order.
      tasks: [0, shas[1], 2],
      policy: { model: "chat-simulated", checkpoint: "ckpt-7" },
      group_size: 4,
      sampling: { temperature: 0.7, seed: 0 },
      limits: { turns: 4, wallSeconds: 300 },
      // Fewer than the run's 12 members: the rest wait for a slot.
      concurrency: 5,
    });
    expect(response.status, response.ok ? "" : await response.clone().text()).toBe(200);
    runId = /^\/v1\/envs\/rollouts\/(run_[0-9a-z]{20})$/.exec(response.headers.get("Location") ?? "")![1]!;
    events = await readEvents(response);

    expect(events.map((e) => e.id)).toEqual(events.map((_, i) => i + 1));
    expect(events.at(-1)!.type).toBe("summary");
    const started = events.filter((e) => e.type === "rollout.started");
    const ended = events.filter((e) => e.type === "rollout.ended").map((e) => e.data as RolloutEnded);
    const groups = events.filter((e) => e.type === "group.ended").map((e) => e.data as GroupEnded);
    expect(started).toHaveLength(12);
    expect(ended).toHaveLength(12);
    expect(groups).toHaveLength(3);
    // Each member's start comes before its end, and each group's end after its members'.
    for (const e of ended) {
      const startAt = events.findIndex(
        (x) => x.type === "rollout.started" && (x.data as { member: number }).member === e.member,
      );
      const endAt = events.findIndex(
        (x) => x.type === "rollout.ended" && (x.data as { member: number }).member === e.member,
      );
      expect(startAt).toBeLessThan(endAt);
    }

    for (const e of ended) {
      const group = Math.floor(e.member / 4);
      expect(e.groupIndex).toBe(e.member % 4);
      expect(e.seed).toBe(e.groupIndex);
      expect(e.task).toEqual({ index: group, sha256: shas[group] });
      expect(e.outcome).toBe("finished");
      expect(e.reward, `member ${e.member}`).toBe(EXPECTED_REWARDS[group]![e.groupIndex]);
      expect(e.turns).toBe(group === 1 && e.groupIndex === 1 ? 1 : 2);
      expect(e.rolloutId).toBe(`${runId}-${e.member}`);
      if (group === 1) expect(e.components).toEqual(EXPECTED_BETA_COMPONENTS[e.groupIndex]);
    }
    for (const g of groups) {
      expect(g.task).toEqual({ index: g.group, sha256: shas[g.group] });
      expect(g.members).toEqual([0, 1, 2, 3].map((i) => g.group * 4 + i));
      expect(g.rewards).toEqual(EXPECTED_REWARDS[g.group]);
      g.advantages.forEach((a, i) => expect(a).toBeCloseTo(EXPECTED_ADVANTAGES[g.group]![i]!, 6));
    }
    const summary = events.at(-1)!.data as { rollouts: number; verified: number; meanReward: number; solved: number };
    expect(summary).toMatchObject({ rollouts: 12, ended: 12, verified: 12, solved: 9, groups: 3 });
    expect(summary.meanReward).toBeCloseTo(9 / 12, 9);
  }, 600_000);

  it("answers the run with its members' rewards and advantages", async () => {
    const res = await rawCall(stack.edge, key, "GET", `/v1/envs/rollouts/${runId}`);
    expect(res.status).toBe(200);
    const run = RolloutRun.parse(res.json);
    expect(run).toMatchObject({ id: runId, status: "ended", taskset, groupSize: 4, concurrency: 5 });
    expect(run.policy).toEqual({ model: "chat-simulated", checkpoint: "ckpt-7" });
    expect(run.members.map((m) => m.reward)).toEqual(EXPECTED_REWARDS.flat());
    run.members.forEach((m) => expect(m.advantage).toBeCloseTo(EXPECTED_ADVANTAGES.flat()[m.member]!, 6));
    expect(run.summary).toEqual(events.at(-1)!.data);
    expect(run.lastEventId).toBe(events.length);
  });

  it("resumes its stream after Last-Event-ID (or ?after=)", async () => {
    const from = 7;
    const resumed = await readEvents(
      await fetch(`${stack.edge.baseURL}/v1/envs/rollouts/${runId}/events`, {
        headers: { Authorization: `Bearer ${key}`, "Last-Event-ID": String(from) },
      }),
    );
    expect(resumed).toEqual(events.slice(from));
    const byQuery = await readEvents(
      await fetch(`${stack.edge.baseURL}/v1/envs/rollouts/${runId}/events?after=${events.length - 1}`, {
        headers: { Authorization: `Bearer ${key}` },
      }),
    );
    expect(byQuery).toEqual(events.slice(-1));
    const bad = await fetch(`${stack.edge.baseURL}/v1/envs/rollouts/${runId}/events`, {
      headers: { Authorization: `Bearer ${key}`, "Last-Event-ID": "seven" },
    });
    await expectProblem(bad, 400, "invalid_request");
  });

  it("is missing to another org", async () => {
    for (const path of [`/v1/envs/rollouts/${runId}`, `/v1/envs/rollouts/${runId}/events`]) {
      const res = await fetch(`${stack.edge.baseURL}${path}`, { headers: { Authorization: `Bearer ${other.key}` } });
      await expectProblem(res, 404, "not_found");
    }
    // And the other org cannot run the first org's task set.
    const res = await post(other.key, { taskset, policy: { model: "chat-simulated" }, group_size: 2 });
    await expectProblem(res, 404, "not_found");
  });
});

describe("a bad request", () => {
  const valid = () => ({ taskset, policy: { model: "chat-simulated" }, group_size: 2, tasks: [0] });

  it.each([
    ["group_size 0", { group_size: 0 }],
    ["a negative task index", { tasks: [-1] }],
    ["a task named by a short hash", { tasks: ["abc"] }],
    ["no policy", { policy: undefined }],
    ["a temperature above 2", { sampling: { temperature: 3 } }],
    ["a seed that is not whole", { sampling: { seed: 1.5 } }],
    ["an unknown field", { surprise: true }],
    ["an unknown sampling field", { sampling: { top_k: 5 } }],
    ["more rollouts than a run makes", { tasks: Array.from({ length: 40 }, () => 0), group_size: 256 }],
  ])("%s is 400 invalid_request", async (_, change) => {
    await expectProblem(await post(key, { ...valid(), ...change }), 400, "invalid_request");
  });

  it("malformed JSON is 400, a non-JSON body 415", async () => {
    await expectProblem(await post(key, "{"), 400, "invalid_request");
    const res = await fetch(`${stack.edge.baseURL}/v1/envs/rollouts`, {
      method: "POST",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "text/plain" },
      body: "x",
    });
    await expectProblem(res, 415, "unsupported_media_type");
  });

  it("an unknown task set, task or model is 404", async () => {
    await expectProblem(await post(key, { ...valid(), taskset: "tset_nothing" }), 404, "not_found");
    await expectProblem(await post(key, { ...valid(), tasks: [3] }), 404, "not_found");
    await expectProblem(await post(key, { ...valid(), tasks: ["f".repeat(64)] }), 404, "not_found");
    await expectProblem(await post(key, { ...valid(), policy: { model: "no-such-model" } }), 404, "not_found");
  });

  it("an unknown run is 404, and a key is needed", async () => {
    const res = await fetch(`${stack.edge.baseURL}/v1/envs/rollouts/run_00000000000000000000`, {
      headers: { Authorization: `Bearer ${key}` },
    });
    await expectProblem(res, 404, "not_found");
    await expectProblem(await fetch(`${stack.edge.baseURL}/v1/envs/rollouts/anything`), 401, "unauthenticated");
  });
});

describe("the clients", () => {
  it("the SDK starts a run and yields its events through the summary, the seeds shifted by sampling.seed", async () => {
    let announced: string | undefined;
    const events: RolloutEvent[] = [];
    const rollouts = stack.sdk.envs.rollouts;
    for await (const event of rollouts.run(
      { taskset, tasks: [1], policy: { model: "chat-simulated" }, group_size: 4, sampling: { seed: 2 } },
      { onRun: (id) => (announced = id) },
    ))
      events.push(event);
    expect(announced).toMatch(/^run_[0-9a-z]{20}$/);
    expect(events.at(-1)!.type).toBe("summary");
    const group = events.find((e) => e.type === "group.ended")!.data as GroupEnded;
    // Seeds 2..5 pick beta's variants 2, 3, 0, 1.
    expect(group.rewards).toEqual([0, 1, 1, 0]);
    expect((await rollouts.get(announced!)).members.map((m) => m.seed)).toEqual([2, 3, 4, 5]);
  }, 300_000);

  it("sextant envs rollouts prints each group and the summary, or JSON", async () => {
    const args = ["envs", "rollouts", "--taskset", taskset, "--model", "chat-simulated", "--group-size", "4"];
    const text = await sextantAsync([...args, "--tasks", "0", "--checkpoint", "ckpt-cli"], stack.env);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain(
      `task 0 (${shas[0]!.slice(0, 12)}): rewards 1 0 1 1  advantages +0.58 -1.73 +0.58 +0.58`,
    );
    expect(text.stdout).toMatch(/^Run run_[0-9a-z]{20}: 4 rollouts over 1 tasks, 4 verified$/m);
    expect(text.stdout).toContain("Mean reward 0.750, solved 3/4");
    const json = await sextantAsync([...args, "--tasks", "2,0", "--json"], stack.env);
    expect(json.code, json.stderr).toBe(0);
    const out = JSON.parse(json.stdout) as { id: string; groups: GroupEnded[]; summary: { rollouts: number } };
    expect(out.groups.map((g) => [g.task.index, g.rewards])).toEqual(
      expect.arrayContaining([
        [2, [1, 1, 1, 1]],
        [0, [1, 0, 1, 1]],
      ]),
    );
    expect(out.summary.rollouts).toBe(8);
    const usage = await sextantAsync([...args.slice(0, -1), "four"], stack.env);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("--group-size takes a whole number");
  }, 300_000);
});
