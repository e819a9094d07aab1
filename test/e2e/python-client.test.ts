/**
 * The Python client (clients/python) against `npm start`'s edge and sandbox host: the fixture task set
 * is pushed with `sextant envs push`, and the client's own unittest suite runs with SEXTANT_URL, SEXTANT_API_KEY and
 * SEXTANT_TASKSET set, so its live tests (sessions, steps, a lost step answer replayed, verify's
 * reward, errors' codes, another org's view, a rollout run's events and advantages) run against the
 * real routes instead of skipping.
 */
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ERROR_CODES } from "../../protocol/errors.js";
import { makeOrg, setAgentScripts, startAgentStack, type AgentStack } from "../support/agent-stack.js";
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

/**
 * The fixture set pushed with `sextant envs push`, from a copy (push writes its name map beside the
 * set); the copy's directory and the set's id.
 */
function pushFixtureSet(): { dir: string; id: string } {
  const dir = join(mkdtempSync(join(tmpdir(), "sextant-python-set-")), "taskset");
  cpSync(FIXTURE_SET, dir, { recursive: true });
  const run = stack.cli(["--json", "envs", "push", dir]);
  expect(run.code, run.stderr).toBe(0);
  return { dir, id: (JSON.parse(run.stdout) as { id: string }).id };
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
  "test_the_push_map_names_the_fixture_task",
  "test_a_session_solved_step_by_step_earns_the_reward",
  "test_an_untouched_tree_scores_zero",
  "test_a_step_whose_answer_is_lost_is_replayed_not_run_again",
  "test_errors_carry_the_edges_codes",
  "test_another_orgs_task_set_and_session_are_not_found",
  "test_a_group_of_two_earns_one_and_zero_and_opposite_advantages",
];

describe("the Python client against a local edge", () => {
  it("passes its unittest suite, the live tests included, against the pushed fixture set", async () => {
    const taskset = pushFixtureSet();
    const other = await makeOrg(stack.edge, "python-client-other");
    const run = await python(["-m", "unittest", "discover", "-v", "-s", "clients/python/tests"], {
      SEXTANT_URL: stack.edge.baseURL,
      SEXTANT_API_KEY: key,
      SEXTANT_TASKSET: taskset.id,
      SEXTANT_TASKSET_MAP: taskset.dir,
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
