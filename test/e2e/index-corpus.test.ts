import { execFileSync } from "node:child_process";
import { chmodSync, closeSync, mkdirSync, mkdtempSync, openSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { edgeWithCliForSuite } from "../support/local-edge.js";

/** Permissions do not stop root: the unreadable file is only part of the corpus for an ordinary user. */
const CAN_LOCK = process.getuid?.() !== 0;

/**
 * A tree of everything Linux allows that a sync cannot carry or a scanner may trip on. Returns the
 * tree and the paths (as the scan reads them) of the ordinary files that must be indexed.
 */
function hostileCorpus(): { root: string; indexed: string[] } {
  const root = mkdtempSync(join(tmpdir(), "sextant-corpus-"));
  const indexed: string[] = [];
  const file = (path: string, content: string | Buffer = `content of ${JSON.stringify(path)}\n`) => {
    writeFileSync(join(root, path), content);
    indexed.push(path);
  };
  file("plain.ts", "export const plain = 1;\n");
  for (const name of [
    "new\nline.ts",
    "carriage\rreturn.ts",
    "tab\there.ts",
    "bell\u0007.ts",
    "del\u007f.ts",
    "esc\u001b[31m.ts",
  ])
    file(name);
  file(" leading and trailing .ts ");
  file("ünïcödé-名前.py", "def f(): pass\n");
  // Names that are not UTF-8: Linux allows any bytes but "/" and NUL.
  for (const bytes of [[0xff, 0xfe], [0x61, 0xc3, 0x28, 0x2e, 0x74, 0x73], [0x80]]) {
    writeFileSync(Buffer.concat([Buffer.from(`${root}/`), Buffer.from(bytes)]), "not utf-8\n");
  }
  // A 4,000-byte path, in components of at most 255 bytes, as file systems require.
  const long = Array.from({ length: 15 }, (_, i) => `${i}`.padEnd(250, "l"));
  mkdirSync(join(root, ...long), { recursive: true });
  file(join(...long, "x".repeat(200)));
  // 200 directories deep.
  const deep = Array.from({ length: 200 }, () => "d");
  mkdirSync(join(root, ...deep), { recursive: true });
  writeFileSync(join(root, ...deep, "deep.ts"), "deep\n");
  // Symlink loops, and a link out of the workspace.
  symlinkSync("loop-b", join(root, "loop-a"));
  symlinkSync("loop-a", join(root, "loop-b"));
  symlinkSync(".", join(root, "self"));
  symlinkSync("/etc/hostname", join(root, "outside"));
  execFileSync("mkfifo", [join(root, "fifo")]);
  if (CAN_LOCK) {
    writeFileSync(join(root, "locked.ts"), "secret\n");
    chmodSync(join(root, "locked.ts"), 0o000);
  }
  // Near the 1 MiB cap: short lines (whose newlines JSON doubles), and one single line.
  writeFileSync(join(root, "short-lines.txt"), "ab\n".repeat(1_040_000 / 3));
  const line = Array.from({ length: 1_040_000 / 8 }, (_, i) =>
    ((i * 2654435761) % 99999999).toString(16).padStart(8, "0"),
  ).join("");
  writeFileSync(join(root, "one-line.txt"), line);
  // An empty file and an empty directory.
  file("empty.ts", "");
  mkdirSync(join(root, "empty-dir"));
  const fd = openSync(join(root, "last.ts"), "w");
  closeSync(fd);
  indexed.push("last.ts");
  return { root, indexed };
}

describe("indexing a corpus of hostile names and file kinds", () => {
  const { cli } = edgeWithCliForSuite();

  it("completes, indexes every ordinary file, and names everything it skipped", () => {
    const { root, indexed } = hostileCorpus();
    const run = cli(["--json", "index", root]);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report.sync.converged).toBe(true);
    const named = new Map<string, string>(
      (report.skippedFiles as { path: string; reason: string }[]).map((f) => [f.path, f.reason]),
    );
    // Near the cap: the file of short lines is indexed, its chunks staged over several requests;
    // the single line is named, as a file of overlong lines (generated, like a minified bundle).
    expect(named.has("short-lines.txt")).toBe(false);
    expect(named.get("one-line.txt")).toBe("generated");
    expect(report.sync.stagedParts).toBeGreaterThan(0);
    // Every ordinary file is in the tree.
    expect(report.files).toBe(indexed.length + 1);
    for (const link of ["loop-a", "loop-b", "self", "outside"]) expect(named.get(link)).toBe("symlink");
    expect(named.get("fifo")).toBe("special");
    expect([...named].filter(([, why]) => why === "pathTooLong").map(([path]) => path)).toEqual([
      Array.from({ length: 64 }, () => "d").join("/"),
    ]);
    expect([...named].filter(([, why]) => why === "badName")).toHaveLength(3);
    if (CAN_LOCK) expect(named.get("locked.ts")).toBe("unreadable");
    for (const path of indexed) expect(named.has(path), path).toBe(false);
    expect(report.skippedFiles).toHaveLength(CAN_LOCK ? 11 : 10);

    // Human output names them, one printable line each, and a second run finds the tree in sync.
    const human = cli(["index", root]);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain("no changes; in sync");
    expect(human.stdout).toContain("skipped fifo: not a regular file");
    expect(JSON.parse(cli(["--json", "status", root]).stdout).inSync).toBe(true);
  });
});
