/**
 * The sandbox host: the process that holds agent tasks' code and runs their tools, answering the
 * protocol of `protocol/agents/sandbox.ts` over HTTP. Each sandbox is a directory under the host's
 * root: `tree/` (the task's files, the only place its commands can write), `base/` (the files as
 * uploaded, for the diff) and `calls/` (each call's recorded outcome, so a call id runs once). Its
 * data key is only ever in this process's memory. A sandbox is destroyed on request, or by the host
 * once it has had no request for its idle time to live.
 */
import { spawn } from "node:child_process";
import { randomBytes, timingSafeEqual, createHash } from "node:crypto";
import { chmod, chown, lstat, mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage } from "node:http";
import { dirname, join, resolve } from "node:path";
import { z } from "zod";
import {
  CallId,
  CallRequest,
  CreateSandboxRequest,
  SandboxId,
  SearchPrepareRequest,
  UploadFilesRequest,
  type CallResponse,
  type SandboxInfo,
  type SandboxLimits,
} from "../protocol/agents/sandbox.js";
import { ToolOutcome } from "../protocol/agents/tools.js";
import { treeDiff } from "./diff.js";
import { DRIVERS, type SandboxDriver } from "./drivers.js";
import { body, HttpError, parse, send } from "./http.js";
import { OutsideTree, TaskIndex } from "./search.js";
import { inside, runTool, ToolError } from "./tools.js";

export interface SandboxHostOptions {
  host?: string;
  port?: number;
  token: string;
  /** Where sandboxes' directories live. */
  root: string;
  driver: "bubblewrap" | "direct";
  /** Largest request body, in bytes (default 64 MiB). */
  maxBodyBytes?: number;
  /** How long one second of a sandbox's idle time to live lasts, in ms (default 1000; tests shorten it). */
  idleTtlScaleMs?: number;
}

export interface SandboxHost {
  url: string;
  stop(): Promise<void>;
}

interface Sandbox {
  id: string;
  dir: string;
  tree: string;
  base: string;
  dataKey: string;
  limits: SandboxLimits;
  idleTtlMs: number;
  uid: number;
  createdAt: string;
  commandSeconds: number;
  lastUsed: number;
  /** Calls running now, by id: a repeated id waits for the first. */
  running: Map<string, Promise<ToolOutcome & { durationMs: number }>>;
  /** Aborted when the sandbox is destroyed: its running commands are killed. */
  abort: AbortController;
  destroyed: boolean;
  /** The workspace codebase_search reads (its secret only ever in this process's memory). */
  index: TaskIndex | undefined;
}

const RecordedCall = ToolOutcome.and(z.object({ durationMs: z.number() }));

/** The first unprivileged user id sandboxes run as (each its own, so the process cap is per sandbox). */
const FIRST_UID = 200_000;
let nextUid = FIRST_UID + (process.pid % 10_000) * 100;

const digest = (s: string) => createHash("sha256").update(s).digest();

export async function startSandboxHost(options: SandboxHostOptions): Promise<SandboxHost> {
  const driver: SandboxDriver = DRIVERS[options.driver];
  const maxBody = options.maxBodyBytes ?? 64 * 2 ** 20;
  const ttlScale = options.idleTtlScaleMs ?? 1000;
  const sandboxes = new Map<string, Sandbox>();
  const expected = digest(options.token);
  // Traversable, not listable: a sandbox's user reaches its own tree and cannot list the others.
  await mkdir(options.root, { recursive: true, mode: 0o711 });
  await chmod(options.root, 0o711);
  // Under bubblewrap a command drops to its uid after its tree is mounted; without it, it runs in place.
  if (process.getuid?.() === 0 && options.driver === "direct") await mustBeTraversable(options.root);

  const owned = async (path: string, s: Sandbox) => {
    if (process.getuid?.() === 0) await chown(path, s.uid, s.uid).catch(() => undefined);
  };

  async function destroy(s: Sandbox): Promise<void> {
    if (s.destroyed) return;
    s.destroyed = true;
    sandboxes.delete(s.id);
    s.abort.abort();
    await Promise.allSettled(s.running.values());
    // What its commands left running on their own (a daemon that made itself a session) goes too.
    if (process.getuid?.() === 0) await killUid(s.uid);
    await rm(s.dir, { recursive: true, force: true });
  }

  const sweeper = setInterval(
    () => {
      const now = Date.now();
      for (const s of sandboxes.values()) if (now - s.lastUsed > s.idleTtlMs && s.running.size === 0) void destroy(s);
    },
    Math.min(1000, ttlScale),
  );
  sweeper.unref();

  const info = async (s: Sandbox): Promise<SandboxInfo> => ({
    id: s.id,
    driver: driver.name,
    dataKey: s.dataKey,
    ...(await usage(s.tree)),
    commandSeconds: Math.round(s.commandSeconds * 1000) / 1000,
    createdAt: s.createdAt,
  });

  const sandbox = (id: string): Sandbox => {
    const s = sandboxes.get(id);
    if (!s) throw new HttpError(404, "not_found", `No sandbox ${id}.`);
    s.lastUsed = Date.now();
    return s;
  };

  async function create(body: unknown): Promise<[number, unknown]> {
    const request = parse(CreateSandboxRequest, body);
    if (sandboxes.has(request.id)) throw new HttpError(409, "conflict", `Sandbox ${request.id} exists.`);
    const dir = join(options.root, request.id);
    const s: Sandbox = {
      id: request.id,
      dir,
      tree: join(dir, "tree"),
      base: join(dir, "base"),
      dataKey: randomBytes(32).toString("base64url"),
      limits: request.limits,
      idleTtlMs: request.idleTtlSeconds * ttlScale,
      uid: nextUid++,
      createdAt: new Date().toISOString(),
      commandSeconds: 0,
      lastUsed: Date.now(),
      running: new Map(),
      abort: new AbortController(),
      destroyed: false,
      index: request.workspace && new TaskIndex(request.workspace),
    };
    sandboxes.set(s.id, s);
    await mkdir(dir, { mode: 0o711 });
    await mkdir(join(dir, "calls"), { mode: 0o700 });
    await mkdir(s.base, { mode: 0o700 });
    await mkdir(s.tree, { mode: 0o700 });
    // HOME and TMPDIR of the `direct` driver's commands, outside the tree and its diff.
    await mkdir(join(dir, "scratch"), { mode: 0o700 });
    await owned(s.tree, s);
    await owned(join(dir, "scratch"), s);
    return [201, await info(s)];
  }

  async function upload(s: Sandbox, body: unknown): Promise<[number, unknown]> {
    const { files } = parse(UploadFilesRequest, body);
    // Every path is checked, and the sizes summed, before anything is written.
    const decoded: { path: string; target: string; content: Buffer; executable: boolean }[] = [];
    let growth = 0;
    for (const f of files) {
      let target: string;
      try {
        target = await inside(s.tree, f.path);
      } catch (err) {
        throw new HttpError(400, "invalid_request", (err as ToolError).message);
      }
      const content = Buffer.from(f.content, "base64");
      const replaced = await stat(target).catch(() => undefined);
      growth += content.length - (replaced?.isFile() ? replaced.size : 0);
      decoded.push({ path: f.path, target, content, executable: f.executable });
    }
    if ((await usage(s.tree)).bytes + growth > s.limits.diskBytes)
      throw new HttpError(507, "disk_full", `The files would take the tree past ${s.limits.diskBytes} bytes.`);
    let written = 0;
    for (const { target, content, ...f } of decoded) {
      for (const [root, path] of [
        [s.tree, target],
        [s.base, join(s.base, f.path)],
      ] as const) {
        await mkdir(dirname(path), { recursive: true });
        await writeFile(path, content, { mode: f.executable ? 0o755 : 0o644 });
        if (root === s.tree) await ownPath(s, f.path);
      }
      written += content.length;
    }
    return [200, { files: files.length, bytes: written }];
  }

  /** Hands a path of the tree, and the directories above it, to the sandbox's user. */
  async function ownPath(s: Sandbox, path: string): Promise<void> {
    const parts = path.split("/");
    for (let i = 1; i <= parts.length; i++) await owned(join(s.tree, ...parts.slice(0, i)), s);
  }

  async function call(s: Sandbox, callId: string, body: unknown): Promise<[number, CallResponse]> {
    const request = parse(CallRequest, body);
    const record = join(s.dir, "calls", `${callId}.json`);
    const recorded = await readFile(record, "utf8").catch(() => undefined);
    if (recorded) return [200, { ...RecordedCall.parse(JSON.parse(recorded)), replayed: true }];
    const running = s.running.get(callId);
    if (running) return [200, { ...(await running), replayed: true }];
    const started = performance.now();
    const work = (async () => {
      const outcome = await runTool(
        {
          tree: s.tree,
          limits: s.limits,
          driver,
          uid: s.uid,
          signal: s.abort.signal,
          index: s.index,
          wrote: async (file) => ownPath(s, file.slice(s.tree.length + 1)),
          ran: (result) => {
            s.commandSeconds += result.durationMs / 1000;
          },
        },
        request.tool,
        request.args,
      );
      const done = { ...outcome, durationMs: Math.round(performance.now() - started) };
      // Recorded before it is answered, atomically: a crash leaves the call either run and recorded, or not.
      await writeFile(`${record}.tmp`, JSON.stringify(done));
      await rename(`${record}.tmp`, record);
      return done;
    })();
    s.running.set(callId, work);
    try {
      return [200, { ...(await work), replayed: false }];
    } finally {
      s.running.delete(callId);
      s.lastUsed = Date.now();
    }
  }

  async function route(req: IncomingMessage): Promise<[number, unknown]> {
    const auth = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    if (!auth || !timingSafeEqual(digest(auth), expected))
      throw new HttpError(401, "unauthenticated", "Send the host's token as `Authorization: Bearer …`.");
    const url = new URL(req.url ?? "/", "http://host");
    const parts = url.pathname.split("/").filter(Boolean);
    if (parts[0] !== "v1" || parts[1] !== "sandboxes") throw new HttpError(404, "not_found", "No such route.");
    const [, , id, what, callId] = parts;
    const method = req.method ?? "GET";
    if (!id && method === "POST") return create(await body(req, maxBody));
    if (!id || !SandboxId.safeParse(id).success) throw new HttpError(404, "not_found", "No such sandbox.");
    if (!what && method === "GET") return [200, await info(sandbox(id))];
    if (!what && method === "DELETE") {
      await destroy(sandbox(id));
      return [204, undefined];
    }
    if (what === "stop" && method === "POST") {
      // The task was cancelled: its running commands are killed, its tree and records stay.
      const s = sandbox(id);
      const abort = s.abort;
      s.abort = new AbortController();
      abort.abort();
      await Promise.allSettled(s.running.values());
      return [204, undefined];
    }
    if (what === "files" && method === "POST") return upload(sandbox(id), await body(req, maxBody));
    if (what === "diff" && method === "GET") {
      const s = sandbox(id);
      const { binary: _, ...diff } = await treeDiff(s.base, s.tree);
      return [200, diff];
    }
    if (what === "search" && method === "POST") {
      const s = sandbox(id);
      const args = parse(SearchPrepareRequest, await body(req, maxBody));
      if (!s.index) throw new HttpError(409, "conflict", "This sandbox's task came without an index.");
      try {
        return [200, s.index.prepare(args)];
      } catch (err) {
        if (err instanceof OutsideTree) throw new HttpError(400, "invalid_request", err.message);
        throw err;
      }
    }
    if (what === "calls" && callId && method === "POST") {
      if (!CallId.safeParse(callId).success)
        throw new HttpError(400, "invalid_request", "A call id is 1 to 128 of A-Z a-z 0-9 _ . : -");
      return call(sandbox(id), callId, await body(req, maxBody));
    }
    throw new HttpError(404, "not_found", `No route for ${method} ${url.pathname}.`);
  }

  const server = createServer((req, res) => {
    route(req).then(
      ([status, json]) => send(res, status, json),
      (err: unknown) => {
        if (err instanceof HttpError) send(res, err.status, { code: err.code, message: err.message });
        else send(res, 500, { code: "internal", message: "The sandbox host failed." });
      },
    );
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, options.host ?? "127.0.0.1", resolve));
  const address = server.address() as { port: number };
  return {
    url: `http://${options.host ?? "127.0.0.1"}:${address.port}`,
    stop: async () => {
      clearInterval(sweeper);
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await Promise.all([...sandboxes.values()].map(destroy));
    },
  };
}

/**
 * Commands run as each sandbox's own user, which must be able to pass through every directory above
 * its tree: a root under a private directory (a `mkdtemp` one, say) would fail every command.
 */
async function mustBeTraversable(root: string): Promise<void> {
  for (let dir = resolve(root); ; dir = dirname(dir)) {
    const { mode } = await stat(dir);
    if ((mode & 0o001) === 0)
      throw new Error(
        `The sandbox root ${root} is under ${dir}, which other users cannot pass through (mode ${(mode & 0o777).toString(8)}); choose a root whose every parent has o+x.`,
      );
    if (dir === dirname(dir)) return;
  }
}

/** SIGKILLs every process of a uid, as that uid (`kill -1` reaches all the processes it may signal). */
function killUid(uid: number): Promise<void> {
  return new Promise((resolve) => {
    const args = [`--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "sh", "-c", "kill -9 -1"];
    spawn("setpriv", args, { stdio: "ignore" })
      .on("error", () => resolve())
      .on("exit", () => resolve());
  });
}

/** Files and bytes of a tree (its symlinks not followed). */
async function usage(tree: string): Promise<{ files: number; bytes: number }> {
  let files = 0;
  let bytes = 0;
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile()) {
        files++;
        bytes += (await lstat(path).catch(() => undefined))?.size ?? 0;
      }
    }
  };
  await walk(tree);
  return { files, bytes };
}
