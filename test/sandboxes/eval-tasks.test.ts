/**
 * The eval task set's writer (bench/tasks): a def and a small local source tree (a Node package
 * tested with `node --test`, a Python one tested with pytest) become Harbor task directories whose
 * reference solution scores 1 and whose untouched tree scores 0 in a sandbox host of the test's own,
 * as the environments run them; a def whose mutation does not name one place is refused.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseToml } from "smol-toml";
import { afterAll, describe, expect, it } from "vitest";
import { splitOf } from "../../bench/tasks/build.js";
import { DefRefused, TaskDef } from "../../bench/tasks/def.js";
import { writeTask, type WrittenTask } from "../../bench/tasks/write.js";
import { packTaskDir } from "../../client/envs/task-archive.js";
import { SolveResponse, VerifyResponse } from "../../protocol/agents/sandbox.js";
import { callId, isolationTestsRun, TOKEN, useHost, type TestHost } from "./harness.js";

const SOURCES = join(import.meta.dirname, "../fixtures/eval-task-source");
const out = mkdtempSync(join(tmpdir(), "sextant-eval-tasks-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const STATEMENT =
  "range(1, 3) returns [1, 2], but the README says the end is included: I expected [1, 2, 3], as range(2, 2) should be [2].";

function jsDef(edits: { file: string; before: string; after: string }[]): TaskDef {
  return TaskDef.parse({
    id: "clamp-range-inclusive-end",
    split: "train",
    source: { ecosystem: "npm", package: "clamp-range", version: "1.0.0", sha256: "a".repeat(64) },
    language: "javascript",
    mutation: { kind: "recorded", edits },
    statement: STATEMENT,
    test: { command: "node --test test/", files: ["test/"], timeoutSec: 60 },
    note: "off-by-one in the loop's end condition",
  });
}

const pyDef = TaskDef.parse({
  id: "clamp-py-upper-bound",
  split: "heldout",
  source: { ecosystem: "debian", package: "python-clamp", version: "1.0-1", sha256: "b".repeat(64) },
  language: "python",
  mutation: {
    kind: "reverted-fix",
    upstream: "1.0-1: clamp() limits values above the upper bound",
    edits: [{ file: "clamp/__init__.py", before: "n > high", after: "n > high + 1" }],
  },
  statement: "clamp(11, 0, 10) returns 11, above the upper bound; I expected 10, as for any value past it.",
  test: { command: "python3 -m pytest tests", files: ["tests"], timeoutSec: 60 },
  note: "wrong boundary in the upper check",
});

const RANGE_EDIT = { file: "index.js", before: "i <= end", after: "i < end" };
const built: Record<string, WrittenTask> = {};

describe("the eval task writer", () => {
  it("writes the Harbor layout: mutated tree, pristine tests, original files as the solution", async () => {
    built.js = await writeTask(jsDef([RANGE_EDIT]), join(SOURCES, "js"), { out, split: "train", check: true });
    const dir = built.js.dir;
    expect(dir).toBe(join(out, "train", "clamp-range-inclusive-end"));
    // The untouched package passes its 5 tests; the verifier needs all 5 and the mutated tree has fewer.
    expect(built.js.expected).toBe(5);
    expect(built.js.mutated).toMatch(/exited 1 with [0-4] passing; 5 passing needed/);

    const toml = parseToml(readFileSync(join(dir, "task.toml"), "utf8")) as Record<string, any>;
    expect(toml.metadata).toMatchObject({
      id: "clamp-range-inclusive-end",
      package: "clamp-range",
      version: "1.0.0",
      ecosystem: "npm",
      language: "javascript",
      split: "train",
      source_sha256: "a".repeat(64),
      mutation: "recorded",
    });
    expect(toml.verifier.timeout_sec).toBeGreaterThan(60);
    expect(readFileSync(join(dir, "instruction.md"), "utf8")).toContain(STATEMENT);
    expect(readFileSync(join(dir, "instruction.md"), "utf8")).not.toContain("i < end");
    expect(readFileSync(join(dir, "environment/Dockerfile"), "utf8")).toMatch(/^FROM node:20/m);

    const original = readFileSync(join(SOURCES, "js/index.js"), "utf8");
    expect(readFileSync(join(dir, "environment/index.js"), "utf8")).toBe(original.replace("i <= end", "i < end"));
    expect(readFileSync(join(dir, "solution/files/index.js"), "utf8")).toBe(original);
    expect(readFileSync(join(dir, "tests/files/test/index.test.js"), "utf8")).toBe(
      readFileSync(join(SOURCES, "js/test/index.test.js"), "utf8"),
    );
    expect(readFileSync(join(dir, "environment/test/index.test.js"), "utf8")).toBe(
      readFileSync(join(SOURCES, "js/test/index.test.js"), "utf8"),
    );
    for (const script of ["tests/test.sh", "solution/solve.sh"])
      expect(statSync(join(dir, script)).mode & 0o111, script).not.toBe(0);
    expect(readFileSync(join(dir, "tests/test.sh"), "utf8")).toMatch(/^expected=5$/m);

    // Packed as `sextant envs push` packs it, with nothing left out.
    expect((await packTaskDir(dir)).skipped).toEqual([]);
  }, 120_000);

  it("writes a pytest task whose verifier counts the passing tests from pytest's report", async () => {
    built.py = await writeTask(pyDef, join(SOURCES, "py"), { out, split: "heldout", check: true });
    expect(built.py.expected).toBe(3);
    expect(built.py.mutated).toMatch(/exited 1 with 2 passing; 3 passing needed/);
    expect(existsSync(join(built.py.dir, "tests/files/tests/test_clamp.py"))).toBe(true);
    const toml = parseToml(readFileSync(join(built.py.dir, "task.toml"), "utf8")) as Record<string, any>;
    expect(toml.metadata).toMatchObject({ ecosystem: "debian", language: "python", mutation: "reverted-fix" });
  }, 120_000);

  it("refuses a def whose before-text is missing from the file or occurs more than once", async () => {
    // A refused def leaves no task behind, not even one an earlier build wrote.
    const stale = join(out, "train", "clamp-range-refused");
    mkdirSync(join(stale, "tests"), { recursive: true });
    const refused = (edit: typeof RANGE_EDIT) => ({ ...jsDef([edit]), id: "clamp-range-refused" });
    const missing = refused({ file: "index.js", before: "i <= stop", after: "i < stop" });
    await expect(writeTask(missing, join(SOURCES, "js"), { out, split: "train", check: false })).rejects.toThrow(
      new DefRefused('index.js: the edit\'s "before" text is not in the file'),
    );
    expect(existsSync(stale)).toBe(false);
    // "return" occurs in both functions of index.js.
    const twice = refused({ file: "index.js", before: "return", after: "return void" });
    await expect(writeTask(twice, join(SOURCES, "js"), { out, split: "train", check: false })).rejects.toThrow(
      new DefRefused('index.js: the edit\'s "before" text occurs more than once in the file'),
    );
  });

  it("refuses a mutation the package's tests do not notice", async () => {
    // The tests never call clamp with a value between the bounds equal to one of them.
    const unseen = jsDef([
      { file: "index.js", before: "if (n < min) return min;", after: "if (n <= min) return min;" },
    ]);
    await expect(
      writeTask({ ...unseen, id: "clamp-range-unseen" }, join(SOURCES, "js"), { out, split: "train", check: true }),
    ).rejects.toThrow(/the mutated tree still passes the package's tests/);
    expect(existsSync(join(out, "train", "clamp-range-unseen"))).toBe(false);
  }, 120_000);

  it("holds out, per ecosystem, the five ids with the smallest SHA-256", () => {
    const defs = Array.from({ length: 8 }, (_, i) => [
      { ...jsDef([RANGE_EDIT]), id: `npm-task-${i}` },
      { ...pyDef, id: `deb-task-${i}` },
    ]).flat();
    const split = splitOf(defs);
    for (const prefix of ["npm-task-", "deb-task-"]) {
      const ids = defs.map((d) => d.id).filter((id) => id.startsWith(prefix));
      const held = ids.filter((id) => split.get(id) === "heldout");
      expect(held).toHaveLength(5);
      const sha = (id: string) => createHash("sha256").update(id).digest("hex");
      const maxHeld = held.map(sha).sort().at(-1)!;
      for (const id of ids.filter((i) => !held.includes(i))) expect(sha(id) > maxHeld, id).toBe(true);
    }
  });
});

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

let sandboxes = 0;
async function verify(host: TestHost, archive: string, solve: boolean): Promise<VerifyResponse> {
  const id = `eval-task-${++sandboxes}`;
  await host.create(id, { task: { archive } });
  if (solve) {
    const s = await host.request("POST", `/v1/sandboxes/${id}/solve/${callId()}`, {});
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    expect(SolveResponse.parse(s.body).exitCode, s.body.log).toBe(0);
  }
  const r = await host.request("POST", `/v1/sandboxes/${id}/verify/${callId()}`, {});
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return VerifyResponse.parse(r.body);
}

describe.runIf(isolationTestsRun)("a written eval task in a sandbox host", () => {
  const host = useHost({ driver: "bubblewrap" });

  for (const kind of ["js", "py"] as const)
    it(`scores 1 for the reference solution and 0 for the untouched tree (${kind})`, async () => {
      const task = built[kind];
      if (!task) throw new Error(`the ${kind} task was not written`);
      const archive = await putArchive(host, task.dir);
      const solved = await verify(host, archive, true);
      expect(solved.reward, solved.log).toBe(1);
      expect(solved.log).toContain(`with ${task.expected} passing; ${task.expected} passing needed`);
      const untouched = await verify(host, archive, false);
      expect(untouched.reward, untouched.log).toBe(0);
      expect(untouched.log).toMatch(/sextant-verifier: the tests exited 1 with \d+ passing/);
    }, 120_000);
});
