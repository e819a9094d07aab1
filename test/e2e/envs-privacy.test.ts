/**
 * Tenancy and privacy across everything environments do, through `npm start`'s edge (with its own
 * sandbox host, whose output joins the edge's, and the simulator's scripted agent model as the
 * policy, a stand-in for a model server): a one-task Harbor set whose every file, file name and
 * task.toml string carries a marker of its own is pushed, the org registers its sealing key, and the
 * task is played every way there is (a session stepped, diffed and verified, an OpenEnv episode, a
 * rollout run whose rows reach the lake). Then no marker may be anywhere in D1, R2 (the lake's
 * Parquet decoded too), Durable Object storage or the log, as UTF-8, UTF-16 or base64; and another
 * org is refused on every route that names the first org's set, session or run, and exports nothing.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createParser } from "eventsource-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentScript } from "../../gpu-backends/simulator/agent-script.js";
import { toBase64url } from "../../protocol/base64.js";
import { OrgKey, RowsAnswer } from "../../protocol/envs/capture.js";
import { RolloutEvent, type RolloutEnded } from "../../protocol/envs/rollouts.js";
import { generateOrgKeyPair } from "../../protocol/envs/seal.js";
import { partitionOf } from "../../protocol/lake.js";
import { makeOrg, rawCall, setAgentScripts, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { call, taskArchive } from "../support/env-session.js";
import { savedLocalEdge, sextantAsync } from "../support/local-edge.js";
import { runTerminal } from "../support/openenv.js";
import { parquetFilesUnder, scanDirectoryFor } from "../support/storage-scan.js";

/** A marker per place a task holds text: a hit names the place it leaked from. */
const mark = (place: string) => `${place}${randomBytes(9).toString("hex")}`;
const M = {
  instruction: mark("instr"),
  instructionName: mark("instrname"),
  tomlMetadata: mark("tomlmeta"),
  tomlVerifierEnv: mark("tomlverifenv"),
  tomlEnvironmentEnv: mark("tomlenvenv"),
  tomlSolutionEnv: mark("tomlsolveenv"),
  envFileName: mark("envfilename"),
  envFile: mark("envfile"),
  envDirName: mark("envdirname"),
  envNested: mark("envnested"),
  testsFileName: mark("testsname"),
  tests: mark("tests"),
  testsData: mark("testsdata"),
  solution: mark("solution"),
  answer: mark("answer"),
  modelSays: mark("modelsays"),
  stepSays: mark("stepsays"),
};
const MARKERS = Object.values(M);

const NOTES = `notes-${M.envFileName}.md`;
const NESTED = `src/${M.envDirName}/data.txt`;
const encode = (text: string) => new TextEncoder().encode(text);

/** The task: answer.txt must hold M.answer; the verifier says so in its log with its own data file's words. */
function markedTask(): Map<string, Uint8Array> {
  return new Map([
    [
      "instruction.md",
      encode(`Write ${M.answer} into answer.txt, as ${NOTES} says (${M.instruction}, ${M.instructionName}).\n`),
    ],
    [
      "task.toml",
      encode(
        [
          "[metadata]",
          `author_name = "${M.tomlMetadata}"`,
          "[verifier]",
          "timeout_sec = 30",
          "[verifier.env]",
          `EXPECTED_NOTE = "${M.tomlVerifierEnv}"`,
          "[agent]",
          "timeout_sec = 300",
          "[environment.env]",
          `TASK_GREETING = "${M.tomlEnvironmentEnv}"`,
          "[solution.env]",
          `SOLUTION_NOTE = "${M.tomlSolutionEnv}"`,
          "",
        ].join("\n"),
      ),
    ],
    [`environment/${NOTES}`, encode(`The answer file is answer.txt. ${M.envFile}\n`)],
    [`environment/${NESTED}`, encode(`${M.envNested}\n`)],
    [
      "tests/test.sh",
      encode(
        [
          "#!/bin/bash",
          `# ${M.tests}`,
          `cat /tests/data-${M.testsFileName}.txt; echo "$EXPECTED_NOTE"`,
          `if [ "$(cat answer.txt 2>/dev/null)" = "${M.answer}" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt`,
          "",
        ].join("\n"),
      ),
    ],
    [`tests/data-${M.testsFileName}.txt`, encode(`${M.testsData}\n`)],
    ["solution/solve.sh", encode(`#!/bin/bash\n# ${M.solution} $SOLUTION_NOTE\necho ${M.answer} > answer.txt\n`)],
  ]);
}

/** The policy's play: read the marked files, write the answer, finish; its words carry a marker too. */
const SCRIPT: AgentScript = {
  name: "envs-privacy",
  match: M.instruction,
  turns: [
    {
      content: `Reading first (${M.modelSays}).`,
      toolCalls: [
        { name: "read_file", arguments: { path: NOTES } },
        { name: "run_terminal", arguments: { command: `cat ${NESTED}; echo "$TASK_GREETING"` } },
        { name: "list_dir", arguments: { path: "src" } },
      ],
    },
    { toolCalls: [{ name: "create_file", arguments: { path: "answer.txt", content: M.answer } }] },
    { toolCalls: [{ name: "finish", arguments: { summary: `wrote it (${M.modelSays})` } }] },
  ],
};

let stack: AgentStack;
let key: string;
let other: { key: string };
let taskset: string;
let keyFile: string;
let otherKeyFile: string;
/** The first org's session the other org tries its hand at; never stepped by its owner. */
let untouched: string;
/** The OpenEnv episode's session. */
let episode: string;
let runId: string;
let hours: Set<string>;

const client = (token: string) => (method: string, path: string, body?: unknown) =>
  rawCall(stack.edge, token, method, path, body);
let owner: ReturnType<typeof client>;
let intruder: ReturnType<typeof client>;

beforeAll(async () => {
  stack = await startAgentStack();
  key = savedLocalEdge(stack.edge).apiKey;
  owner = client(key);
  other = await makeOrg(stack.edge, "envs-privacy-other");
  intruder = client(other.key);

  // The org's sealing key, registered as PUT /v1/envs/keys takes it, kept in the file export reads.
  const pair = await generateOrgKeyPair();
  const publicKey = toBase64url(pair.publicKey);
  const registered = await owner("PUT", "/v1/envs/keys", { publicKey });
  expect(registered.status, JSON.stringify(registered.json)).toBe(200);
  const { keyId } = OrgKey.parse(registered.json);
  keyFile = join(mkdtempSync(join(tmpdir(), "sextant-privacy-key-")), "org.key.json");
  writeFileSync(keyFile, JSON.stringify({ keyId, publicKey, privateJwk: pair.privateJwk }), { mode: 0o600 });
  // The other org's key pair need not be registered (only an org's owner may): export opens with the private half.
  otherKeyFile = join(mkdtempSync(join(tmpdir(), "sextant-privacy-key-")), "other.key.json");
  const keygen = await sextantAsync(
    ["--api-key", other.key, "envs", "keygen", "--out", otherKeyFile, "--no-register"],
    stack.env,
  );
  expect(keygen.code, keygen.stderr).toBe(0);

  const { archive, sha256 } = await taskArchive(markedTask());
  const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${sha256}`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
    body: archive as Uint8Array<ArrayBuffer>,
  });
  expect(put.status, await put.clone().text()).toBe(201);
  const set = await owner("POST", "/v1/envs/tasksets", {
    tasks: [{ sha256, bytes: archive.byteLength, settings: { verifierTimeoutSec: 30 } }],
  });
  expect(set.status, JSON.stringify(set.json)).toBe(201);
  taskset = (set.json as { id: string }).id;
  await setAgentScripts(stack.edge, [SCRIPT]);
}, 180_000);
afterAll(async () => {
  await stack?.edge.stop();
});

describe("the marked task, played every way", () => {
  it("a session reads and writes the marked files, diffs and verifies", async () => {
    const opened = await owner("POST", "/v1/envs/sessions", { taskset, task: 0 });
    expect(opened.status, JSON.stringify(opened.json)).toBe(201);
    const session = opened.json as { id: string; observation: { messages: { content: string }[] } };
    expect(session.observation.messages[1]!.content).toContain(M.instruction);
    const base = `/v1/envs/sessions/${session.id}`;
    const read = await owner("POST", `${base}/step`, {
      index: 1,
      content: `Looking around (${M.stepSays}).`,
      tool_calls: [
        call("r", "read_file", { path: NOTES }),
        call("t", "run_terminal", { command: `cat ${NESTED}; echo "$TASK_GREETING"` }),
        call("g", "grep", { pattern: M.envNested.slice(0, 12) }),
      ],
    });
    expect(read.status, JSON.stringify(read.json)).toBe(200);
    const results = (read.json as { results: { content: string }[] }).results.map((r) => r.content);
    expect(results[0]).toContain(M.envFile);
    expect(results[1]).toContain(M.envNested);
    expect(results[1]).toContain(M.tomlEnvironmentEnv);
    expect(results[2]).toContain(M.envDirName);
    const wrote = await owner("POST", `${base}/step`, {
      index: 2,
      tool_calls: [
        call("w", "create_file", { path: "answer.txt", content: M.answer }),
        call("c", "create_file", { path: `copy-${M.envFileName}.txt`, content: M.stepSays }),
      ],
    });
    expect(wrote.status, JSON.stringify(wrote.json)).toBe(200);
    const diff = await owner("GET", `${base}/diff`);
    expect((diff.json as { diff: string }).diff).toContain(M.answer);
    const verified = await owner("POST", `${base}/verify`);
    expect(verified.status, JSON.stringify(verified.json)).toBe(200);
    expect(verified.json).toMatchObject({ reward: 1 });
    expect((verified.json as { log: string }).log).toContain(M.testsData);
    expect((verified.json as { log: string }).log).toContain(M.tomlVerifierEnv);
    expect((await owner("DELETE", base)).status).toBe(204);

    const kept = await owner("POST", "/v1/envs/sessions", { taskset, task: 0 });
    expect(kept.status).toBe(201);
    untouched = (kept.json as { id: string }).id;
  }, 120_000);

  it("an OpenEnv episode plays it to its reward", async () => {
    const front = `/v1/envs/openenv/${taskset}/0`;
    const reset = await owner("POST", `${front}/reset`, { seed: 3 });
    expect(reset.status, JSON.stringify(reset.json)).toBe(200);
    episode = (reset.json as { observation: { session_id: string } }).observation.session_id;
    const step = await owner("POST", `${front}/step`, {
      action: runTerminal("o1", `cat ${NOTES}; echo ${M.answer} > answer.txt`),
      session_id: episode,
    });
    expect(step.status, JSON.stringify(step.json)).toBe(200);
    const finish = await owner("POST", `${front}/step`, {
      action: { type: "call_tool", tool_name: "finish", arguments: { summary: M.stepSays } },
      session_id: episode,
    });
    expect(finish.json).toMatchObject({ done: true, reward: 1 });
  }, 120_000);

  it("a rollout run plays it with the scripted policy, and its rows reach the lake sealed", async () => {
    const response = await fetch(`${stack.edge.baseURL}/v1/envs/rollouts`, {
      method: "POST",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
      body: JSON.stringify({ taskset, policy: { model: "chat-simulated" }, group_size: 2, sampling: { seed: 0 } }),
    });
    expect(response.status, response.ok ? "" : await response.clone().text()).toBe(200);
    runId = response.headers.get("Location")!.split("/").pop()!;
    const events: RolloutEvent[] = [];
    const parser = createParser({ onEvent: (m) => events.push(RolloutEvent.parse(JSON.parse(m.data))) });
    const decoder = new TextDecoder();
    const reader = response.body!.getReader();
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
      parser.feed(decoder.decode(chunk.value, { stream: true }));
    const ended = events.filter((e) => e.type === "rollout.ended").map((e) => e.data as RolloutEnded);
    expect(ended.map((e) => [e.outcome, e.reward])).toEqual([
      ["finished", 1],
      ["finished", 1],
    ]);
    hours = new Set(
      ended.map((e) => {
        const p = partitionOf("rollouts", Date.parse(e.startedAt!));
        return `${p.day}/${p.hour}`;
      }),
    );

    // The lake's consumer batches and commits in its own time: wait for every row of the run.
    const expectedSteps = ended.reduce((n, e) => n + e.turns + e.toolCalls, 0);
    const rowsOf = async (token: string, table: string) => {
      let n = 0;
      for (const dayHour of hours) {
        const [day, hour] = dayHour.split("/");
        const res = await rawCall(
          stack.edge,
          token,
          "GET",
          `/v1/envs/rows/${table}?day=${day}&hour=${hour}&run=${runId}`,
        );
        expect(res.status, JSON.stringify(res.json)).toBe(200);
        n += RowsAnswer.parse(res.json).rows.length;
      }
      return n;
    };
    const deadline = Date.now() + 120_000;
    let counts: number[];
    for (;;) {
      counts = [await rowsOf(key, "rollouts"), await rowsOf(key, "rollout_steps")];
      if (counts[0]! >= 2 && counts[1]! >= expectedSteps) break;
      if (Date.now() > deadline)
        throw new Error(`the lake holds ${counts[0]}/2 rollouts, ${counts[1]}/${expectedSteps} steps`);
      await new Promise((r) => setTimeout(r, 1000));
    }
    expect(counts).toEqual([2, expectedSteps]);
    // The rows route is the other org's too, and holds none of this org's rows.
    expect([await rowsOf(other.key, "rollouts"), await rowsOf(other.key, "rollout_steps")]).toEqual([0, 0]);
  }, 300_000);
});

describe("another org", () => {
  it("is answered 404 on the task set, the sessions, the OpenEnv front and the run, and changes nothing", async () => {
    const base = `/v1/envs/sessions/${untouched}`;
    const front = `/v1/envs/openenv/${taskset}/0`;
    const attempts: [string, Awaited<ReturnType<typeof intruder>>][] = [
      ["GET taskset", await intruder("GET", `/v1/envs/tasksets/${taskset}`)],
      ["POST session", await intruder("POST", "/v1/envs/sessions", { taskset, task: 0 })],
      ["GET session", await intruder("GET", base)],
      [
        "step",
        await intruder("POST", `${base}/step`, { index: 1, tool_calls: [call("x", "read_file", { path: NOTES })] }),
      ],
      ["verify", await intruder("POST", `${base}/verify`)],
      ["diff", await intruder("GET", `${base}/diff`)],
      ["DELETE", await intruder("DELETE", base)],
      ["openenv reset", await intruder("POST", `${front}/reset`, {})],
      ["openenv state", await intruder("GET", `${front}/state?session_id=${episode}`)],
      [
        "openenv step",
        await intruder("POST", `${front}/step`, { action: runTerminal("x", "true"), session_id: untouched }),
      ],
      ["GET episode", await intruder("GET", `/v1/envs/sessions/${episode}`)],
      ["GET run", await intruder("GET", `/v1/envs/rollouts/${runId}`)],
      [
        "POST run",
        await intruder("POST", "/v1/envs/rollouts", { taskset, policy: { model: "chat-simulated" }, group_size: 1 }),
      ],
    ];
    const events = await fetch(`${stack.edge.baseURL}/v1/envs/rollouts/${runId}/events`, {
      headers: { Authorization: `Bearer ${other.key}` },
    });
    attempts.push([
      "run events",
      { status: events.status, json: (await events.json()) as never, type: "", retryAfter: null },
    ]);
    expect(attempts.map(([name, a]) => [name, a.status, (a.json as { code?: string }).code])).toEqual(
      attempts.map(([name]) => [name, 404, "not_found"]),
    );
    expect((await owner("GET", `/v1/envs/sessions/${untouched}`)).json).toMatchObject({ steps: 0, done: false });
    expect((await owner("GET", `/v1/envs/tasksets/${taskset}`)).status).toBe(200);
  }, 120_000);

  it("exports nothing of the first org's with sextant envs export, which exports the first org's own run", async () => {
    const export_ = async (apiKey: string, file: string, run?: string) => {
      const out = mkdtempSync(join(tmpdir(), "sextant-privacy-export-"));
      const summaries = [];
      for (const dayHour of hours) {
        const [day, hour] = dayHour.split("/");
        const args = ["--json", "--api-key", apiKey, "envs", "export", "--out", out, "--key", file];
        const r = await sextantAsync(
          [...args, "--day", day!, "--hour", hour!, ...(run ? ["--run", run] : [])],
          stack.env,
        );
        expect(r.code, r.stderr).toBe(0);
        summaries.push(JSON.parse(r.stdout) as { rollouts: number; steps: number });
      }
      return { out, rollouts: summaries.reduce((n, s) => n + s.rollouts, 0) };
    };
    const own = await export_(key, keyFile, runId);
    expect(own.rollouts).toBe(2);
    expect(readFileSync(join(own.out, "trl.jsonl"), "utf8")).toContain(M.instruction);
    for (const run of [runId, undefined]) {
      const theirs = await export_(other.key, otherKeyFile, run);
      expect(theirs.rollouts).toBe(0);
      expect(readFileSync(join(theirs.out, "trl.jsonl"), "utf8")).toBe("");
    }
  }, 120_000);
});

describe("what the edge keeps", () => {
  it("holds no marker in D1, R2, Durable Object storage or the edge's and sandbox host's log", async () => {
    const storage = stack.edge.persistTo;
    // The scan reads where things are kept: the session's id in D1 and its object, the run's rows in R2.
    const seen = await scanDirectoryFor(storage, [untouched, runId]);
    expect(seen.some((hit) => hit.includes("/d1/") && hit.endsWith(untouched))).toBe(true);
    expect(seen.some((hit) => hit.includes("/do/") && hit.endsWith(untouched))).toBe(true);
    expect(seen.some((hit) => hit.includes("/r2/") && hit.includes("(decoded)") && hit.endsWith(runId))).toBe(true);
    expect(parquetFilesUnder(join(storage, "v3", "r2"))).toBeGreaterThan(0);

    expect(await scanDirectoryFor(storage, MARKERS)).toEqual([]);
    const log = stack.edge.output();
    // The log is the whole run's: the lake's consumer reported the rollout's rows after they were written.
    expect(log).toContain("lake batch consumed");
    const forms = (m: string) => [m, Buffer.from(m).toString("base64").slice(0, -4)];
    expect(MARKERS.filter((m) => forms(m).some((f) => log.includes(f)))).toEqual([]);
  }, 120_000);
});
