/**
 * The sandbox host: the process that holds agent tasks' code and runs their tools, answering the
 * protocol of `protocol/agents/sandbox.ts` over HTTP. Each sandbox is a directory under the host's
 * root: `disk/` (its capped disk, `disk.ts`: `tree/`, the task's files, and `scratch/`, its commands'
 * HOME and /tmp; the only places its commands can write), `base/` (the files as uploaded, for the
 * diff) and `calls/` (each call's recorded outcome, so a call id runs once). Its data key is only ever
 * in this process's memory. A sandbox is destroyed on request, or by the host once it has had no
 * request for its idle time to live.
 *
 * The host serves every org's tasks, so nothing a task does runs unbounded on its event loop or its
 * threads: file tools never block or follow a link out of the tree (`tree-fs.ts`), scans and diffs
 * run in the worker pool under deadlines, shared fairly between tenants (`tree-pool.ts`), and each
 * sandbox's commands are capped as a whole by its control groups and its disk (`cgroups.ts`).
 *
 * A sandbox may be made from a Harbor task the host holds in memory (`task-archives.ts`): its tree
 * starts as the task's environment, and `verify.ts` scores it with the task's tests or runs its
 * reference solution, neither of which is in the agent's reach before.
 */
import { randomBytes } from "node:crypto";
import { chmod, chown, mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { dirname, join, resolve } from "node:path";
import { z } from "zod";
import {
  CallRequest,
  CreateSandboxRequest,
  UploadFilesRequest,
  type CallResponse,
  type SandboxInfo,
  type SandboxLimits,
} from "../protocol/agents/sandbox.js";
import { ToolOutcome } from "../protocol/agents/tools.js";
import { HostCapacity, type CapacityOptions } from "./capacity.js";
import { openCgroups, type SandboxCgroup } from "./cgroups.js";
import { treeDiff } from "./diff.js";
import { makeDisk, sweepStaleDisks, tmpfsWorks, type SandboxDisk } from "./disk.js";
import { killUid, sweepShared } from "./leftovers.js";
import { DRIVERS, type SandboxDriver } from "./drivers.js";
import { HttpError, parse, send } from "./http.js";
import { router } from "./routes.js";
import { placeFiles } from "./place-files.js";
import { OutsideTree, TaskIndex } from "./search.js";
import { TaskArchives, taskLimits } from "./task-archives.js";
import { runTool } from "./tools.js";
import { TreeFs } from "./tree-fs.js";
import { TreePool } from "./tree-pool.js";
import { runPhase, taskInfo, type SandboxTask } from "./verify.js";

export interface SandboxHostOptions {
  host?: string;
  port?: number;
  token: string;
  /** Where sandboxes' directories live. */
  root: string;
  driver: "bubblewrap" | "direct";
  /** Largest request body, in bytes (default 64 MiB). */
  maxBodyBytes?: number;
  /**
   * The clock, in ms, a sandbox's idle time is measured on (default `Date.now`): a test that moves
   * its own clock decides when a sandbox has been idle, however slowly its requests run.
   */
  clock?: () => number;
  /**
   * What the host holds at once, shared between tenants: sandboxes (default 256) and the disk their
   * limits reserve (default: the machine's memory where disks are tmpfs, else the root's free space).
   * One tenant holds at most `tenantShare` of each (default 1/2), so no org can take the host.
   */
  capacity?: CapacityOptions;
  /** Bytes of unpacked Harbor tasks held in memory at most (default 512 MiB); the oldest go first. */
  archiveCacheBytes?: number;
  /** The largest task archive taken (default 64 MiB). */
  maxArchiveBytes?: number;
}

export interface SandboxHost {
  url: string;
  /** How this host caps a sandbox as a whole (said at start, never changed silently). */
  isolation: HostIsolation;
  stop(): Promise<void>;
}

export interface HostIsolation {
  driver: "bubblewrap" | "direct";
  /** `cgroup-v2`/`cgroup-v1`: memory and processes capped per sandbox; `rlimit`: per process only. */
  limits: "cgroup-v2" | "cgroup-v1" | "rlimit";
  /** `tmpfs`: the disk cap holds for the sandbox's tree and scratch together; `file-size`: per file. */
  disk: "tmpfs" | "file-size";
}

interface Sandbox {
  id: string;
  /** Whose task it is (an opaque tag of its org): the unit of fair sharing. */
  tenant: string;
  dir: string;
  tree: string;
  base: string;
  disk: SandboxDisk;
  fs: TreeFs;
  cgroup: SandboxCgroup | undefined;
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
  /** The Harbor task it was made from (held in this process's memory only). */
  task: SandboxTask | undefined;
}

const RecordedCall = ToolOutcome.and(z.object({ durationMs: z.number() }));

/** The first unprivileged user id sandboxes run as (each its own, so the process cap is per sandbox). */
const FIRST_UID = 200_000;
let nextUid = FIRST_UID + (process.pid % 10_000) * 100;

export async function startSandboxHost(options: SandboxHostOptions): Promise<SandboxHost> {
  const driver: SandboxDriver = DRIVERS[options.driver];
  const maxBody = options.maxBodyBytes ?? 64 * 2 ** 20;
  const clock = options.clock ?? Date.now;
  const sandboxes = new Map<string, Sandbox>();
  const creating = new Set<string>();
  const root = process.getuid?.() === 0;
  // Traversable, not listable: a sandbox's user reaches its own tree and cannot list the others.
  await mkdir(options.root, { recursive: true, mode: 0o711 });
  await chmod(options.root, 0o711);
  // Under bubblewrap a command drops to its uid after its tree is mounted; without it, it runs in place.
  if (root && options.driver === "direct") await mustBeTraversable(options.root);
  const capacity = HostCapacity.open(options.capacity ?? {});
  const cgroups = await openCgroups(capacity.memory);
  const tmpfs = await tmpfsWorks(options.root);
  // What hosts killed before they could clean up left mounted: their pages go back to the machine.
  if (tmpfs) await sweepStaleDisks();
  const isolation: HostIsolation = {
    driver: options.driver,
    limits: cgroups ? `cgroup-v${cgroups.version}` : "rlimit",
    disk: tmpfs ? "tmpfs" : "file-size",
  };
  const pool = new TreePool();
  const archives = new TaskArchives(options.archiveCacheBytes);
  const maxArchive = options.maxArchiveBytes ?? archives.limits.archiveBytes;
  async function destroy(s: Sandbox): Promise<void> {
    if (s.destroyed) return;
    s.destroyed = true;
    sandboxes.delete(s.id);
    s.abort.abort();
    await Promise.allSettled(s.running.values());
    // What its commands left running on their own (a daemon that made itself a session) goes too.
    await s.cgroup?.remove();
    if (root) await killUid(s.uid);
    // Under `direct`, what its user left in the machine's shared temporary directories.
    if (root && options.driver === "direct") await sweepShared(s.uid);
    await s.disk.remove();
    await rm(s.dir, { recursive: true, force: true });
  }

  const sweeper = setInterval(() => {
    const now = clock();
    for (const s of sandboxes.values()) if (now - s.lastUsed > s.idleTtlMs && s.running.size === 0) void destroy(s);
  }, 1000);
  sweeper.unref();

  const info = async (s: Sandbox): Promise<SandboxInfo> => ({
    id: s.id,
    driver: driver.name,
    dataKey: s.dataKey,
    ...(await s.fs.usage()),
    commandSeconds: Math.round(s.commandSeconds * 1000) / 1000,
    createdAt: s.createdAt,
    ...(s.task && { task: taskInfo(s.task) }),
  });

  const sandbox = (id: string): Sandbox => {
    const s = sandboxes.get(id);
    if (!s) throw new HttpError(404, "not_found", `No sandbox ${id}.`);
    s.lastUsed = clock();
    return s;
  };

  async function create(body: unknown): Promise<[number, unknown]> {
    const request = parse(CreateSandboxRequest, body);
    const cached = request.task && archives.touch(request.task.archive);
    if (request.task && !cached)
      throw new HttpError(404, "not_found", `The host does not hold archive ${request.task.archive}; upload it first.`);
    const limits = cached ? taskLimits(request.limits, cached.task.settings) : request.limits;
    const held = await Promise.all(
      [...sandboxes.values()].map(async (s) => ({ tenant: s.tenant, usedBytes: (await s.disk.usedBytes()) ?? 0 })),
    );
    // From here to `creating.add` nothing awaits: a second create of the same id meets one or the other.
    if (sandboxes.has(request.id) || creating.has(request.id))
      throw new HttpError(409, "conflict", `Sandbox ${request.id} exists.`);
    capacity.admit(held, creating.size, tenantOf(request));
    const dir = join(options.root, request.id);
    // Held before the first await: a second create of the same id is refused.
    creating.add(request.id);
    let made: { disk: SandboxDisk; cgroup: SandboxCgroup | undefined };
    try {
      await mkdir(dir, { mode: 0o711 });
      const disk = await makeDisk(join(dir, "disk"), limits.diskBytes, tmpfs);
      made = { disk, cgroup: await cgroups?.create(request.id, tenantOf(request), limits) };
    } catch (err) {
      creating.delete(request.id);
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    creating.delete(request.id);
    const uid = nextUid++;
    const s: Sandbox = {
      id: request.id,
      tenant: tenantOf(request),
      dir,
      tree: made.disk.tree,
      base: join(dir, "base"),
      disk: made.disk,
      cgroup: made.cgroup,
      fs: new TreeFs({ root: made.disk.tree, owner: root ? uid : undefined }),
      dataKey: randomBytes(32).toString("base64url"),
      limits,
      idleTtlMs: request.idleTtlSeconds * 1000,
      uid,
      createdAt: new Date().toISOString(),
      commandSeconds: 0,
      lastUsed: clock(),
      running: new Map(),
      abort: new AbortController(),
      destroyed: false,
      index: request.workspace && new TaskIndex(request.workspace),
      task: cached && { sha256: cached.sha256, task: cached.task, verifiedBy: undefined },
    };
    sandboxes.set(s.id, s);
    await mkdir(join(dir, "calls"), { mode: 0o700 });
    await mkdir(s.base, { mode: 0o700 });
    if (root) for (const d of [s.tree, s.disk.scratch]) await chown(d, uid, uid);
    if (cached) {
      const files = [...cached.task.startingTree].map(([path, f]) => ({
        path,
        content: f.bytes,
        executable: f.executable,
      }));
      try {
        await placeFiles(s, files);
      } catch (err) {
        await destroy(s);
        throw err;
      }
    }
    return [201, await info(s)];
  }

  async function upload(s: Sandbox, body: unknown): Promise<[number, unknown]> {
    const { files } = parse(UploadFilesRequest, body);
    const decoded = files.map((f) => ({ ...f, content: Buffer.from(f.content, "base64") }));
    return [200, { files: files.length, bytes: await placeFiles(s, decoded) }];
  }

  async function call(s: Sandbox, callId: string, body: unknown): Promise<[number, CallResponse]> {
    const request = parse(CallRequest, body);
    if (s.task?.verifiedBy !== undefined)
      throw new HttpError(409, "conflict", "The task was verified: the sandbox takes no more calls.");
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
          fs: s.fs,
          pool,
          tenant: s.tenant,
          limits: s.limits,
          driver,
          owner: root ? s.uid : null,
          signal: s.abort.signal,
          index: s.index,
          exec: (command, timeoutMs) =>
            driver.run({
              tree: s.tree,
              command,
              timeoutMs,
              limits: s.limits,
              uid: s.uid,
              scratch: s.disk.scratch,
              ...(s.cgroup ? { cgroupJoin: s.cgroup.joinArgv } : {}),
              signal: s.abort.signal,
              // A task's Dockerfile ENV, and its WORKDIR as a second place of the tree.
              ...(s.task && { env: s.task.task.settings.env }),
              ...(s.task?.task.settings.workdir && { alsoAt: s.task.task.settings.workdir }),
            }),
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
      s.lastUsed = clock();
    }
  }

  async function stop(s: Sandbox): Promise<void> {
    // The task was cancelled: its running commands are killed, its tree and records stay.
    const abort = s.abort;
    s.abort = new AbortController();
    abort.abort();
    await Promise.allSettled(s.running.values());
    // And what they left running on their own (a process that made itself a session).
    await s.cgroup?.kill();
    if (root) await killUid(s.uid);
  }

  const route = router({
    token: options.token,
    maxBody,
    create,
    sandbox,
    info,
    destroy,
    stop,
    upload,
    call,
    diff: (s) => treeDiff(pool, s, s.abort.signal),
    maxArchive,
    putArchive: (sha256, bytes) => archives.put(sha256, bytes),
    getArchive: (sha256) => archives.info(sha256),
    phase: (s, kind, callId, body) => runPhase(s, { driver, root, stop: () => stop(s) }, kind, callId, body),
    search: (s, args) => {
      if (!s.index) throw new HttpError(409, "conflict", "This sandbox's task came without an index.");
      try {
        return s.index.prepare(args);
      } catch (err) {
        if (err instanceof OutsideTree) throw new HttpError(400, "invalid_request", err.message);
        throw err;
      }
    },
  });

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
    isolation,
    stop: async () => {
      clearInterval(sweeper);
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await Promise.all([...sandboxes.values()].map(destroy));
      await pool.close();
      await cgroups?.close();
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

/** The tag of a sandbox's tenant: its org as the task object sent it, or the sandbox alone. */
const tenantOf = (request: { id: string; tenant?: string | undefined }) => request.tenant ?? `sandbox:${request.id}`;
