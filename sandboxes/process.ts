/**
 * Running one sandboxed command: its output kept up to a cap, its whole process tree killed at its
 * deadline. The drivers only decide the argv; this is the same for both.
 */
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

export interface RunResult {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /**
   * How long the command ran, from its start until it exited or was killed, and never more than its
   * timeout: a command is charged at most the time it was given, however long its kill took.
   */
  durationMs: number;
}

export interface SpawnSpec {
  file: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
}

/** Keeps the first and last halves of a stream past `cap` bytes: a command's error is often at its end. */
class CappedOutput {
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  total = 0;
  constructor(private readonly cap: number) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    const half = this.cap >> 1;
    if (this.headBytes < half) {
      const take = chunk.subarray(0, half - this.headBytes);
      this.head.push(take);
      this.headBytes += take.length;
      chunk = chunk.subarray(take.length);
    }
    if (chunk.length === 0) return;
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    while (this.tail.length > 1 && this.tailBytes - this.tail[0]!.length >= this.cap - half) {
      this.tailBytes -= this.tail.shift()!.length;
    }
  }

  get truncated(): boolean {
    return this.total > this.cap;
  }

  text(): string {
    const head = Buffer.concat(this.head);
    const tail = Buffer.concat(this.tail);
    if (!this.truncated) return Buffer.concat([head, tail]).toString("utf8");
    const omitted = this.total - this.cap;
    const marker = Buffer.from(`\n[… ${omitted} bytes omitted …]\n`);
    const keepTail = Math.max(0, this.cap - head.length - marker.length);
    return Buffer.concat([head, marker, tail.subarray(tail.length - keepTail)]).toString("utf8");
  }
}

/** Parent pid of every process, read from /proc (works without CONFIG_PROC_CHILDREN). */
function parents(): Map<number, number> {
  const table = new Map<number, number>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      // The command name is in parentheses and may itself hold spaces or parentheses.
      table.set(Number(name), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // The process ended while the table was read.
    }
  }
  return table;
}

function descendants(pid: number): number[] {
  const table = parents();
  const out = [pid];
  for (let i = 0; i < out.length; i++) for (const [child, parent] of table) if (parent === out[i]) out.push(child);
  return out;
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

function kill(pid: number, signal: NodeJS.Signals = "SIGKILL"): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

/**
 * SIGKILLs the process, its group and every descendant it has now (those in a pid namespace or a
 * session of their own included), then waits until none of them runs.
 */
export async function killTree(pid: number): Promise<void> {
  const tree = descendants(pid);
  kill(-pid);
  for (const p of tree) kill(p);
  const deadline = Date.now() + 5000;
  while (tree.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
}

export interface RunCappedOptions {
  timeoutMs: number;
  outputBytes: number;
  /** Aborting kills the command as its timeout would (the sandbox is being destroyed). */
  signal?: AbortSignal;
}

export function runCapped(spec: SpawnSpec, options: RunCappedOptions): Promise<RunResult> {
  const started = performance.now();
  const child = spawn(spec.file, spec.args, {
    cwd: spec.cwd,
    env: spec.env,
    // A session (and process group) of its own, so that the group can be killed without the host.
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const stdout = new CappedOutput(options.outputBytes);
  const stderr = new CappedOutput(options.outputBytes);
  child.stdout!.on("data", (c: Buffer) => stdout.push(c));
  child.stderr!.on("data", (c: Buffer) => stderr.push(c));

  let timedOut = false;
  let killed: Promise<void> | undefined;
  const stop = () => {
    if (!killed && child.pid !== undefined) killed = killTree(child.pid);
  };
  const timer = setTimeout(() => {
    timedOut = true;
    stop();
  }, options.timeoutMs);
  const onAbort = () => stop();
  options.signal?.addEventListener("abort", onAbort);
  if (options.signal?.aborted) stop();

  const closed = new Promise((r) => child.on("close", r));
  return new Promise((resolve, reject) => {
    child.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on("exit", async (code, signal) => {
      const ranMs = performance.now() - started;
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      // What the command left running in its group goes with it.
      if (child.pid !== undefined) kill(-child.pid);
      await killed;
      // A process that left the group may still hold the pipes: do not wait on it for long.
      await Promise.race([closed, new Promise((r) => setTimeout(r, 100))]);
      child.stdout!.destroy();
      child.stderr!.destroy();
      resolve({
        exitCode: code,
        signal,
        timedOut,
        stdout: stdout.text(),
        stderr: stderr.text(),
        stdoutTruncated: stdout.truncated,
        stderrTruncated: stderr.truncated,
        durationMs: Math.min(Math.round(ranMs), options.timeoutMs),
      });
    });
  });
}
