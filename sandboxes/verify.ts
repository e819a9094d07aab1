/**
 * Scoring a Harbor task's sandbox (`verify`) and running its reference solution (`solve`), each
 * once per call id. Nothing the agent did may set its reward, so a verify:
 *
 * - first kills every process of the sandbox (as `stop` does: its control groups and its uid), so
 *   nothing the agent left running can write while the tests run or after;
 * - copies the task's `tests/` in only now, into a directory of the host's (0700, root's) that the
 *   run sees at `/tests`, read-only: a `tests/test.sh` the agent wrote in its tree is never run;
 * - gives the run a fresh, empty `/logs/verifier` and a fresh `/tmp` (HOME): no reward file, and no
 *   file a test's tools would load (a Python user site under HOME, say), can be left there before;
 * - reads the reward from that directory only, without following links, and refuses the sandbox's
 *   calls from then on (the tree holds the tests' leftovers).
 *
 * Under bubblewrap the paths are binds in the run's own namespaces. Under `direct` (as root) they
 * are binds in a mount namespace of the run's own (`unshare`), made on empty mount points on the
 * machine; what `direct` does not give is the rest of bubblewrap's isolation (the machine's
 * filesystem and network stay visible), and the task's WORKDIR is not mounted (the tree is at its
 * host path).
 */
import { spawnSync } from "node:child_process";
import { constants } from "node:fs";
import { chown, mkdir, open, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import {
  SolveRequest,
  VerifyRequest,
  VerifyResponse,
  SolveResponse,
  type SandboxInfo,
  type SandboxLimits,
} from "../protocol/agents/sandbox.js";
import type { HarborTask, TaskFile } from "../protocol/envs/harbor.js";
import type { SandboxCgroup } from "./cgroups.js";
import type { SandboxDisk } from "./disk.js";
import type { Bind, SandboxDriver } from "./drivers.js";
import { HttpError, parse } from "./http.js";

export interface SandboxTask {
  sha256: string;
  task: HarborTask;
  /** The call id of its verify, once one has started: the sandbox takes no more calls after it. */
  verifiedBy: string | undefined;
}

/** What `SandboxInfo.task` says of a sandbox's task. */
export function taskInfo(t: SandboxTask): NonNullable<SandboxInfo["task"]> {
  const { settings } = t.task;
  return {
    archive: t.sha256,
    instruction: t.task.instruction,
    verifierTimeoutSec: settings.verifierTimeoutSec,
    agentTimeoutSec: settings.agentTimeoutSec,
    hasSolution: t.task.solution !== undefined,
    settings,
    verified: t.verifiedBy !== undefined,
  };
}

export interface PhaseSandbox {
  dir: string;
  tree: string;
  uid: number;
  disk: SandboxDisk;
  limits: SandboxLimits;
  cgroup: SandboxCgroup | undefined;
  abort: AbortController;
  commandSeconds: number;
  task: SandboxTask | undefined;
}

export interface PhaseContext {
  driver: SandboxDriver;
  /** Whether the host runs as root (commands drop to the sandbox's uid). */
  root: boolean;
  /** Kills every process of the sandbox, keeping its tree. */
  stop(): Promise<void>;
}

const REWARD_FILE_BYTES = 1 << 20;

let mountsWork: boolean | undefined;
/** Whether this machine lets the host make a mount namespace (a container without CAP_SYS_ADMIN does not). */
function privateMountsWork(root: boolean): boolean {
  if (!root) return false;
  mountsWork ??=
    spawnSync("unshare", ["--mount", "--propagation", "private", "--", "mount", "-t", "tmpfs", "none", "/mnt"], {
      stdio: "ignore",
    }).status === 0;
  return mountsWork;
}
const running = new WeakMap<PhaseSandbox, Map<string, Promise<Record<string, unknown>>>>();
let staged = 0;

export async function runPhase(
  s: PhaseSandbox,
  ctx: PhaseContext,
  kind: "verify" | "solve",
  callId: string,
  body: unknown,
): Promise<[number, unknown]> {
  const request = parse(kind === "verify" ? VerifyRequest : SolveRequest, body);
  const task = s.task;
  if (!task) throw new HttpError(409, "conflict", "This sandbox was not made from a task.");
  if (kind === "solve" && !task.task.solution) throw new HttpError(404, "not_found", "The task has no solution.");
  const record = join(s.dir, "calls", `${kind}-${callId}.json`);
  const recorded = await readFile(record, "utf8").catch(() => undefined);
  const Response = kind === "verify" ? VerifyResponse : SolveResponse;
  if (recorded) return [200, Response.parse({ ...JSON.parse(recorded), replayed: true })];
  const mine = running.get(s) ?? new Map<string, Promise<Record<string, unknown>>>();
  running.set(s, mine);
  const key = `${kind}:${callId}`;
  const inFlight = mine.get(key);
  if (inFlight) return [200, Response.parse({ ...(await inFlight), replayed: true })];
  if (task.verifiedBy !== undefined)
    throw new HttpError(409, "conflict", "The task was verified: the tree holds its tests' leftovers.");
  if (kind === "verify") task.verifiedBy = callId;
  if (ctx.driver.name === "direct" && !privateMountsWork(ctx.root))
    throw new HttpError(
      409,
      "conflict",
      "Verify and solve need bubblewrap, or the direct driver as root where mount namespaces can be made.",
    );
  const work = (async () => {
    const outcome = await (kind === "verify" ? verify(s, ctx, task.task, request) : solve(s, ctx, task.task, request));
    await writeFile(`${record}.tmp`, JSON.stringify(outcome));
    await rename(`${record}.tmp`, record);
    return outcome;
  })();
  mine.set(key, work);
  try {
    return [200, Response.parse({ ...(await work), replayed: false })];
  } finally {
    mine.delete(key);
  }
}

/** A directory of the host's holding a task's files, for a run to see read-only. */
async function stage(dir: string, files: Map<string, TaskFile>): Promise<void> {
  await mkdir(dir, { mode: 0o755 });
  for (const [path, file] of files) {
    const target = join(dir, path);
    await mkdir(dirname(target), { recursive: true, mode: 0o755 });
    await writeFile(target, file.bytes, { mode: file.executable ? 0o755 : 0o644 });
  }
}

/** A fresh directory the sandbox's user owns. */
async function fresh(dir: string, uid: number, root: boolean): Promise<void> {
  await mkdir(dir, { mode: 0o755 });
  if (root) await chown(dir, uid, uid);
}

interface Ran {
  exitCode: number | null;
  timedOut: boolean;
  log: string;
  durationMs: number;
}

async function run(
  s: PhaseSandbox,
  ctx: PhaseContext,
  command: string,
  timeoutMs: number,
  env: Record<string, string>,
  binds: Bind[],
  workdir: string | null,
  tmp: string,
): Promise<Ran> {
  const result = await ctx.driver.run({
    tree: s.tree,
    command,
    timeoutMs,
    limits: s.limits,
    env,
    uid: s.uid,
    scratch: tmp,
    ...(s.cgroup ? { cgroupJoin: s.cgroup.joinArgv } : {}),
    signal: s.abort.signal,
    binds,
    ...(workdir && workdir !== "/workspace" ? { alsoAt: workdir } : {}),
  });
  s.commandSeconds += result.durationMs / 1000;
  const log = [
    result.stdout,
    result.stderr ? `--- stderr ---\n${result.stderr}` : "",
    result.timedOut ? `--- timed out after ${timeoutMs} ms ---\n` : "",
  ]
    .filter(Boolean)
    .join(result.stdout.endsWith("\n") || !result.stdout ? "" : "\n");
  return { exitCode: result.exitCode, timedOut: result.timedOut, log, durationMs: result.durationMs };
}

/** Staging and scratch for one run, removed after it (the scratch is on the sandbox's disk, under its cap). */
async function withStage<T>(s: PhaseSandbox, ctx: PhaseContext, fn: (dir: string, tmp: string) => Promise<T>) {
  const n = ++staged;
  const dir = join(s.dir, `stage-${n}`);
  const tmp = join(dirname(s.disk.scratch), `phase-tmp-${n}`);
  await mkdir(dir, { mode: 0o700 });
  try {
    await fresh(tmp, s.uid, ctx.root);
    return await fn(dir, tmp);
  } finally {
    await rm(dir, { recursive: true, force: true });
    await rm(tmp, { recursive: true, force: true });
  }
}

async function verify(s: PhaseSandbox, ctx: PhaseContext, task: HarborTask, request: VerifyRequest) {
  await ctx.stop();
  const timeoutMs = Math.min(request.timeoutMs ?? Infinity, task.settings.verifierTimeoutSec * 1000);
  return withStage(s, ctx, async (dir, tmp) => {
    const tests = join(dir, "tests");
    const logs = join(dir, "logs");
    await stage(tests, task.tests);
    await fresh(logs, s.uid, ctx.root);
    const ran = await run(
      s,
      ctx,
      "bash /tests/test.sh",
      timeoutMs,
      { ...task.settings.env, ...task.settings.verifierEnv },
      [
        { source: tests, dest: "/tests", readOnly: true },
        { source: logs, dest: "/logs/verifier", readOnly: false },
      ],
      task.settings.workdir,
      tmp,
    );
    // What the tests left running goes before the reward is read.
    await ctx.stop();
    const { why, ...score } = await readReward(logs);
    const log = capLog(ran.log + (why ? `\n--- ${why} ---\n` : ""), s.limits.outputBytes);
    return { ...score, log, exitCode: ran.exitCode, timedOut: ran.timedOut, durationMs: ran.durationMs };
  });
}

async function solve(s: PhaseSandbox, ctx: PhaseContext, task: HarborTask, request: VerifyRequest) {
  await ctx.stop();
  const timeoutMs = Math.min(request.timeoutMs ?? Infinity, (task.settings.agentTimeoutSec ?? 3600) * 1000, 3_600_000);
  return withStage(s, ctx, async (dir, tmp) => {
    const solution = join(dir, "solution");
    await stage(solution, task.solution!);
    const ran = await run(
      s,
      ctx,
      "bash /solution/solve.sh",
      timeoutMs,
      { ...task.settings.env, ...task.settings.solutionEnv },
      [{ source: solution, dest: "/solution", readOnly: true }],
      task.settings.workdir,
      tmp,
    );
    await ctx.stop();
    return { ...ran, log: capLog(ran.log, s.limits.outputBytes) };
  });
}

function capLog(log: string, max: number): string {
  if (log.length <= max) return log;
  return `${log.slice(0, max >> 1)}\n[… ${log.length - max} characters omitted …]\n${log.slice(log.length - (max >> 1))}`;
}

/** A file the verifier wrote, read without following a link it may have made to a file of the host's. */
async function readSmall(path: string): Promise<string | undefined> {
  let handle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new Error(`${path.split("/").pop()} could not be opened (${(err as NodeJS.ErrnoException).code})`);
  }
  try {
    const stat = await handle.stat();
    if (!stat.isFile()) throw new Error(`${path.split("/").pop()} is not a regular file`);
    if (stat.size > REWARD_FILE_BYTES) throw new Error(`${path.split("/").pop()} is over ${REWARD_FILE_BYTES} bytes`);
    return await handle.readFile("utf8");
  } finally {
    await handle.close();
  }
}

/**
 * Harbor's rule: `reward.json` (an object; its numbers are the components, its `reward` the reward),
 * else `reward.txt` (one number). A `reward.json` without `reward` takes `reward.txt`'s if there is
 * one, else the mean of its numbers. No reward file, or one that does not parse: 0, and why.
 */
export async function readReward(
  logs: string,
): Promise<{ reward: number; components: Record<string, number>; why: string | undefined }> {
  const zero = (why: string) => ({ reward: 0, components: {}, why: `reward 0: ${why}` });
  let json: string | undefined;
  let txt: string | undefined;
  try {
    json = await readSmall(join(logs, "reward.json"));
    txt = await readSmall(join(logs, "reward.txt"));
  } catch (err) {
    return zero((err as Error).message);
  }
  const number = (text: string) => {
    const trimmed = text.trim();
    const n = trimmed === "" ? NaN : Number(trimmed);
    return Number.isFinite(n) ? n : undefined;
  };
  if (json !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(json);
    } catch {
      return zero("reward.json is not JSON");
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
      return zero("reward.json is not an object");
    const components: Record<string, number> = {};
    for (const [k, v] of Object.entries(parsed)) if (typeof v === "number" && Number.isFinite(v)) components[k] = v;
    const values = Object.values(components);
    const fromTxt = txt === undefined ? undefined : number(txt);
    const reward =
      components.reward ?? fromTxt ?? (values.length ? values.reduce((a, b) => a + b, 0) / values.length : undefined);
    if (reward === undefined) return zero("reward.json holds no numbers");
    return { reward, components, why: undefined };
  }
  if (txt !== undefined) {
    const reward = number(txt);
    if (reward === undefined) return zero("reward.txt does not hold one number");
    return { reward, components: { reward }, why: undefined };
  }
  return zero("the tests wrote neither /logs/verifier/reward.txt nor /logs/verifier/reward.json");
}
