import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { afterAll, expect, it } from "vitest";
import { DiffResponse } from "../../protocol/agents/sandbox.js";
import { callId, useHost } from "./harness.js";

const host = useHost();
const scratch = mkdtempSync(join(tmpdir(), "sextant-diff-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const ORIGINAL: Record<string, string> = {
  "README.md": "# Demo\n\nSome text.\n",
  "src/a.ts": Array.from({ length: 30 }, (_, i) => `export const v${i} = ${i};\n`).join(""),
  "src/no-newline.txt": "one\ntwo",
  "src/gone.ts": "export {};\n",
  "src/empty-later.txt": "soon empty\n",
  "untouched.txt": "same\n",
};

/** Every file under a directory, by path relative to it. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else out[relative(dir, path)] = readFileSync(path, "utf8");
    }
  };
  walk(dir);
  return out;
}

it("answers an empty diff for an untouched tree", async () => {
  await host.create("diff-empty");
  await host.upload("diff-empty", ORIGINAL);
  const r = await host.request("GET", "/v1/sandboxes/diff-empty/diff");
  expect(r).toEqual({ status: 200, body: { diff: "", filesChanged: 0, insertions: 0, deletions: 0, skipped: [] } });
});

it("answers a diff that `git apply` turns the uploaded tree into the tree now with", async () => {
  const id = "diff-apply";
  await host.create(id);
  await host.upload(id, ORIGINAL);
  const call = (tool: string, args: unknown) => host.call(id, callId(), tool, args);
  await call("edit_file", { path: "src/a.ts", oldText: "v3 = 3;", newText: "v3 = 33;\nexport const extra = 1;" });
  await call("edit_file", { path: "src/a.ts", oldText: "export const v27 = 27;\n", newText: "" });
  await call("edit_file", { path: "src/no-newline.txt", oldText: "two", newText: "two\nthree\n" });
  await call("create_file", { path: "src/new/created.ts", content: "export const created = true;\n" });
  await call("create_file", { path: "src/empty-new.txt", content: "" });
  await call("delete_file", { path: "src/gone.ts" });
  await call("run_terminal", { command: ": > src/empty-later.txt && printf 'from a command' > cmd.txt" });

  const r = await host.request("GET", `/v1/sandboxes/${id}/diff`);
  expect(r.status).toBe(200);
  const diff = DiffResponse.parse(r.body);
  expect(diff.diff).toContain("--- /dev/null\n+++ b/src/new/created.ts");
  expect(diff.diff).toContain("--- a/src/gone.ts\n+++ /dev/null");
  expect(diff).toMatchObject({ filesChanged: 7, insertions: 6, deletions: 5 });

  const copy = join(scratch, "apply");
  for (const [path, content] of Object.entries(ORIGINAL)) {
    mkdirSync(dirname(join(copy, path)), { recursive: true });
    writeFileSync(join(copy, path), content);
  }
  writeFileSync(join(scratch, "change.patch"), diff.diff);
  const applied = spawnSync("git", ["apply", "--verbose", join(scratch, "change.patch")], {
    cwd: copy,
    encoding: "utf8",
  });
  expect(applied.stderr).not.toMatch(/error/i);
  expect(applied.status).toBe(0);
  expect(snapshot(copy)).toEqual(snapshot(join(host.root, id, "disk", "tree")));
});

it("lists the changed files it leaves out, binary and over its size cap, and why", async () => {
  await host.create("diff-skipped");
  await host.upload("diff-skipped", { "small.txt": "one\n" });
  const r = await host.call("diff-skipped", callId(), "run_terminal", {
    command: "printf 'a\\0b' > bin.dat; head -c 3000000 /dev/zero | tr '\\0' x > big.txt; echo two >> small.txt",
  });
  expect(r.ok).toBe(true);
  const diff = DiffResponse.parse((await host.request("GET", "/v1/sandboxes/diff-skipped/diff")).body);
  expect(diff.skipped).toEqual([
    { path: "big.txt", reason: "too_large" },
    { path: "bin.dat", reason: "binary" },
  ]);
  expect(diff.filesChanged).toBe(1);
  expect(diff.diff).toContain("+two");
  expect(diff.diff).not.toContain("big.txt");
});
