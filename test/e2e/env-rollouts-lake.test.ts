/**
 * Rollout capture end to end, through `npm start`'s edge with a lake that fails on purpose
 * (`LAKE_FAULT_EVERY`: partition writes that die between their file and their commit, and consumer
 * batches delivered again after they were written): the repository's Harbor task set
 * (test/fixtures/env-tasks) played in groups of four by the simulator's scripted policy
 * (scripts.json; a stand-in for a model server that returns simulated log-probabilities and token
 * ids, labelled as such). The lake must hold one `rollouts` row per member and one `rollout_steps`
 * row per model call and per tool result, once each; every model call's row opens, with the org's
 * private key, to its answer with token ids and log-probabilities; DuckDB reads the Parquet; each
 * group's advantages are GRPO's, worked here from the rewards; and no R2 object of the edge's
 * holds the instructions, tool results or model messages in the clear.
 *
 * It plays the whole set, 25 tasks (100 rollouts, at 8 at once); `ENVS_CAPTURE_TASKS=n` plays the
 * first n, for a quicker look while working on capture.
 */
import { readFileSync } from "node:fs";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createParser } from "eventsource-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkTaskDir } from "../../client/envs/task-archive.js";
import { findTaskDirs, manifestSettings } from "../../client/envs/task-set.js";
import { AgentScriptsBody } from "../../gpu-backends/simulator/agent-script.js";
import { toBase64url } from "../../protocol/base64.js";
import { OrgKey, RowsAnswer } from "../../protocol/envs/capture.js";
import type { Message, TokenLogprob } from "../../protocol/envs/rollout-rows.js";
import { RolloutEvent, type RolloutEnded } from "../../protocol/envs/rollouts.js";
import { generateOrgKeyPair, importPrivateKey, openJson, type OrgKeyPair } from "../../protocol/envs/seal.js";
import { partitionOf } from "../../protocol/lake.js";
import { duckQuery } from "../support/duckdb.js";
import { rawCall, setAgentScripts, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { ROOT, savedLocalEdge } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

const ENV_TASKS = join(ROOT, "test/fixtures/env-tasks");
const TASKS = Number(process.env.ENVS_CAPTURE_TASKS ?? 25);
const GROUP = 4;
const CONCURRENCY = 8;

let stack: AgentStack;
let key: string;
let taskset: string;
let pair: OrgKeyPair;
let keyId: string;
/** Text the rows must never hold in the clear: instructions, files the agent reads, the model's words. */
const plaintext: string[] = [];

beforeAll(async () => {
  stack = await startAgentStack({ vars: { LAKE_FAULT_EVERY: "3" } });
  key = savedLocalEdge(stack.edge).apiKey;
  pair = await generateOrgKeyPair();
  const registered = await rawCall(stack.edge, key, "PUT", "/v1/envs/keys", { publicKey: toBase64url(pair.publicKey) });
  expect(registered.status, JSON.stringify(registered.json)).toBe(200);
  keyId = OrgKey.parse(registered.json).keyId;

  const { scripts } = AgentScriptsBody.parse(JSON.parse(readFileSync(join(ENV_TASKS, "scripts.json"), "utf8")));
  await setAgentScripts(stack.edge, scripts);
  for (const s of scripts)
    for (const turn of [s.turns, ...(s.variants ?? [])].flat())
      if (turn.content && turn.content.length >= 12) plaintext.push(turn.content);
  plaintext.push("You are a coding agent working on a task");

  const dirs = (await findTaskDirs(ENV_TASKS)).slice(0, TASKS);
  expect(dirs).toHaveLength(TASKS);
  const manifest = [];
  for (const { dir } of dirs) {
    const checked = await checkTaskDir(dir);
    const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${checked.sha256}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
      body: checked.archive as Uint8Array<ArrayBuffer>,
    });
    expect(put.status, await put.clone().text()).toBe(201);
    manifest.push({
      sha256: checked.sha256,
      bytes: checked.archive.byteLength,
      settings: manifestSettings(checked.task.settings),
    });
    plaintext.push(checked.task.instruction.split("\n")[0]!.trim());
    // Each starting file's longest line: what read_file answers, in tool results.
    for (const file of checked.task.startingTree.values()) {
      const longest = new TextDecoder()
        .decode(file.bytes)
        .split("\n")
        .map((l) => l.trim())
        .sort((a, b) => b.length - a.length)[0];
      if (longest && longest.length >= 24) plaintext.push(longest);
    }
  }
  const set = await rawCall(stack.edge, key, "POST", "/v1/envs/tasksets", { tasks: manifest });
  expect(set.status, JSON.stringify(set.json)).toBe(201);
  taskset = (set.json as { id: string }).id;
}, 300_000);

afterAll(async () => {
  await stack?.edge.stop();
});

async function runEvents(body: unknown): Promise<{ runId: string; events: RolloutEvent[] }> {
  const response = await fetch(`${stack.edge.baseURL}/v1/envs/rollouts`, {
    method: "POST",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(response.status, response.ok ? "" : await response.clone().text()).toBe(200);
  const runId = response.headers.get("Location")!.split("/").pop()!;
  const events: RolloutEvent[] = [];
  const parser = createParser({ onEvent: (m) => events.push(RolloutEvent.parse(JSON.parse(m.data))) });
  const decoder = new TextDecoder();
  const reader = response.body!.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
    parser.feed(decoder.decode(chunk.value, { stream: true }));
  return { runId, events };
}

type Row = RowsAnswer["rows"][number];

/** The run's rows of `table` in `hours`, read through `GET /v1/envs/rows/{table}`. */
async function rowsOf(table: "rollouts" | "rollout_steps", runId: string, hours: Set<string>): Promise<Row[]> {
  const rows: Row[] = [];
  for (const dayHour of hours) {
    const [day, hour] = dayHour.split("/");
    const res = await rawCall(stack.edge, key, "GET", `/v1/envs/rows/${table}?day=${day}&hour=${hour}&run=${runId}`);
    expect(res.status, JSON.stringify(res.json)).toBe(200);
    rows.push(...RowsAnswer.parse(res.json).rows);
  }
  return rows;
}

/** GRPO's advantage, worked from the rewards: (r - mean) / (population std + 1e-6). */
function handAdvantages(rewards: number[]): number[] {
  let sum = 0;
  for (const r of rewards) sum += r;
  const mean = sum / rewards.length;
  let squares = 0;
  for (const r of rewards) squares += (r - mean) * (r - mean);
  const std = Math.sqrt(squares / rewards.length);
  return rewards.map((r) => (r - mean) / (std + 1e-6));
}

describe("a rollout run's capture", () => {
  it(`lands ${TASKS} tasks x ${GROUP} in the lake once each, sealed, with token ids and log-probabilities`, async () => {
    const { runId, events } = await runEvents({
      taskset,
      policy: { model: "chat-simulated", checkpoint: "ckpt-capture" },
      group_size: GROUP,
      sampling: { temperature: 0.7, seed: 0 },
      concurrency: CONCURRENCY,
    });
    expect(events.at(-1)?.type).toBe("summary");
    const ended = events.filter((e) => e.type === "rollout.ended").map((e) => e.data as RolloutEnded);
    const members = TASKS * GROUP;
    expect(ended).toHaveLength(members);
    for (const e of ended) expect(e.reward, `member ${e.member}: ${e.outcome}`).not.toBeNull();
    const byRollout = new Map(ended.map((e) => [e.rolloutId, e]));
    const hours = new Set(
      ended.map((e) => {
        const p = partitionOf("rollouts", Date.parse(e.startedAt!));
        return `${p.day}/${p.hour}`;
      }),
    );
    const expectedSteps = ended.reduce((n, e) => n + e.turns + e.toolCalls, 0);

    // The lake's consumer and partitions take their time (and fail on purpose): wait for every row.
    let rollouts: Row[] = [];
    let steps: Row[] = [];
    const deadline = Date.now() + 300_000;
    for (;;) {
      rollouts = await rowsOf("rollouts", runId, hours);
      steps = await rowsOf("rollout_steps", runId, hours);
      if (rollouts.length >= members && steps.length >= expectedSteps) break;
      if (Date.now() > deadline)
        throw new Error(
          `the lake holds ${rollouts.length}/${members} rollouts, ${steps.length}/${expectedSteps} steps`,
        );
      await new Promise((r) => setTimeout(r, 1000));
    }

    // One `rollouts` row per member, its clear columns as the run reported them.
    expect(rollouts).toHaveLength(members);
    expect(new Set(rollouts.map((r) => r.rollout_id)).size).toBe(members);
    for (const row of rollouts) {
      const e = byRollout.get(String(row.rollout_id))!;
      expect(e, String(row.rollout_id)).toBeDefined();
      expect(row).toMatchObject({
        run_id: runId,
        member: e.member,
        group_index: e.groupIndex,
        task_index: e.task.index,
        task_sha256: e.task.sha256,
        seed: e.seed,
        policy: "chat-simulated",
        checkpoint: "ckpt-capture",
        reward: e.reward,
        components: JSON.stringify(e.components),
        outcome: e.outcome,
        turns: e.turns,
        tool_calls: e.toolCalls,
        content_key_id: keyId,
      });
      expect(row.prompt_tokens).toBeGreaterThan(0);
      expect(row.completion_tokens).toBeGreaterThan(0);
      expect(Number(row.prompt_tokens) + Number(row.completion_tokens)).toBe(e.tokens);
    }

    // Each task's advantages, worked by hand from its members' rewards.
    for (let task = 0; task < TASKS; task++) {
      const group = rollouts.filter((r) => r.task_index === task).sort((a, b) => Number(a.member) - Number(b.member));
      expect(group).toHaveLength(GROUP);
      const expected = handAdvantages(group.map((r) => Number(r.reward)));
      group.forEach((r, i) => expect(Number(r.advantage), `task ${task} member ${i}`).toBeCloseTo(expected[i]!, 6));
    }

    // Every model call and every tool result once; each model call with its token ids and log-probabilities.
    expect(steps).toHaveLength(expectedSteps);
    expect(new Set(steps.map((r) => r.step_id)).size).toBe(expectedSteps);
    const privateKey = await importPrivateKey(pair.privateJwk);
    const open = <T>(table: string, row: Row, id: string) =>
      openJson<T>(privateKey, String(row.content), { orgId: String(row.org_id), table, rowId: id, keyId });
    const stepById = new Map(steps.map((r) => [String(r.step_id), r]));
    for (const e of ended) {
      const opening = await open<{ messages: Message[] }>(
        "rollouts",
        rollouts.find((r) => r.rollout_id === e.rolloutId)!,
        e.rolloutId,
      );
      expect(opening.messages.map((m) => m.role)).toEqual(["system", "user"]);
      let tools = 0;
      for (let turn = 1; turn <= e.turns; turn++) {
        const id = `${e.rolloutId}.m${turn}`;
        const row = stepById.get(id);
        expect(row, id).toBeDefined();
        expect(row).toMatchObject({ kind: "model", turn, has_logprobs: true, content_key_id: keyId });
        const call = await open<{
          message: Message & { role: "assistant" };
          token_ids: number[];
          logprobs: TokenLogprob[];
        }>("rollout_steps", row!, id);
        expect(call.message.role).toBe("assistant");
        expect(call.token_ids.length, id).toBeGreaterThan(0);
        expect(call.token_ids.every((t) => Number.isInteger(t))).toBe(true);
        expect(call.logprobs).toHaveLength(call.token_ids.length);
        expect(call.logprobs.every((l) => l.logprob <= 0)).toBe(true);
        // A turn's results are numbered in the order they came (its calls run concurrently).
        const calls = call.message.tool_calls ?? [];
        const answered: { id: string; tool: string | null }[] = [];
        for (let i = 0; i < calls.length; i++) {
          const toolId = `${e.rolloutId}.t${turn}.${i}`;
          const toolRow = stepById.get(toolId);
          expect(toolRow, toolId).toBeDefined();
          expect(toolRow).toMatchObject({ kind: "tool", turn });
          const result = await open<{ message: Message & { role: "tool" } }>("rollout_steps", toolRow!, toolId);
          expect(result.message.role).toBe("tool");
          answered.push({ id: result.message.tool_call_id, tool: toolRow!.tool as string | null });
        }
        const byId = (x: { id: string }, y: { id: string }) => x.id.localeCompare(y.id);
        expect(answered.sort(byId)).toEqual(calls.map((c) => ({ id: c.id, tool: c.function.name })).sort(byId));
        tools += calls.length;
      }
      expect(tools, e.rolloutId).toBe(e.toolCalls);
    }

    // DuckDB reads the Parquet files the lake committed, as `sextant admin lake export` downloads them.
    const out = mkdtempSync(join(tmpdir(), "sextant-capture-lake-"));
    for (const day of new Set([...hours].map((h) => h.split("/")[0]!))) {
      const exported = stack.cli(["--json", "admin", "lake", "export", "--day", day, "--out", out]);
      expect(exported.code, exported.stderr).toBe(0);
    }
    const parquet = (table: string) => `read_parquet('${out}/${table}/**/*.parquet', hive_partitioning = true)`;
    const [counts] = await duckQuery(
      `SELECT count(*) AS n, count(DISTINCT rollout_id) AS ids, count(DISTINCT task_index) AS tasks
         FROM ${parquet("rollouts")} WHERE run_id = '${runId}'`,
    );
    expect(counts).toEqual({ n: members, ids: members, tasks: TASKS });
    const [stepCounts] = await duckQuery(
      `SELECT count(*) AS n, count(DISTINCT step_id) AS ids, count(*) FILTER (WHERE kind = 'model') AS model,
                count(*) FILTER (WHERE kind = 'model' AND has_logprobs) AS with_logprobs
         FROM ${parquet("rollout_steps")} WHERE run_id = '${runId}'`,
    );
    const turns = ended.reduce((n, e) => n + e.turns, 0);
    expect(stepCounts).toEqual({ n: expectedSteps, ids: expectedSteps, model: turns, with_logprobs: turns });
    const duck = await duckQuery(
      `SELECT task_index, member, reward, advantage FROM ${parquet("rollouts")}
         WHERE run_id = '${runId}' ORDER BY task_index, member`,
    );
    for (let task = 0; task < TASKS; task++) {
      const group = duck.filter((r) => r.task_index === task);
      const expected = handAdvantages(group.map((r) => Number(r.reward)));
      group.forEach((r, i) => expect(Number(r.advantage)).toBeCloseTo(expected[i]!, 6));
    }

    // The edge's R2 (the lake's bucket among it) holds none of the conversation in the clear.
    expect(plaintext.length).toBeGreaterThan(TASKS * 2);
    expect(await scanDirectoryFor(join(stack.edge.persistTo, "v3", "r2"), plaintext)).toEqual([]);
  }, 900_000);
});
