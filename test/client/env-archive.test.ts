/**
 * Task archives as `sextant envs push` makes them: the same files give the same bytes wherever and
 * whenever they are packed, the host's own unpacking reads them back, and what a task directory
 * may hold that an archive must not is skipped and named, never fatal to the rest of a set.
 */
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  truncateSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createTarDecoder } from "modern-tar";
import { afterAll, describe, expect, it } from "vitest";
import { sha256Hex, unpackTaskArchive } from "../../protocol/envs/task-archive.js";
import { checkTaskDir, packTaskDir, TASKSET_FILE } from "../../client/envs/task-archive.js";
import { checkTaskSet } from "../../client/envs/task-set.js";

const FIXTURE = join(import.meta.dirname, "../fixtures/env-tasks/median-even");
const dirs: string[] = [];
const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "sextant-env-archive-"));
  dirs.push(dir);
  return dir;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function headers(archive: Uint8Array) {
  const out: {
    name: string;
    mode?: number;
    mtime?: Date;
    uid?: number;
    gid?: number;
    uname?: string;
    gname?: string;
    type?: string;
  }[] = [];
  const stream = new Blob([archive as Uint8Array<ArrayBuffer>])
    .stream()
    .pipeThrough(new DecompressionStream("gzip"))
    .pipeThrough(createTarDecoder());
  for await (const entry of stream as unknown as AsyncIterable<{
    header: (typeof out)[number];
    body: ReadableStream;
  }>) {
    out.push(entry.header);
    await entry.body.cancel();
  }
  return out;
}

describe("task archives", () => {
  it("are the same bytes for the same files, whatever their times, owners, order of creation or non-executable mode bits", async () => {
    const first = await packTaskDir(FIXTURE);
    const copy = join(tempDir(), "task");
    cpSync(FIXTURE, copy, { recursive: true });
    utimesSync(join(copy, "instruction.md"), new Date(2001, 1, 1), new Date(2001, 1, 1));
    chmodSync(join(copy, "task.toml"), 0o600);
    chmodSync(join(copy, "solution/solve.sh"), 0o700);
    // A map left by an earlier push is not part of the task.
    writeFileSync(join(copy, TASKSET_FILE), "{}");
    const second = await packTaskDir(copy);
    expect(second.sha256).toBe(first.sha256);
    expect(Buffer.from(second.archive).equals(Buffer.from(first.archive))).toBe(true);
    expect(first.sha256).toBe(await sha256Hex(first.archive));

    // gzip: no time (bytes 4-7) and no OS (byte 9).
    expect([...first.archive.subarray(4, 8)]).toEqual([0, 0, 0, 0]);
    expect(first.archive[9]).toBe(255);
    const entries = await headers(first.archive);
    const names = entries.map((h) => h.name);
    expect(names).toEqual([...names].sort());
    expect(names).toContain("tests/test.sh");
    for (const h of entries) {
      expect(h.type ?? "file").toBe("file");
      expect(h.mtime?.getTime()).toBe(0);
      expect([h.uid, h.gid, h.uname ?? "", h.gname ?? ""]).toEqual([0, 0, "", ""]);
      expect(h.mode).toBe(["tests/test.sh", "solution/solve.sh"].includes(h.name) ? 0o755 : 0o644);
    }
  });

  it("unpack on the host's side to the files they were made of", async () => {
    const packed = await packTaskDir(FIXTURE);
    const unpacked = await unpackTaskArchive(packed.archive);
    expect([...unpacked.files.keys()].sort()).toEqual([...packed.files.keys()].sort());
    for (const [path, bytes] of packed.files)
      expect(Buffer.from(unpacked.files.get(path)!).equals(Buffer.from(bytes))).toBe(true);
    expect([...unpacked.executable].sort()).toEqual(["solution/solve.sh", "tests/test.sh"]);
  });

  it("skip symlinks, FIFOs, sockets' kin, huge files and names a tree cannot hold, naming each, and keep the rest", async () => {
    const dir = join(tempDir(), "task");
    cpSync(FIXTURE, dir, { recursive: true });
    symlinkSync("/etc/passwd", join(dir, "environment/passwd"));
    symlinkSync("../instruction.md", join(dir, "tests/instruction-link.md"));
    expect(spawnSync("mkfifo", [join(dir, "environment/pipe")]).status).toBe(0);
    writeFileSync(join(dir, "environment/huge.bin"), "");
    truncateSync(join(dir, "environment/huge.bin"), 64 * 2 ** 20 + 1);
    writeFileSync(join(dir, "environment/line\nbreak.txt"), "x");
    writeFileSync(join(dir, "environment/back\\slash.txt"), "x");
    writeFileSync(Buffer.from(`${dir}/environment/latin1-\xe9.txt`, "latin1"), "x");
    writeFileSync(join(dir, "environment/café menu.txt"), "kept");

    const checked = await checkTaskDir(dir);
    const skipped = Object.fromEntries(checked.skipped.map((s) => [s.path, s.reason]));
    expect(skipped).toEqual({
      "environment/passwd": "symlink",
      "tests/instruction-link.md": "symlink",
      "environment/pipe": "special",
      "environment/huge.bin": "tooLarge",
      "environment/line\nbreak.txt": "badName",
      "environment/back\\slash.txt": "badName",
      "environment/latin1-\ufffd.txt": "badName",
    });
    expect(checked.files.has("environment/café menu.txt")).toBe(true);
    expect(checked.task.startingTree.has("café menu.txt")).toBe(false); // not COPYd by the Dockerfile
    expect(checked.sha256).not.toBe((await packTaskDir(FIXTURE)).sha256);
  });

  it("name a task refused for what a skip took from it, and still check the others of the set", async () => {
    const set = tempDir();
    cpSync(FIXTURE, join(set, "good"), { recursive: true });
    cpSync(FIXTURE, join(set, "linked-test"), { recursive: true });
    rmSync(join(set, "linked-test/tests/test.sh"));
    symlinkSync("/bin/true", join(set, "linked-test/tests/test.sh"));
    cpSync(FIXTURE, join(set, "builds"), { recursive: true });
    writeFileSync(join(set, "builds/environment/Dockerfile"), "FROM node:20\nWORKDIR /workspace\nRUN npm install\n");
    mkdirSync(join(set, "not-a-task"));

    const checked = await checkTaskSet(set);
    expect(checked.ready.map((t) => t.name)).toEqual(["good"]);
    const refused = Object.fromEntries(checked.refused.map((t) => [t.name, t]));
    expect(Object.keys(refused).sort()).toEqual(["builds", "linked-test"]);
    expect(refused["linked-test"]!.reason).toMatch(/^tests\/test\.sh: is missing/);
    expect(refused["linked-test"]!.skipped).toEqual([{ path: "tests/test.sh", reason: "symlink" }]);
    expect(refused.builds!.reason).toMatch(/^environment\/Dockerfile:3: .*do not build images/);
  });

  it("skip a file its reader cannot open, where permissions hold (the check runs as an unprivileged user)", () => {
    const set = tempDir();
    chmodSync(set, 0o755);
    cpSync(FIXTURE, join(set, "task"), { recursive: true });
    writeFileSync(join(set, "task/environment/secret.txt"), "no");
    chmodSync(join(set, "task/environment/secret.txt"), 0o000);
    mkdirSync(join(set, "task/environment/closed"));
    writeFileSync(join(set, "task/environment/closed/inside.txt"), "no");
    chmodSync(join(set, "task/environment/closed"), 0o000);
    spawnSync("chmod", ["-R", "a+rX", join(set, "task/tests"), join(set, "task/solution")]);
    const asNobody = process.getuid?.() === 0 ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : [];
    const cli = [
      join(import.meta.dirname, "../../node_modules/.bin/tsx"),
      join(import.meta.dirname, "../../client/cli/entry.ts"),
    ];
    const run = spawnSync(
      asNobody[0] ?? cli[0]!,
      [...asNobody.slice(1), ...(asNobody.length ? cli : cli.slice(1)), "--json", "envs", "push", "--dry-run", set],
      {
        encoding: "utf8",
        timeout: 60_000,
        env: { ...process.env, HOME: set },
      },
    );
    expect(run.status, run.stderr).toBe(0);
    const out = JSON.parse(run.stdout) as { ready: { name: string; skipped: unknown[] }[] };
    expect(out.ready.map((t) => t.name)).toEqual(["task"]);
    expect(out.ready[0]!.skipped).toEqual([
      { path: "environment/closed", reason: "unreadable" },
      { path: "environment/secret.txt", reason: "unreadable" },
    ]);
  });
});
