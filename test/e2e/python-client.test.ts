/**
 * The Python client (clients/python) against `npm start`'s edge and sandbox host: the fixture task set
 * is pushed, and the client's own unittest suite runs with SEXTANT_URL, SEXTANT_API_KEY and
 * SEXTANT_TASKSET set, so its live tests (sessions, steps, a lost step answer replayed, verify's
 * reward, errors' codes, another org's view, a rollout run's events and advantages) run against the
 * real routes instead of skipping.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { gzipSync } from "node:zlib";
import { packTar } from "modern-tar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ERROR_CODES } from "../../protocol/errors.js";
import { makeOrg, rawCall, setAgentScripts, startAgentStack, type AgentStack } from "../support/agent-stack.js";
import { ROOT, savedLocalEdge } from "../support/local-edge.js";

const PYTHON_CLIENT = join(ROOT, "clients/python");
const FIXTURE_SET = join(PYTHON_CLIENT, "tests/fixtures/taskset");

let stack: AgentStack;
let key: string;

/** What the rollout test's policy does with greeting-file: an even seed solves it, an odd one writes the wrong line. */
const GREETING_SCRIPT = {
  name: "python-client-greeting",
  match: "hello, sextant",
  turns: [
    { toolCalls: [{ name: "create_file", arguments: { path: "greeting.txt", content: "hello, sextant\n" } }] },
    { toolCalls: [{ name: "finish", arguments: { summary: "Wrote greeting.txt." } }] },
  ],
  variants: [
    [
      { toolCalls: [{ name: "create_file", arguments: { path: "greeting.txt", content: "hello, sextant\n" } }] },
      { toolCalls: [{ name: "finish", arguments: { summary: "Wrote greeting.txt." } }] },
    ],
    [
      { toolCalls: [{ name: "create_file", arguments: { path: "greeting.txt", content: "hi\n" } }] },
      { toolCalls: [{ name: "finish", arguments: { summary: "Wrote greeting.txt." } }] },
    ],
  ],
};

beforeAll(async () => {
  stack = await startAgentStack();
  key = savedLocalEdge(stack.edge).apiKey;
  await setAgentScripts(stack.edge, [GREETING_SCRIPT]);
});
afterAll(async () => {
  await stack?.edge.stop();
});

/** A task directory as a gzip'd tar, entries sorted and dated 0, paths relative to the task's root. */
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
  const tar = await packTar(
    files.map((path) => {
      const body = readFileSync(path);
      return {
        header: {
          name: relative(dir, path),
          type: "file" as const,
          size: body.byteLength,
          mode: statSync(path).mode & 0o777,
          mtime: new Date(0),
        },
        body,
      };
    }),
  );
  return gzipSync(tar, { level: 9 });
}

/** Pushes each task directory of `dir` through the archive and task set routes; the set's id. */
async function pushTaskSet(dir: string): Promise<string> {
  const tasks = [];
  for (const name of readdirSync(dir).sort()) {
    const archive = await archiveOf(join(dir, name));
    const sha256 = createHash("sha256").update(archive).digest("hex");
    const put = await fetch(`${stack.edge.baseURL}/v1/envs/archives/${sha256}`, {
      method: "PUT",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/gzip" },
      body: new Uint8Array(archive),
    });
    expect(put.status, await put.clone().text()).toBe(201);
    tasks.push({ sha256, bytes: archive.byteLength });
  }
  const created = await rawCall(stack.edge, key, "POST", "/v1/envs/tasksets", { tasks });
  expect(created.status, JSON.stringify(created.json)).toBe(201);
  return (created.json as { id: string }).id;
}

function python(args: string[], env: Record<string, string>): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      "python3",
      args,
      { cwd: ROOT, env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1", ...env }, maxBuffer: 16 * 2 ** 20 },
      (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === "number" ? err.code : -1) : 0, output: stdout + stderr }),
    );
  });
}

const LIVE_TESTS = [
  "test_the_task_set_is_the_fixture_set",
  "test_a_session_solved_step_by_step_earns_the_reward",
  "test_an_untouched_tree_scores_zero",
  "test_a_step_whose_answer_is_lost_is_replayed_not_run_again",
  "test_errors_carry_the_edges_codes",
  "test_another_orgs_task_set_and_session_are_not_found",
  "test_a_group_of_two_earns_one_and_zero_and_opposite_advantages",
];

describe("the Python client against a local edge", () => {
  it("passes its unittest suite, the live tests included, against the pushed fixture set", async () => {
    const taskset = await pushTaskSet(FIXTURE_SET);
    const other = await makeOrg(stack.edge, "python-client-other");
    const run = await python(["-m", "unittest", "discover", "-v", "-s", "clients/python/tests"], {
      SEXTANT_URL: stack.edge.baseURL,
      SEXTANT_API_KEY: key,
      SEXTANT_TASKSET: taskset,
      SEXTANT_OTHER_API_KEY: other.key,
      SEXTANT_POLICY: "chat-simulated",
    });
    expect(run.code, run.output).toBe(0);
    // Each live test ran and passed: none of them skipped for want of an edge.
    for (const name of LIVE_TESTS) expect(run.output, run.output).toMatch(new RegExp(`${name} \\(.*\\) \\.\\.\\. ok`));
    expect(run.output).not.toMatch(/skipped/);
  }, 300_000);

  it("holds the same code and status table as protocol/errors.ts", async () => {
    const run = await python(
      [
        "-c",
        "import json, sys; sys.path.insert(0, 'clients/python'); from sextant_envs._errors import STATUS_BY_CODE as s; print(json.dumps(s))",
      ],
      {},
    );
    expect(run.code, run.output).toBe(0);
    expect(JSON.parse(run.output)).toEqual(
      Object.fromEntries(Object.entries(ERROR_CODES).map(([code, { status }]) => [code, status])),
    );
  });
});
