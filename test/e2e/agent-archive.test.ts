/**
 * Agent tasks on an archive instead of an upload: the edge fetches a `.tar.gz` (or `.tar`) into the
 * task's sandbox and starts the task by itself, unpacking from inside the directory git hosts wrap a
 * tree in, and skipping (and naming) entries a tree cannot hold. An archive that cannot be had ends
 * the task with `source_error` and one message however it failed; bad requests, and URLs of hosts
 * that are not public, are refused before any task is made, and no redirect is followed to one; the
 * URL is kept sealed like the prompt. The archives come from 127.0.0.1, an origin this edge lets
 * through by `ALLOW_PRIVATE_ARCHIVE_ORIGINS` (a local edge's default refuses it).
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { createServer as createTcpServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packTar } from "modern-tar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Task, TaskEvent } from "../../protocol/agents/task.js";
import { UNUSABLE_ARCHIVE } from "../../protocol/agents/archive-url.js";
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
import { freePort, savedLocalEdge, sextantAsync } from "../support/local-edge.js";
import { scanDirectoryFor } from "../support/storage-scan.js";

let host: SandboxHostHandle;
let stack: AgentStack;
let server: Server;
let base: string;
/** An allowed origin where nothing listens: connections to it are refused. */
let closed: string;
/** Requests that reached the archive server under a name other than the allowed 127.0.0.1. */
const strayHosts: string[] = [];
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
  archives.set("/empty.tar", Buffer.from(await packTar([{ header: { name: "top/", type: "directory", size: 0 } }])));
  server = createServer((req, res) => {
    if (req.headers.host !== new URL(base).host) strayHosts.push(`${req.headers.host} ${req.url}`);
    const port = new URL(base).port;
    const redirects: Record<string, string> = {
      // The same server under another name: an origin the edge was not told to let through.
      "/to-localhost.tar.gz": `http://localhost:${port}/sum.tar.gz`,
      "/to-ipv6-loopback.tar.gz": `http://[::1]:${port}/sum.tar.gz`,
      "/to-decimal-loopback.tar.gz": "http://2130706433:1/sum.tar.gz",
      "/to-metadata.tar.gz": "http://169.254.169.254/latest/meta-data/",
      "/hop.tar.gz": "/sum.tar",
      "/loop.tar.gz": "/loop.tar.gz",
    };
    const location = redirects[req.url ?? ""];
    if (location) return void res.writeHead(302, { Location: location }).end();
    if (req.url === "/cut.tar.gz") {
      // Headers and the first bytes, then the connection is dropped.
      res.writeHead(200, { "Content-Type": "application/octet-stream", "Content-Length": "100000" });
      return void res.write(archives.get("/sum.tar.gz")!.subarray(0, 20), () => res.destroy());
    }
    const body = archives.get(req.url ?? "");
    if (!body) return void res.writeHead(404).end("no such archive");
    // The private archive is held back until a test lets it go: its task stays uploading till then.
    void (req.url === SECRET_PATH ? held : Promise.resolve()).then(() =>
      res.writeHead(200, { "Content-Type": "application/octet-stream" }).end(body),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  closed = `http://127.0.0.1:${await closedPort()}`;
  host = await startTestSandboxHost();
  stack = await startAgentStack({ host, vars: { ALLOW_PRIVATE_ARCHIVE_ORIGINS: `${base},${closed}` } });
});
afterAll(async () => {
  await stack?.edge.stop();
  await host?.stop();
  server?.close();
});

/** A port that refuses connections (nothing listens on it; the discard port may be filtered, not refused). */
async function closedPort(): Promise<number> {
  const port = await freePort();
  // Still free: freePort closed its listener.
  await new Promise<void>((resolve, reject) => {
    const probe = createTcpServer().once("error", reject);
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve()));
  });
  return port;
}

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
    const tree = join(host.root, id, "disk", "tree");
    expect(statSync(join(tree, "bin/run.sh")).mode & 0o111).not.toBe(0);
    expect(statSync(join(tree, "ok.txt")).mode & 0o111).toBe(0);
    expect(existsSync(join(host.root, id, "escape.txt"))).toBe(false);
    expect(existsSync(join(tree, "link"))).toBe(false);
  });

  it("ends the task with source_error and one message however the archive failed to come", async () => {
    const urls = [
      `${base}/missing.tar.gz`, // 404
      `${base}/garbage.tar.gz`, // not a tar
      `${base}/empty.tar`, // no files
      `${base}/cut.tar.gz`, // connection lost
      `${closed}/sum.tar.gz`, // connection refused
    ];
    const messages = await Promise.all(
      urls.map(async (url) => {
        const created = await create({ prompt: "x", source: "archive", archive: { url } });
        expect(created.status, url).toBe(201);
        const id = Task.parse(created.json).id;
        const task = await taskEnded(stack.sdk, id);
        expect([task.status, task.endReason], url).toEqual(["failed", "source_error"]);
        return endOf(await taskEvents(stack.sdk, id)).message;
      }),
    );
    // Nothing tells a refused port from a server that answered: the message is the same for each.
    expect(messages).toEqual(urls.map(() => UNUSABLE_ARCHIVE));
    expect(UNUSABLE_ARCHIVE).toMatch(/could not be fetched or held no files/);
  });

  it("follows a redirect on an allowed origin, and none to a host that is not public", async () => {
    const hop = await create({ prompt: sum.prompt, source: "archive", archive: { url: `${base}/hop.tar.gz` } });
    const followed = await taskEnded(stack.sdk, Task.parse(hop.json).id);
    expect([followed.status, followed.endReason]).toEqual(["finished", "finished"]);
    for (const path of [
      "/to-localhost.tar.gz",
      "/to-ipv6-loopback.tar.gz",
      "/to-decimal-loopback.tar.gz",
      "/to-metadata.tar.gz",
      "/loop.tar.gz",
    ]) {
      const created = await create({ prompt: "x", source: "archive", archive: { url: `${base}${path}` } });
      expect(created.status, path).toBe(201);
      const id = Task.parse(created.json).id;
      const task = await taskEnded(stack.sdk, id);
      expect([task.status, task.endReason], path).toEqual(["failed", "source_error"]);
      expect(endOf(await taskEvents(stack.sdk, id)).message, path).toBe(UNUSABLE_ARCHIVE);
    }
    expect(strayHosts).toEqual([]);
  });

  it("refuses archives it would not fetch, and uploads or a start to an archive task", async () => {
    for (const body of [
      { prompt: "x", source: "archive" },
      { prompt: "x", archive: { url: `${base}/sum.tar.gz` } },
      { prompt: "x", source: "archive", archive: { url: "http://example.com/a.tar.gz" } },
      { prompt: "x", source: "archive", archive: { url: "ftp://example.com/a.tar.gz" } },
      { prompt: "x", source: "archive", archive: { url: "https://user:pw@example.com/a.tar.gz" } },
      { prompt: "x", source: "archive", archive: { url: `${base}/sum.tar.gz`, token: "t" } },
      // Hosts that are not public, in the spellings that name them, on origins the edge was not told of.
      ...[
        "http://localhost:1/a.tar.gz",
        "https://localhost/a.tar.gz",
        "https://sub.localhost/a.tar.gz",
        "https://localhost./a.tar.gz",
        "http://127.0.0.1:1/a.tar.gz",
        "https://127.0.0.1/a.tar.gz",
        "https://127.1.2.3/a.tar.gz",
        "http://[::1]:1/a.tar.gz",
        "https://[::1]/a.tar.gz",
        "https://[::]/a.tar.gz",
        "https://[::ffff:127.0.0.1]/a.tar.gz",
        "https://[::ffff:7f00:1]/a.tar.gz",
        "https://[::ffff:10.0.0.1]/a.tar.gz",
        "https://[::127.0.0.1]/a.tar.gz",
        "https://[fe80::1]/a.tar.gz",
        "https://[fc00::1]/a.tar.gz",
        "https://[fd12:3456::1]/a.tar.gz",
        "https://2130706433/a.tar.gz",
        "https://0x7f.1/a.tar.gz",
        "https://0x7f000001/a.tar.gz",
        "https://0177.0.0.1/a.tar.gz",
        "https://127.1/a.tar.gz",
        "https://0.0.0.0/a.tar.gz",
        "https://0/a.tar.gz",
        "https://10.1.2.3/a.tar.gz",
        "https://172.16.0.1/a.tar.gz",
        "https://172.31.255.255/a.tar.gz",
        "https://192.168.1.1/a.tar.gz",
        "https://169.254.169.254/latest/meta-data/",
        "https://100.64.0.1/a.tar.gz",
        "https://intranet/a.tar.gz",
        "https://printer.local/a.tar.gz",
        "https://metadata.google.internal/a.tar.gz",
        `http://localhost:${new URL(base).port}/sum.tar.gz`,
        "file:///etc/passwd",
        "gopher://example.com/a.tar.gz",
      ].map((url) => ({ prompt: "x", source: "archive", archive: { url } })),
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
