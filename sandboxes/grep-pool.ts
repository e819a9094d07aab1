/**
 * `grep`'s listing and scanning, off the host's event loop: a pool of worker threads, one per core,
 * each listing and scanning one call's files at a time. The event loop serves every sandbox's calls; a long scan on it would
 * hold them all, and several scans at once would run one after another. A scan past its time is
 * stopped by ending its worker (a pattern that backtracks without end stops nowhere else), and a
 * fresh worker takes its place.
 */
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";

export interface ScanJob {
  root: string;
  /** The directory to search (absolute, inside `root`): its files are listed by name, depth first. */
  dir: string;
  /** Directory names not descended into. */
  skipDirs: string[];
  /** Levels below `dir` listed at most, and files listed at most. */
  maxDepth: number;
  maxFiles: number;
  pattern: string;
  ignoreCase: boolean;
  maxResults: number;
  outputBytes: number;
  maxFileBytes: number;
  /** A NUL in this many first bytes makes a file binary, and unsearched (BINARY_SNIFF_BYTES). */
  sniffBytes: number;
}

export interface ScanResult {
  matches: { path: string; line: number; text: string }[];
  truncated: boolean;
}

export class ScanTimeout extends Error {}

/**
 * The worker's code, as source: evaluated by `new Worker(…, { eval: true })`, so the pool needs no
 * file of its own wherever the host runs (tsx, a test runner, an esbuild bundle). Symlinks are not
 * searched (one could lead outside the tree), nor binary files or files over `maxFileBytes`.
 */
const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { lstatSync, readdirSync, readFileSync } = require("node:fs");
const { join } = require("node:path");
/** The files below job.dir, relative to job.root, depth first by name; symlinks listed, not followed. */
function list(job) {
  const files = [];
  const skip = new Set(job.skipDirs);
  const prefix = job.dir === job.root ? "" : job.dir.slice(job.root.length + 1) + "/";
  const go = (abs, rel, level) => {
    let entries;
    try {
      entries = readdirSync(abs, { withFileTypes: true });
    } catch {
      return true;
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      const path = rel + entry.name;
      const isDir = entry.isDirectory();
      if (!isDir) files.push(path);
      if (files.length >= job.maxFiles) return false;
      if (isDir && level < job.maxDepth && !skip.has(entry.name) && !go(join(abs, entry.name), path + "/", level + 1))
        return false;
    }
    return true;
  };
  go(job.dir, prefix, 1);
  return files;
}
parentPort.on("message", (job) => {
  const regex = new RegExp(job.pattern, job.ignoreCase ? "i" : "");
  const matches = [];
  let bytes = 0;
  for (const rel of list(job)) {
    let content;
    try {
      const info = lstatSync(join(job.root, rel));
      if (!info.isFile() || info.size > job.maxFileBytes) continue;
      content = readFileSync(join(job.root, rel));
    } catch {
      continue;
    }
    if (content.subarray(0, job.sniffBytes).includes(0)) continue;
    const lines = content.toString("utf8").split("\\n");
    for (let i = 0; i < lines.length; i++) {
      if (!regex.test(lines[i])) continue;
      const text = lines[i].slice(0, 500);
      bytes += text.length + rel.length + 16;
      if (matches.length >= job.maxResults || bytes > job.outputBytes) {
        parentPort.postMessage({ matches, truncated: true });
        return;
      }
      matches.push({ path: rel, line: i + 1, text });
    }
  }
  parentPort.postMessage({ matches, truncated: false });
});
`;

interface Waiting {
  job: ScanJob;
  timeoutMs: number;
  resolve: (r: ScanResult) => void;
  reject: (err: Error) => void;
}

export class GrepPool {
  private readonly idle: Worker[] = [];
  private readonly queue: Waiting[] = [];
  private live = 0;
  private closed = false;

  constructor(private readonly size = Math.max(1, availableParallelism())) {}

  /** Scans `job`'s files; rejects with `ScanTimeout` past `timeoutMs` (waiting for a worker counts). */
  scan(job: ScanJob, timeoutMs: number): Promise<ScanResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ job, timeoutMs: performance.now() + timeoutMs, resolve, reject });
      this.next();
    });
  }

  private next(): void {
    while (!this.closed && this.queue.length > 0) {
      // The longest idle first: every worker gets work, and its code is compiled as hot as the others'.
      let worker = this.idle.shift();
      if (!worker && this.live < this.size) {
        worker = new Worker(WORKER_SOURCE, { eval: true });
        worker.unref();
        this.live++;
      }
      if (!worker) return;
      this.run(worker, this.queue.shift()!);
    }
  }

  private run(worker: Worker, w: Waiting): void {
    const left = w.timeoutMs - performance.now();
    const done = (fn: () => void, keep: boolean) => {
      clearTimeout(timer);
      worker.removeAllListeners("message");
      worker.removeAllListeners("error");
      if (keep && !this.closed) this.idle.push(worker);
      else {
        this.live--;
        void worker.terminate();
      }
      fn();
      this.next();
    };
    const timer = setTimeout(
      () => done(() => w.reject(new ScanTimeout("the scan ran past its time")), false),
      Math.max(1, left),
    );
    worker.once("message", (result: ScanResult) => done(() => w.resolve(result), true));
    worker.once("error", (err) => done(() => w.reject(err), false));
    worker.postMessage(w.job);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const w of this.queue.splice(0)) w.reject(new Error("the sandbox host is stopping"));
    await Promise.all(this.idle.splice(0).map((worker) => worker.terminate()));
  }
}
