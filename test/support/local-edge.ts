import { execFile, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, writeSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, vi } from "vitest";
import { LocalEdge as SavedLocalEdge } from "../../client/cli/credentials.js";
import { Sextant } from "../../client/sdk/client.js";
import { LOCAL_MODELS } from "../../scripts/local-gateway.js";
import { EDGE_LOG_DIR } from "../../scripts/runtime-log-scan.js";

export const ROOT = new URL("../../", import.meta.url).pathname;

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * Limits nobody reaches: tests and benchmarks of other features must not meet the default rate
 * limits by accident. Rate limits have their own tests (which pass their own `RATE_LIMITS`).
 */
export const roomy = { key: { requests: { limit: 10_000_000, windowSeconds: 60 } } };
const CLASSES = ["tab", "chat", "apply", "embed", "index", "events", "admin"];
export const ROOMY_LIMITS = JSON.stringify({
  plans: Object.fromEntries(
    ["free", "pro", "business"].map((plan) => [plan, Object.fromEntries(CLASSES.map((cls) => [cls, roomy]))]),
  ),
  // Locally every request comes from one network (or none): none of the test accounts may meet its limit.
  ipPrefix: Object.fromEntries(CLASSES.map((cls) => [cls, roomy.key])),
  abuse: { newFreeAccountsPerPrefixPerHour: 1_000_000, activeFreeAccountsPerPrefixPerHour: 1_000_000 },
});

export interface LocalEdge {
  baseURL: string;
  configDir: string;
  persistTo: string;
  output: () => string;
  /**
   * CPU seconds used so far by the edge's processes (workerd, and the Node process that started
   * it), from Linux's `/proc`; undefined elsewhere.
   */
  cpuSeconds: () => number | undefined;
  /** The edge's workerd process (Linux's `/proc`); undefined elsewhere or before it runs. */
  workerdPid: () => number | undefined;
  /**
   * The control API of the simulator `npm start` runs (its URL, as it prints it) and the headers
   * that open it (the token this harness gave it); throws when it runs none.
   */
  simulatorControl: () => { url: string; headers: { Authorization: string } };
  stop: () => Promise<void>;
}

export interface ProcessInfo {
  pid: number;
  ppid: number;
  /** Process group. */
  pgrp: number;
  comm: string;
  /** User and system CPU so far, in clock ticks (USER_HZ). */
  cpuTicks: number;
}

/** Clock ticks per second in `/proc/<pid>/stat` (Linux's USER_HZ). */
const USER_HZ = 100;

/** One process from Linux's `/proc/<pid>/stat`; undefined once it is gone, or where there is no `/proc`. */
function processInfo(pid: number): ProcessInfo | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // Fields after the command's closing parenthesis: state, ppid, pgrp, … utime is the 12th, stime the 13th.
  const fields = stat.slice(stat.lastIndexOf(") ") + 2).split(" ");
  return {
    pid,
    ppid: Number(fields[1]),
    pgrp: Number(fields[2]),
    comm: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")),
    cpuTicks: Number(fields[11]) + Number(fields[12]),
  };
}

/** Every live process, from Linux's `/proc/<pid>/stat`; undefined where there is no `/proc`. */
export function processes(): ProcessInfo[] | undefined {
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name));
  } catch {
    return undefined;
  }
  return pids.flatMap((pid) => processInfo(Number(pid)) ?? []);
}

/** CPU seconds one process has used so far; undefined once it is gone, or where there is no `/proc`. */
export function processCpuSeconds(pid: number): number | undefined {
  const info = processInfo(pid);
  return info && info.cpuTicks / USER_HZ;
}

/**
 * The whole machine's CPU so far, in clock ticks summed over its cores, from Linux's `/proc/stat`:
 * busy (everything but idle and I/O wait) and total, and the cores they are summed over (all of
 * the machine's, whatever this process's own CPU affinity). Undefined where there is no `/proc`.
 */
export function machineCpuTicks(): { busy: number; total: number; cores: number } | undefined {
  let stat: string;
  try {
    stat = readFileSync("/proc/stat", "utf8");
  } catch {
    return undefined;
  }
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"; guest time is already in user.
  const ticks = (stat.split("\n", 1)[0] ?? "").trim().split(/\s+/).slice(1, 9).map(Number);
  if (ticks.length < 5 || ticks.some((n) => !Number.isFinite(n))) return undefined;
  const total = ticks.reduce((sum, n) => sum + n, 0);
  const cores = stat.split("\n").filter((line) => /^cpu\d+ /.test(line)).length;
  return { busy: total - ticks[3]! - ticks[4]!, total, cores };
}

/** CPU seconds of every live process in a process group. */
function groupCpuSeconds(group: number): number | undefined {
  const all = processes();
  if (!all) return undefined;
  const ticks = all.filter((p) => p.pgrp === group).reduce((sum, p) => sum + p.cpuTicks, 0);
  return ticks / USER_HZ;
}

/**
 * A new file under `.vitest/edge-logs` for one edge's whole output, which `npm test` reads for the
 * runtime's cross-request and hung-request messages once the tests are done.
 */
export function edgeLogFile(name: string): string {
  const dir = join(ROOT, EDGE_LOG_DIR);
  mkdirSync(dir, { recursive: true });
  return join(dir, `${name}-${process.pid}-${Math.random().toString(36).slice(2, 8)}.log`);
}

/**
 * Runs `npm start`'s script exactly as a user would, on its own port, state and config directories;
 * with `dev`, `npm run dev`'s (the same under `wrangler dev`).
 */
export async function startLocalEdge(options: LocalEdgeOptions = {}): Promise<LocalEdge> {
  // A port found free may be taken again before the edge binds it (by one of the simulated
  // backends it starts first, or by another test file's process): then it starts on another.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startLocalEdgeOnce({ ...options, port: options.port ?? (await freePort()) });
    } catch (err) {
      if (options.port !== undefined || attempt >= 3 || !(err instanceof PortTaken)) throw err;
    }
  }
}

interface LocalEdgeOptions {
  port?: number;
  configDir?: string;
  persistTo?: string;
  vars?: Record<string, string>;
  dev?: boolean;
  /**
   * false: bundle and migrate as `npm start` does, even when the run has a prebuilt edge
   * (`SEXTANT_PREBUILT_EDGE`, which `npm test` builds once for all its edges). Under `dev` it is never used.
   */
  prebuilt?: boolean;
  /** More of `npm start`'s environment (`SEXTANT_SANDBOX_DRIVER`, a `PATH`); undefined unsets. */
  env?: Record<string, string | undefined>;
}

class PortTaken extends Error {}

async function startLocalEdgeOnce(options: LocalEdgeOptions & { port: number }): Promise<LocalEdge> {
  const port = options.port;
  const configDir = options.configDir ?? mkdtempSync(join(tmpdir(), "sextant-config-"));
  const persistTo = options.persistTo ?? mkdtempSync(join(tmpdir(), "sextant-state-"));
  let log = "";
  const controlToken = `test-control-${randomBytes(16).toString("hex")}`;
  // `SEXTANT_START_COMMAND` runs start.ts another way (a bundle under plain node, bench/device/).
  const [command, ...commandArgs] = (process.env.SEXTANT_START_COMMAND ?? "npx tsx scripts/start.ts").split(" ");
  const child: ChildProcess = spawn(
    command!,
    [
      ...commandArgs,
      "--port",
      String(port),
      "--persist-to",
      persistTo,
      ...(options.dev ? ["--dev"] : []),
      ...Object.entries({ RATE_LIMITS: ROOMY_LIMITS, ...options.vars }).flatMap(([k, v]) => ["--var", `${k}:${v}`]),
    ],
    {
      cwd: ROOT,
      env: {
        ...process.env,
        SEXTANT_CONFIG_DIR: configDir,
        WRANGLER_SEND_METRICS: "false",
        ...(options.prebuilt === false || options.dev ? { SEXTANT_PREBUILT_EDGE: undefined } : {}),
        ...options.env,
        SIMULATOR_CONTROL_TOKEN: controlToken,
      },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    },
  );
  // The start of the output (the ready line, the bindings) and its latest 4 MiB: a flood of errors
  // from a long benchmark must not outgrow a string. All of it goes to the log file, written as it
  // arrives (synchronously, so none is lost if the test's process ends before the edge does).
  let head = "";
  const file = openSync(edgeLogFile(`edge-${port}`), "a");
  const keep = (d: Buffer) => {
    if (head.length < 64 * 1024) head += d;
    log = (log + d).slice(-4 * 2 ** 20);
    writeSync(file, d);
  };
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  // After "close", not "exit": the pipes may still hold output when the process exits.
  child.once("close", () => closeSync(file));
  const stop = async () => {
    if (child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    // The group may already be gone (the edge exited between the check and the signal).
    const signal = (name: NodeJS.Signals) => {
      try {
        process.kill(-child.pid!, name);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ESRCH") throw err;
      }
    };
    signal("SIGTERM");
    const timer = setTimeout(() => signal("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + 90_000;
  while (!head.includes("Sextant edge ready") && !log.includes("Sextant edge ready")) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      const message = `npm start did not become ready:\n${log}`;
      throw log.includes(`Address already in use (127.0.0.1:${port})`) ? new PortTaken(message) : new Error(message);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  const output = () => (log.startsWith(head) ? log : head + log);
  const cpuSeconds = () => groupCpuSeconds(child.pid!);
  const workerdPid = () => processes()?.find((p) => p.pgrp === child.pid && p.comm === "workerd")?.pid;
  const simulatorControl = () => {
    const url = /control: (http:\/\/[^)\s]+)\)/.exec(output())?.[1];
    if (!url) throw new Error("npm start printed no simulator control URL");
    return { url, headers: { Authorization: `Bearer ${controlToken}` } };
  };
  return {
    baseURL: `http://127.0.0.1:${port}`,
    configDir,
    persistTo,
    output,
    cpuSeconds,
    workerdPid,
    simulatorControl,
    stop,
  };
}

/** What `npm start` saved for the CLI in the edge's config directory: its development key and admin secret. */
export function savedLocalEdge(edge: LocalEdge): SavedLocalEdge {
  return SavedLocalEdge.parse(JSON.parse(readFileSync(join(edge.configDir, "local-edge.json"), "utf8")));
}

/**
 * Runs `fn` with an SDK for `edge` while the CLI's config and cache directories are `env`'s, so the
 * client's own code (`openWorkspace`, `indexWorkspace`) finds what the CLI saved there.
 */
export async function withCliSdk<T>(
  edge: LocalEdge,
  env: Record<string, string | undefined>,
  fn: (sdk: Sextant) => Promise<T>,
): Promise<T> {
  vi.stubEnv("SEXTANT_CONFIG_DIR", env.SEXTANT_CONFIG_DIR!);
  vi.stubEnv("SEXTANT_CACHE_DIR", env.SEXTANT_CACHE_DIR!);
  try {
    return await fn(new Sextant({ apiKey: savedLocalEdge(edge).apiKey, baseURL: edge.baseURL, maxRetries: 0 }));
  } finally {
    vi.unstubAllEnvs();
  }
}

/**
 * A streamed tab completion through the `openai` SDK, with the development key, from the simulated
 * backends that `npm start` runs when no real backend is configured: its text, and the
 * `system_fingerprint` of each chunk (the simulator's says it is simulated).
 */
export async function simulatedTabCompletion(edge: LocalEdge): Promise<{ text: string; fingerprints: Set<string> }> {
  const openai = new OpenAI({ baseURL: `${edge.baseURL}/v1`, apiKey: savedLocalEdge(edge).apiKey, maxRetries: 0 });
  const stream = await openai.completions.create({
    model: LOCAL_MODELS.tab,
    prompt: "def add(a, b):\n    ",
    suffix: "\n\nprint(add(1, 2))\n",
    max_tokens: 4,
    stream: true,
  });
  let text = "";
  const fingerprints = new Set<string>();
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    fingerprints.add(String(chunk.system_fingerprint));
  }
  return { text, fingerprints };
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the real `sextant` bin in a fresh process. */
/**
 * The real `sextant` bin, run asynchronously: for tests whose stand-ins answer from this process,
 * which a synchronous spawn would block.
 */
export function sextantAsync(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(ROOT, "client/bin/sextant.js"), ...args],
      {
        cwd: tmpdir(),
        env: { ...process.env, SEXTANT_API_KEY: "", SEXTANT_BASE_URL: "", SEXTANT_ADMIN_SECRET: "", ...env },
        maxBuffer: 64 * 2 ** 20,
      },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

export function sextant(args: string[], env: Record<string, string> = {}): CliResult {
  const result = spawnSync(process.execPath, [join(ROOT, "client/bin/sextant.js"), ...args], {
    cwd: tmpdir(),
    env: { ...process.env, SEXTANT_API_KEY: "", SEXTANT_BASE_URL: "", SEXTANT_ADMIN_SECRET: "", ...env },
    encoding: "utf8",
  });
  return { code: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

/** A local edge and the real CLI pointed at it, with config and cache directories of its own. */
export async function startEdgeWithCli(vars?: Record<string, string>): Promise<{
  edge: LocalEdge;
  env: Record<string, string>;
  cli: (args: string[]) => CliResult;
}> {
  const edge = await startLocalEdge(vars ? { vars } : {});
  const env = { SEXTANT_CONFIG_DIR: edge.configDir, SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-cache-")) };
  return { edge, env, cli: (args) => sextant(args, env) };
}

/**
 * `startEdgeWithCli` for the enclosing `describe`: the edge starts before its tests and stops after
 * them. Read `edge` and `env` inside the tests (they are set once the edge has started).
 */
export function edgeWithCliForSuite(vars?: Record<string, string>): {
  readonly edge: LocalEdge;
  readonly env: Record<string, string>;
  cli: (args: string[]) => CliResult;
} {
  let started: Awaited<ReturnType<typeof startEdgeWithCli>> | undefined;
  beforeAll(async () => {
    started = await startEdgeWithCli(vars);
  });
  afterAll(async () => {
    await started?.edge.stop();
  });
  const get = () => {
    if (!started) throw new Error("the suite's edge has not started");
    return started;
  };
  return {
    get edge() {
      return get().edge;
    },
    get env() {
      return get().env;
    },
    cli: (args) => get().cli(args),
  };
}

/**
 * A local edge a suite restarts with other vars on the same port, config and state (an embedder or
 * backend changed under existing workspaces), and the CLI pointed at it with its own cache. `start`
 * stops the running edge first; `json` runs a command with `--json` and expects it to succeed.
 */
export function restartableEdge() {
  let port = 0;
  let current: LocalEdge | undefined;
  const env: Record<string, string> = {};
  const cli = (args: string[]) => sextantAsync(args, env);
  return {
    env,
    get edge(): LocalEdge {
      if (!current) throw new Error("The edge has not been started.");
      return current;
    },
    async start(vars: Record<string, string> = {}): Promise<void> {
      if (port === 0) {
        Object.assign(env, {
          SEXTANT_CONFIG_DIR: mkdtempSync(join(tmpdir(), "sextant-config-")),
          SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-cache-")),
          PERSIST_TO: mkdtempSync(join(tmpdir(), "sextant-state-")),
        });
      }
      await current?.stop();
      // The first start finds a port; restarts keep it, so the CLI's saved edge stays right.
      current = await startLocalEdge({
        port: port === 0 ? undefined : port,
        configDir: env.SEXTANT_CONFIG_DIR,
        persistTo: env.PERSIST_TO,
        vars,
      });
      port = Number(new URL(current.baseURL).port);
    },
    stop: async () => current?.stop(),
    cli,
    async json(args: string[]) {
      const result = await cli(["--json", ...args]);
      if (result.code !== 0) throw new Error(`sextant ${args.join(" ")} exited ${result.code}: ${result.stderr}`);
      return JSON.parse(result.stdout);
    },
  };
}
