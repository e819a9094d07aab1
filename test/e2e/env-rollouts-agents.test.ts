/**
 * Rollout runs played without a model, through `npm start`'s edge and a sandbox host of the test's
 * own: four of the repository's Harbor tasks (test/fixtures/env-tasks) and tasks made here, scored 1
 * only when solved.log holds exactly one line: one whose solution appends that line, one whose
 * solution fails, and one whose solution appends it and then runs a while. `agent: "oracle"` runs each task's solution/solve.sh and scores 1
 * on each (the failing one ends `solve_error` and is verified anyway), `agent: "noop"` scores 0 on
 * each, and neither sends the simulated model servers a single request. Each member's verifier log
 * reaches the run sealed to the org's key (read from the run object's SQLite, as the eval rows will
 * take it) and opens with the org's private key to the verifier's output, which is nowhere in the
 * clear in D1, R2, Durable Object storage or the edge's log. Once a member has reported, the host
 * holds its sandbox no more. Last, the edge is stopped while an
 * oracle member's solution runs and started again: the member carries on and the solution has run
 * once.
 */
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createParser } from "eventsource-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkTaskDir } from "../../client/envs/task-archive.js";
import { manifestSettings } from "../../client/envs/task-set.js";
import { toBase64url } from "../../protocol/base64.js";
import { PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { OrgKey } from "../../protocol/envs/capture.js";
import { RolloutEvent, RolloutRun, type RolloutEnded } from "../../protocol/envs/rollouts.js";
import { generateOrgKeyPair, importPrivateKey, type OrgKeyPair } from "../../protocol/envs/seal.js";
import { openVerifierLog, type SealedVerifierLog } from "../../protocol/envs/verifier-log.js";
import {
  rawCall,
  startAgentStack,
  startTestSandboxHost,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { taskArchive } from "../support/env-session.js";
import { ROOT, savedLocalEdge } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

const FIXTURES = ["roman", "py-fibonacci", "sh-count-lines", "median-even"];
/** What only the verifier prints: test.sh holds it in two halves, so a hit anywhere is its output. */
const HALVES = [crypto.randomUUID().replace(/-/g, ""), crypto.randomUUID().replace(/-/g, "")];
const VERIFIER_SAYS = `verifier-says-${HALVES[0]}${HALVES[1]}`;
const encode = (text: string) => new TextEncoder().encode(text);

/** A task scored 1 when solved.log holds exactly one line; `solve` is its solution/solve.sh. */
function madeTask(name: string, solve: string): Map<string, Uint8Array> {
  return new Map([
    ["instruction.md", encode(`Make solved.log hold one line (${name}).\n`)],
    ["task.toml", encode("[verifier]\ntimeout_sec = 30\n\n[agent]\ntimeout_sec = 300\n")],
    ["environment/README.md", encode("solved.log is missing.\n")],
    [
      "tests/test.sh",
      encode(
        [
          "#!/bin/bash",
          `a=${HALVES[0]}; b=${HALVES[1]}`,
          'echo "verifier-says-$a$b"',
          "lines=$(cat solved.log 2>/dev/null | wc -l)",
          'if [ "$lines" = 1 ]; then passed=1; else passed=0; fi',
          'echo "passed $passed of 1 (solved.log has $lines lines)"',
          "echo $passed > /logs/verifier/reward.txt",
          "",
        ].join("\n"),
      ),
    ],
    ["solution/solve.sh", encode(solve)],
  ]);
}
const SOLVE_ONCE = madeTask("solve-once", "#!/bin/bash\necho solved >> solved.log\n");
const SOLVE_FAILS = madeTask("solve-fails", "#!/bin/bash\necho 'no luck' >&2\nexit 3\n");
/** Appends its line and keeps running, so that the edge can be stopped and started again while it runs. */
const SOLVE_SLOW = madeTask("solve-slow", "#!/bin/bash\necho solved >> solved.log\nsleep 15\n");

let host: SandboxHostHandle;
let stack: AgentStack;
let key: string;
let pair: OrgKeyPair;
let taskset: string;
/** Index in the set of the tasks made here. */
let onceIndex: number;
let failsIndex: number;
let slowIndex: number;
const persistTo = mkdtempSync(join(tmpdir(), "sextant-state-"));
const configDir = mkdtempSync(join(tmpdir(), "sextant-config-"));

async function putArchive(archive: Uint8Array, sha256: string): Promise<void> {
  const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${sha256}`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
    body: archive as Uint8Array<ArrayBuffer>,
  });
  expect(put.status, await put.clone().text()).toBe(201);
}

beforeAll(async () => {
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host, persistTo, configDir });
  key = savedLocalEdge(stack.edge).apiKey;
  pair = await generateOrgKeyPair();
  const registered = await rawCall(stack.edge, key, "PUT", "/v1/envs/keys", { publicKey: toBase64url(pair.publicKey) });
  expect(registered.status, JSON.stringify(registered.json)).toBe(200);
  OrgKey.parse(registered.json);

  const manifest = [];
  for (const name of FIXTURES) {
    const checked = await checkTaskDir(join(ROOT, "test/fixtures/env-tasks", name));
    await putArchive(checked.archive, checked.sha256);
    manifest.push({
      sha256: checked.sha256,
      bytes: checked.archive.byteLength,
      settings: manifestSettings(checked.task.settings),
    });
  }
  for (const files of [SOLVE_ONCE, SOLVE_FAILS, SOLVE_SLOW]) {
    const { archive, sha256 } = await taskArchive(files);
    await putArchive(archive, sha256);
    manifest.push({ sha256, bytes: archive.byteLength });
  }
  onceIndex = FIXTURES.length;
  failsIndex = FIXTURES.length + 1;
  slowIndex = FIXTURES.length + 2;
  const set = await rawCall(stack.edge, key, "POST", "/v1/envs/tasksets", { tasks: manifest });
  expect(set.status, JSON.stringify(set.json)).toBe(201);
  taskset = (set.json as { id: string }).id;
}, 300_000);
afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
});

/** Every event of an SSE response, read to its end. */
async function readEvents(response: Response): Promise<RolloutEvent[]> {
  const events: RolloutEvent[] = [];
  const parser = createParser({ onEvent: (m) => events.push(RolloutEvent.parse(JSON.parse(m.data))) });
  const decoder = new TextDecoder();
  const reader = response.body!.getReader();
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
    parser.feed(decoder.decode(chunk.value, { stream: true }));
  return events;
}

const post = (body: unknown) =>
  fetch(`${stack.edge.baseURL}/v1/envs/rollouts`, {
    method: "POST",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });

async function run(body: unknown): Promise<{ runId: string; ended: RolloutEnded[]; events: RolloutEvent[] }> {
  const response = await post(body);
  expect(response.status, response.ok ? "" : await response.clone().text()).toBe(200);
  const runId = response.headers.get("Location")!.split("/").pop()!;
  const events = await readEvents(response);
  expect(events.at(-1)?.type).toBe("summary");
  const ended = events.filter((e) => e.type === "rollout.ended").map((e) => e.data as RolloutEnded);
  return { runId, ended: ended.sort((a, b) => a.member - b.member), events };
}

/** Chat requests the simulated model servers behind the edge have received. */
async function modelRequests(): Promise<number> {
  const { url, headers } = stack.edge.simulatorControl();
  const { backends } = (await (await fetch(`${url}/backends`, { headers })).json()) as { backends: { id: string }[] };
  let n = 0;
  for (const { id } of backends) {
    const res = await fetch(`${url}/backends/${encodeURIComponent(id)}/records`, { headers });
    const { records } = (await res.json()) as { records: { path: string }[] };
    n += records.filter((r) => r.path.includes("/chat/completions")).length;
  }
  return n;
}

/**
 * The sealed verifier logs the rollout runs' objects keep, read from their SQLite files as the edge
 * left them (copies, read with the Python the sandboxes' toolchain already needs).
 */
function keptLogs(): { run: string; org: string; member: number; log: SealedVerifierLog }[] {
  const dir = join(persistTo, "v3", "do");
  const copies = mkdtempSync(join(tmpdir(), "sextant-run-sqlite-"));
  const files: string[] = [];
  for (const sub of readdirSync(dir).filter((d) => d.endsWith("-EnvRun")))
    for (const name of readdirSync(join(dir, sub)).filter((n) => n.endsWith(".sqlite") && n !== "metadata.sqlite")) {
      const copy = join(copies, name);
      copyFileSync(join(dir, sub, name), copy);
      if (existsSync(join(dir, sub, `${name}-wal`))) copyFileSync(join(dir, sub, `${name}-wal`), `${copy}-wal`);
      files.push(copy);
    }
  const script = [
    "import json, sqlite3, sys",
    "out = []",
    "for path in sys.argv[1:]:",
    "    db = sqlite3.connect(path)",
    "    names = {r[0] for r in db.execute(\"SELECT name FROM sqlite_master WHERE type = 'table'\")}",
    "    if 'member_verifier_log' in names:",
    "        state = json.loads(db.execute('SELECT state FROM run').fetchone()[0])",
    "        for m, k, s in db.execute('SELECT member, key_id, sealed FROM member_verifier_log'):",
    "            log = {'content_key_id': k, 'content': s}",
    "            out.append({'run': state['id'], 'org': state['orgId'], 'member': m, 'log': log})",
    "    db.close()",
    "print(json.dumps(out))",
  ].join("\n");
  return JSON.parse(execFileSync("/usr/bin/python3", ["-c", script, ...files], { encoding: "utf8" }));
}

const solvedLog = (rolloutId: string) => join(host.root, rolloutId, "disk", "tree", "solved.log");

/**
 * The host's answer to GET of a rollout's sandbox once the rollout has had time to destroy it: it
 * reports to its run first, so its run's summary may come just before the destroy (the bound only
 * keeps a broken edge from hanging the suite).
 */
async function sandboxStatus(rolloutId: string): Promise<number> {
  for (let i = 0; ; i++) {
    const res = await fetch(`${host.url}/v1/sandboxes/${rolloutId}`, {
      headers: { Authorization: `Bearer ${host.token}` },
    });
    await res.body?.cancel();
    if (res.status !== 200 || i >= 300) return res.status;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("rollouts played without a model", () => {
  const runs: Record<"oracle" | "noop", { runId: string; ended: RolloutEnded[] }> = {} as never;

  it("oracle scores 1 and noop 0 on every task, and no model is asked anything", async () => {
    const before = await modelRequests();
    for (const agent of ["oracle", "noop"] as const) {
      const tasks = [0, 1, 2, 3, onceIndex, failsIndex];
      runs[agent] = await run({ taskset, tasks, agent, group_size: 1, concurrency: 6, limits: { wallSeconds: 300 } });
      const { ended } = runs[agent];
      expect(ended.map((e) => e.task.index)).toEqual(tasks);
      for (const e of ended) {
        const solved = agent === "oracle" && e.task.index !== failsIndex;
        expect([e.task.index, e.reward], `${agent} task ${e.task.index}: ${e.outcome}`).toEqual([
          e.task.index,
          solved ? 1 : 0,
        ]);
        // A failed solution is its own outcome, and the tree it left is still scored.
        expect(e.outcome).toBe(agent === "oracle" && e.task.index === failsIndex ? "solve_error" : "finished");
        expect(e.verifyError).toBeUndefined();
        expect([e.turns, e.tokens, e.toolCalls]).toEqual([0, 0, 0]);
        // The solution's time is the member's sandbox time, as a model's commands are.
        if (agent === "oracle") expect(e.sandboxSeconds).toBeGreaterThan(0);
      }
      const view = await rawCall(stack.edge, key, "GET", `/v1/envs/rollouts/${runs[agent].runId}`);
      expect(RolloutRun.parse(view.json).policy).toEqual({ model: agent });
    }
    expect(await modelRequests()).toBe(before);
  }, 600_000);

  it("leaves none of the runs' sandboxes on the host once each member has reported", async () => {
    for (const agent of ["oracle", "noop"] as const)
      for (const e of runs[agent].ended) expect(await sandboxStatus(e.rolloutId), `${agent} ${e.rolloutId}`).toBe(404);
  }, 120_000);

  it("hands each member's verifier log to its run sealed to the org's key, which opens it", async () => {
    const privateKey = await importPrivateKey(pair.privateJwk);
    const kept = keptLogs();
    for (const agent of ["oracle", "noop"] as const) {
      const { runId, ended } = runs[agent];
      for (const e of ended) {
        const sealed = kept.find((k) => k.run === runId && k.member === e.member);
        expect(sealed, `${agent} member ${e.member}`).toBeDefined();
        const text = await openVerifierLog(privateKey, sealed!.org, e.rolloutId, sealed!.log);
        if (e.task.index === onceIndex || e.task.index === failsIndex) {
          expect(text).toContain(VERIFIER_SAYS);
          expect(text).toContain(`passed ${e.reward} of 1`);
        } else {
          // The fixtures' checks print how many of their cases passed: all of them, only when solved.
          const [, passed, total] = /passed (\d+) of (\d+)\n/.exec(text) ?? [];
          expect(passed, text).toBeDefined();
          expect(passed === total, text).toBe(e.reward === 1);
        }
      }
    }
  });

  it("keeps none of the verifier's output in the clear in D1, R2, Durable Object storage or the log", async () => {
    expect(await scanDirectoryFor(persistTo, [VERIFIER_SAYS, HALVES.join("")])).toEqual([]);
    expect(stack.edge.output()).not.toContain(VERIFIER_SAYS);
  });
});

describe("a request", () => {
  it.each([
    ["agent model without a policy", { agent: "model" }],
    ["no agent and no policy", {}],
    ["an agent that is not one", { agent: "human", policy: { model: "chat-simulated" } }],
  ])("with %s is 400 invalid_request", async (_, change) => {
    const res = await post({ taskset, group_size: 1, tasks: [0], ...change });
    expect(res.status).toBe(400);
    expect(res.headers.get("Content-Type")).toContain(PROBLEM_CONTENT_TYPE);
    expect(((await res.json()) as { code: string }).code).toBe("invalid_request");
  });
});

describe("an oracle member whose edge stops while its solution runs", () => {
  it("carries on when the edge starts again, and its solution has run once", async () => {
    const port = Number(new URL(stack.edge.baseURL).port);
    const response = await post({ taskset, agent: "oracle", tasks: [slowIndex], group_size: 1 });
    expect(response.status).toBe(200);
    const runId = response.headers.get("Location")!.split("/").pop()!;
    void readEvents(response).catch(() => []);
    const rolloutId = `${runId}-0`;
    // The solution has written its line and is still running (for 15 s more) when the edge stops: the
    // member's object, started again, asks for the solve under the same call id, and the host answers
    // with the run in flight rather than a second run (which would append a second line).
    for (let i = 0; !existsSync(solvedLog(rolloutId)); i++) {
      if (i > 1200) throw new Error("the member's solution never ran");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await stack.edge.stop();
    stack = await startAgentStack({ host, port, persistTo, configDir });
    const events = await readEvents(
      await fetch(`${stack.edge.baseURL}/v1/envs/rollouts/${runId}/events`, {
        headers: { Authorization: `Bearer ${key}` },
      }),
    );
    const [ended] = events.filter((e) => e.type === "rollout.ended").map((e) => e.data as RolloutEnded);
    // Reward 1 is solved.log with one line: the solution ran once. The tree is gone once it reported.
    expect(ended).toMatchObject({ rolloutId, outcome: "finished", reward: 1 });
    expect(await sandboxStatus(rolloutId)).toBe(404);
  }, 300_000);
});
