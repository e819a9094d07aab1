import { createHash } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import { callId, useHost } from "./harness.js";

const host = useHost();
const ID = "tools-sandbox";
const FILES = {
  "README.md": "# Demo\n",
  "src/a.ts": "export const a = 1;\nexport const b = 2;\n// TODO: c\n",
  "src/b.ts": "import { a } from './a';\nconsole.log(a); // TODO\n",
  "src/dup.txt": "same\nsame\n",
  "src/no-newline.txt": "one\ntwo",
  "bin/blob.bin": "\u0000\u0001\u0002binary",
  "node_modules/pkg/index.js": "// TODO inside node_modules\n",
  ".git/HEAD": "ref: refs/heads/main TODO\n",
};
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");
const call = (tool: string, args: unknown) => host.call(ID, callId(), tool, args);
const result = async (tool: string, args: unknown) => {
  const r = await call(tool, args);
  if (!r.ok) throw new Error(`${tool}: ${JSON.stringify(r.error)}`);
  return r.result;
};
const errorOf = async (tool: string, args: unknown) => {
  const r = await call(tool, args);
  expect(r.ok).toBe(false);
  return r.error.code as string;
};

beforeAll(async () => {
  await host.create(ID, { limits: { outputBytes: 4096 } });
  await host.upload(ID, FILES);
  await result("run_terminal", {
    command: "ln -s /etc outside-dir && ln -s /etc/hostname outside-file && ln -s src/a.ts inside-link",
  });
});

describe("read_file", () => {
  it("reads a whole file with its line count and hash", async () => {
    expect(await result("read_file", { path: "src/a.ts" })).toEqual({
      path: "src/a.ts",
      content: FILES["src/a.ts"],
      startLine: 1,
      endLine: 3,
      lines: 3,
      hash: sha256(FILES["src/a.ts"]),
      truncated: false,
    });
  });

  it("reads a line range", async () => {
    const r = await result("read_file", { path: "src/a.ts", startLine: 2, endLine: 2 });
    expect(r).toMatchObject({ content: "export const b = 2;\n", startLine: 2, endLine: 2, lines: 3 });
  });

  it("reads through a symlink that stays in the tree", async () => {
    expect((await result("read_file", { path: "inside-link" })).content).toBe(FILES["src/a.ts"]);
  });

  it("caps a long file at the output limit and says so", async () => {
    await result("run_terminal", { command: "seq 1 5000 > long.txt" });
    const r = await result("read_file", { path: "long.txt" });
    expect(r.truncated).toBe(true);
    expect(Buffer.byteLength(r.content)).toBeLessThanOrEqual(4096);
    expect(r.lines).toBe(5000);
  });

  it("answers not_found, is_directory and binary", async () => {
    expect(await errorOf("read_file", { path: "missing.ts" })).toBe("not_found");
    expect(await errorOf("read_file", { path: "src" })).toBe("is_directory");
    expect(await errorOf("read_file", { path: "bin/blob.bin" })).toBe("binary");
  });

  it("refuses `..`, absolute paths and symlinks that lead outside the tree", async () => {
    expect(await errorOf("read_file", { path: "../x" })).toBe("invalid_arguments");
    expect(await errorOf("read_file", { path: "/etc/passwd" })).toBe("invalid_arguments");
    const viaDir = await call("read_file", { path: "outside-dir/passwd" });
    const viaFile = await call("read_file", { path: "outside-file" });
    for (const r of [viaDir, viaFile]) {
      expect(r.ok).toBe(false);
      expect(JSON.stringify(r)).not.toContain("root:");
    }
  });
});

describe("list_dir", () => {
  it("lists the tree two levels deep, directories with a slash, without descending into .git or node_modules", async () => {
    const { entries, truncated } = await result("list_dir", {});
    expect(truncated).toBe(false);
    expect(entries).toEqual(expect.arrayContaining(["README.md", "src/", "src/a.ts", ".git/", "node_modules/"]));
    expect(entries).not.toContain(".git/HEAD");
    expect(entries).not.toContain("node_modules/pkg/");
  });

  it("lists a subdirectory at depth 1 with paths relative to the tree", async () => {
    const { entries } = await result("list_dir", { path: "src", depth: 1 });
    expect(entries).toEqual(["src/a.ts", "src/b.ts", "src/dup.txt", "src/no-newline.txt"]);
  });

  it("answers not_found for a missing directory and refuses one outside the tree", async () => {
    expect(await errorOf("list_dir", { path: "nope" })).toBe("not_found");
    const outside = await call("list_dir", { path: "outside-dir" });
    expect(outside.ok).toBe(false);
  });
});

describe("grep", () => {
  it("finds matches with path and line, skipping binary files, .git and node_modules", async () => {
    const { matches, truncated } = await result("grep", { pattern: "TODO" });
    expect(truncated).toBe(false);
    expect(matches).toEqual([
      { path: "src/a.ts", line: 3, text: "// TODO: c" },
      { path: "src/b.ts", line: 2, text: "console.log(a); // TODO" },
    ]);
  });

  it("honours ignoreCase, path and maxResults", async () => {
    const r = await result("grep", { pattern: "export", path: "src", ignoreCase: true, maxResults: 1 });
    expect(r).toEqual({ matches: [{ path: "src/a.ts", line: 1, text: "export const a = 1;" }], truncated: true });
  });

  it("answers invalid_arguments for a bad regular expression", async () => {
    expect(await errorOf("grep", { pattern: "(unclosed" })).toBe("invalid_arguments");
  });

  it("stops a pattern that backtracks without end, and answers timeout", async () => {
    await host.create("grep-redos", { limits: { commandTimeoutMs: 300 } });
    await host.upload("grep-redos", { "a.txt": `${"a".repeat(40)}b\n` });
    const r = await host.call("grep-redos", callId(), "grep", { pattern: "(a+)+$" });
    expect(r).toMatchObject({ ok: false, error: { code: "timeout" } });
    const after = await host.call("grep-redos", callId(), "grep", { pattern: "a+b" });
    expect(after.result.matches).toHaveLength(1);
  });
});

describe("edit_file", () => {
  it("replaces text that occurs once and returns the new hash", async () => {
    await result("create_file", { path: "edit/me.txt", content: "alpha\nbeta\n" });
    const { hash } = await result("read_file", { path: "edit/me.txt" });
    const r = await result("edit_file", {
      path: "edit/me.txt",
      oldText: "beta",
      newText: "$& gamma",
      expectedHash: hash,
    });
    expect(r).toEqual({ path: "edit/me.txt", hash: sha256("alpha\n$& gamma\n") });
    expect((await result("read_file", { path: "edit/me.txt" })).content).toBe("alpha\n$& gamma\n");
  });

  it("answers not_found, no_match, ambiguous_match and hash_mismatch", async () => {
    expect(await errorOf("edit_file", { path: "missing.txt", oldText: "a", newText: "b" })).toBe("not_found");
    expect(await errorOf("edit_file", { path: "src/dup.txt", oldText: "absent", newText: "b" })).toBe("no_match");
    expect(await errorOf("edit_file", { path: "src/dup.txt", oldText: "same", newText: "b" })).toBe("ambiguous_match");
    const stale = { path: "src/a.ts", oldText: "a = 1", newText: "a = 9", expectedHash: "0".repeat(64) };
    expect(await errorOf("edit_file", stale)).toBe("hash_mismatch");
  });

  it("refuses to edit through a symlink that leads outside the tree", async () => {
    const r = await call("edit_file", { path: "outside-file", oldText: "a", newText: "b" });
    expect(r.ok).toBe(false);
  });
});

describe("create_file and delete_file", () => {
  it("creates a file and its directories, then deletes it", async () => {
    expect(await result("create_file", { path: "new/dir/file.txt", content: "hi\n" })).toEqual({
      path: "new/dir/file.txt",
      hash: sha256("hi\n"),
    });
    const ran = await result("run_terminal", { command: "cat new/dir/file.txt && echo more >> new/dir/file.txt" });
    expect(ran).toMatchObject({ exitCode: 0, stdout: "hi\n" });
    expect(await result("delete_file", { path: "new/dir/file.txt" })).toEqual({ path: "new/dir/file.txt" });
    expect(await errorOf("read_file", { path: "new/dir/file.txt" })).toBe("not_found");
  });

  it("answers exists and not_found", async () => {
    expect(await errorOf("create_file", { path: "README.md", content: "x" })).toBe("exists");
    expect(await errorOf("delete_file", { path: "missing.txt" })).toBe("not_found");
  });

  it("refuses to create or delete through a symlink that leads outside the tree", async () => {
    expect((await call("create_file", { path: "outside-dir/sextant-test.txt", content: "x" })).ok).toBe(false);
    expect((await call("delete_file", { path: "outside-dir/hostname" })).ok).toBe(false);
  });
});

describe("run_terminal", () => {
  it("returns exit code and output", async () => {
    const r = await result("run_terminal", { command: "echo out; echo err >&2; exit 3" });
    expect(r).toMatchObject({
      exitCode: 3,
      signal: null,
      timedOut: false,
      stdout: "out\n",
      stderr: "err\n",
      stdoutTruncated: false,
      stderrTruncated: false,
    });
    expect(typeof r.durationMs).toBe("number");
  });

  it("caps each stream at the output limit and says so", async () => {
    const r = await result("run_terminal", { command: "seq 1 100000; seq 1 100000 >&2" });
    expect(r).toMatchObject({ exitCode: 0, stdoutTruncated: true, stderrTruncated: true });
    expect(Buffer.byteLength(r.stdout)).toBeLessThanOrEqual(4096);
    expect(Buffer.byteLength(r.stderr)).toBeLessThanOrEqual(4096);
  });

  it("kills a command at its timeout, and charges it no more than its timeout", async () => {
    const before = (await host.request("GET", `/v1/sandboxes/${ID}`)).body.commandSeconds as number;
    const r = await result("run_terminal", { command: "sleep 30", timeoutMs: 200 });
    expect(r).toMatchObject({ timedOut: true, signal: "SIGKILL", exitCode: null });
    // The kill itself takes time after the timeout fires; the command is not charged for it.
    expect(r.durationMs).toBeLessThanOrEqual(200);
    const after = (await host.request("GET", `/v1/sandboxes/${ID}`)).body.commandSeconds as number;
    expect(after - before).toBeLessThanOrEqual(0.2 + 1e-9);
  });
});

describe("read_lints", () => {
  it("finds nothing to run in a tree without linters", async () => {
    expect(await result("read_lints", {})).toEqual({ linters: [], diagnostics: [] });
  });

  it("runs the project's tsc and eslint and parses their diagnostics", async () => {
    await host.create("lints-sandbox");
    const tsc = [
      "#!/bin/sh",
      'echo "$@" > tsc-args.txt',
      "echo \"src/a.ts(2,7): error TS2322: Type 'string' is not assignable to type 'number'.\"",
      "exit 2",
    ].join("\n");
    const eslint = [
      "#!/bin/sh",
      `echo '[{"filePath":"'"$PWD"'/src/b.ts","messages":[{"line":1,"column":5,"severity":1,"message":"unused","ruleId":"no-unused-vars"}]}]'`,
      "exit 1",
    ].join("\n");
    await host.upload(
      "lints-sandbox",
      {
        "tsconfig.json": "{}",
        "eslint.config.js": "export default [];",
        "node_modules/.bin/tsc": tsc,
        "node_modules/.bin/eslint": eslint,
        "src/a.ts": "x",
        "src/b.ts": "y",
      },
      ["node_modules/.bin/tsc", "node_modules/.bin/eslint"],
    );
    const r = await host.call("lints-sandbox", callId(), "read_lints", {});
    expect(r.ok).toBe(true);
    expect(r.result.linters).toEqual([
      { name: "tsc", exitCode: 2, timedOut: false },
      { name: "eslint", exitCode: 1, timedOut: false },
    ]);
    expect(r.result.diagnostics).toEqual([
      {
        path: "src/a.ts",
        line: 2,
        column: 7,
        severity: "error",
        message: "Type 'string' is not assignable to type 'number'.",
        source: "TS2322",
      },
      { path: "src/b.ts", line: 1, column: 5, severity: "warning", message: "unused", source: "no-unused-vars" },
    ]);
    const args = await host.call("lints-sandbox", callId(), "read_file", { path: "tsc-args.txt" });
    expect(args.result.content).toBe("--noEmit --pretty false\n");
  });

  it("gives its linters one timeout between them, not one each", async () => {
    await host.create("slow-lints-sandbox");
    await host.upload(
      "slow-lints-sandbox",
      {
        "tsconfig.json": "{}",
        "eslint.config.js": "export default [];",
        "node_modules/.bin/tsc": "#!/bin/sh\nsleep 30\n",
        "node_modules/.bin/eslint": "#!/bin/sh\necho '[]'\n",
      },
      ["node_modules/.bin/tsc", "node_modules/.bin/eslint"],
    );
    const r = await host.call("slow-lints-sandbox", callId(), "read_lints", { timeoutMs: 300 });
    expect(r.ok).toBe(true);
    // tsc used the whole timeout, so eslint was not started.
    expect(r.result).toEqual({
      linters: [
        { name: "tsc", exitCode: null, timedOut: true },
        { name: "eslint", exitCode: null, timedOut: true },
      ],
      diagnostics: [],
    });
    const info = await host.request("GET", "/v1/sandboxes/slow-lints-sandbox");
    expect(info.body.commandSeconds).toBeLessThanOrEqual(0.3);
  });
});
