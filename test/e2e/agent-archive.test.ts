/**
 * Agent tasks on an archive instead of an upload: the edge fetches a `.tar.gz` (or `.tar`) into the
 * task's sandbox and starts the task by itself, unpacking from inside the directory git hosts wrap a
 * tree in, and skipping (and naming) entries a tree cannot hold. An archive that cannot be had ends
 * the task with `source_error`; bad requests are refused before any task is made; the URL is kept
 * sealed like the prompt.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packTar } from "modern-tar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Task, TaskEvent } from "../../protocol/agents/task.js";
import {
  agentFixtures,
  copyOfRepo,
  rawCall,
  startAgentStack,
  startTestSandboxHost,
  taskEnded,
  taskEvents,
  type AgentStack,
  type SandboxHostHandle,
} from "../support/agent-stack.js";
import { savedLocalEdge, sextantAsync } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

let host: SandboxHostHandle;
let stack: AgentStack;
let server: Server;
let base: string;
const sum = agentFixtures().find((f) => f.name === "sum")!;
/** A path no other test uses, to look for in storage and the log. */
const SECRET_PATH = "/acme-private-monorepo-zq81.tar.gz";
const archives = new Map<string, Buffer>();
let release: () => void = () => {};
const held = new Promise<void>((resolve) => (release = resolve));

beforeAll(async () => {
  // sum's repository as a git host serves it: everything inside one top directory.
  const work = mkdtempSync(join(tmpdir(), "sextant-archive-"));
  cpSync(sum.repo, join(work, "sum-main"), { recursive: true });
  archives.set("/sum.tar.gz", execFileSync("tar", ["-czf", "-", "-C", work, "sum-main"]));
  archives.set(SECRET_PATH, archives.get("/sum.tar.gz")!);
  // The same files with no top directory and no compression.
  archives.set("/sum.tar", execFileSync("tar", ["-cf", "-", "-C", join(work, "sum-main"), "."]));
  const text = (s: string) => new TextEncoder().encode(s);
  archives.set(
    "/hostile.tar",
    Buffer.from(
      await packTar([
        { header: { name: "top/", type: "directory", size: 0 } },
        { header: { name: "top/ok.txt", type: "file", size: 3 }, body: text("ok\n") },
        { header: { name: "top/../escape.txt", type: "file", size: 3 }, body: text("no\n") },
        { header: { name: "top/link", type: "symlink", size: 0, linkname: "/etc/passwd" } },
        { header: { name: "elsewhere.txt", type: "file", size: 3 }, body: text("no\n") },
        { header: { name: "top/bin/run.sh", type: "file", size: 10, mode: 0o755 }, body: text("echo run\n\n") },
      ]),
    ),
  );
  archives.set("/garbage.tar.gz", Buffer.from([0x1f, 0x8b, 1, 2, 3, 4, 5, 6, 7, 8, 9]));
  server = createServer((req, res) => {
    const body = archives.get(req.url ?? "");
    if (!body) return void res.writeHead(404).end("no such archive");
    // The private archive is held back until a test lets it go: its task stays uploading till then.
    void (req.url === SECRET_PATH ? held : Promise.resolve()).then(() =>
      res.writeHead(200, { "Content-Type": "application/octet-stream" }).end(body),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host });
});
afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
  server?.close();
});

const create = (body: unknown) =>
  rawCall(stack.edge, savedLocalEdge(stack.edge).apiKey, "POST", "/v1/agents/tasks", body);
const startedOf = (events: TaskEvent[]) => events.find((e) => e.type === "task.started")!.data!;
const endOf = (events: TaskEvent[]) => events.find((e) => e.type === "task.ended")!.data!;

describe("agent tasks on an archive", () => {
  it("runs on a git host's .tar.gz from the CLI, and its diff makes a copy's tests pass", async () => {
    const r = await sextantAsync(["agent", "run", sum.prompt, "--archive", `${base}/sum.tar.gz`], stack.env);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("Started with 3 files.");
    const id = r.stdout.match(/Created task (task_\w+)/)![1]!;
    const copy = copyOfRepo(sum);
    const applied = await sextantAsync(["agent", "apply", id, copy], stack.env);
    expect(applied.code, applied.stderr).toBe(0);
    expect(readFileSync(join(copy, "src/sum.js"), "utf8")).toBe(sum.changed["src/sum.js"]);
    expect(spawnSync("node", ["--test", "test/"], { cwd: copy }).status).toBe(0);
  });

  it("takes a plain .tar with no top directory", async () => {
    const created = await create({ prompt: sum.prompt, source: "archive", archive: { url: `${base}/sum.tar` } });
    expect(created.status).toBe(201);
    const task = await taskEnded(stack.sdk, Task.parse(created.json).id);
    expect([task.status, task.endReason]).toEqual(["finished", "finished"]);
  });

  it("skips and names what a tree cannot hold, and keeps an executable's mode", async () => {
    const created = await create({
      prompt: "Look (no script).",
      source: "archive",
      archive: { url: `${base}/hostile.tar` },
    });
    const id = Task.parse(created.json).id;
    await taskEnded(stack.sdk, id);
    const started = startedOf(await taskEvents(stack.sdk, id));
    expect(started.files).toBe(2);
    expect(started.skipped).toBe(3);
    const names = (started.skippedEntries as { path: string; reason: string }[]).map((e) => e.path).sort();
    expect(names).toEqual(["elsewhere.txt", "top/../escape.txt", "top/link"]);
    const diff = await stack.sdk.agents.diff(id);
    expect(diff.filesChanged).toBe(0);
    const tree = join(host.root, id, "tree");
    expect(statSync(join(tree, "bin/run.sh")).mode & 0o111).not.toBe(0);
    expect(statSync(join(tree, "ok.txt")).mode & 0o111).toBe(0);
    expect(existsSync(join(host.root, id, "escape.txt"))).toBe(false);
    expect(existsSync(join(tree, "link"))).toBe(false);
  });

  it("ends the task with source_error when the archive is missing or is not one", async () => {
    for (const [path, message] of [
      ["/missing.tar.gz", /answered 404/],
      ["/garbage.tar.gz", /not a tar|holds no files/],
    ] as const) {
      const created = await create({ prompt: "x", source: "archive", archive: { url: `${base}${path}` } });
      expect(created.status).toBe(201);
      const id = Task.parse(created.json).id;
      const task = await taskEnded(stack.sdk, id);
      expect([task.status, task.endReason], path).toEqual(["failed", "source_error"]);
      expect(String(endOf(await taskEvents(stack.sdk, id)).message)).toMatch(message);
    }
  });

  it("refuses archives it would not fetch, and uploads or a start to an archive task", async () => {
    for (const body of [
      { prompt: "x", source: "archive" },
      { prompt: "x", archive: { url: `${base}/sum.tar.gz` } },
      { prompt: "x", source: "archive", archive: { url: "http://example.com/a.tar.gz" } },
      { prompt: "x", source: "archive", archive: { url: "ftp://example.com/a.tar.gz" } },
      { prompt: "x", source: "archive", archive: { url: "https://user:pw@example.com/a.tar.gz" } },
      { prompt: "x", source: "archive", archive: { url: `${base}/sum.tar.gz`, token: "t" } },
    ]) {
      const r = await create(body);
      expect([r.status, r.type, (r.json as { code: string }).code], JSON.stringify(body)).toEqual([
        400,
        "application/problem+json",
        "invalid_request",
      ]);
    }
    // The task is uploading until its archive (held back by the server) is in.
    const slow = await create({ prompt: "x", source: "archive", archive: { url: `${base}${SECRET_PATH}` } });
    const id = Task.parse(slow.json).id;
    const key = savedLocalEdge(stack.edge).apiKey;
    const upload = await rawCall(stack.edge, key, "POST", `/v1/agents/tasks/${id}/files`, {
      files: [{ path: "x.txt", content: "eA==" }],
    });
    const start = await rawCall(stack.edge, key, "POST", `/v1/agents/tasks/${id}/start`);
    // Files go in from the archive alone; a start is the task's own once the archive is in.
    expect([upload.status, start.status]).toEqual([409, 409]);
    expect((await stack.sdk.agents.get(id)).status).toBe("uploading");
    release();
    const task = await taskEnded(stack.sdk, id);
    expect(task.startedAt).not.toBeNull();
  });

  it("keeps the archive's URL sealed: not in storage or the edge's log", async () => {
    expect(await scanDirectoryFor(join(stack.edge.persistTo, "v3"), [SECRET_PATH, base])).toEqual([]);
    expect(stack.edge.output()).not.toContain(SECRET_PATH);
  });

  it("fetches a GitHub repository named with --git as its archive, and ends with source_error when it cannot", async () => {
    const r = await sextantAsync(
      ["agent", "run", "x", "--git", "https://github.com/acme/widgets#v1.2", "--detach", "--json"],
      stack.env,
    );
    expect(r.code, r.stderr).toBe(0);
    const task = Task.parse(JSON.parse(r.stdout));
    const ended = await taskEnded(stack.sdk, task.id);
    expect(ended.status).toBe("failed");
    expect(ended.endReason).toBe("source_error");
    const usage = await sextantAsync(["agent", "run", "x", "--git", "https://example.org/a/b"], stack.env);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("--archive");
  });
});
