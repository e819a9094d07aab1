/**
 * Work on a tree that can take long or hold much (`grep`'s scan, the diff), off the host's event
 * loop: a pool of worker threads, one per core, each doing one job at a time. The event loop serves
 * every sandbox's calls; a long job on it would hold them all. A job past its deadline, or whose
 * caller gave up (a cancelled task, a destroyed sandbox), is stopped by ending its worker (a pattern
 * that backtracks without end stops nowhere else), and a fresh worker takes its place.
 *
 * The pool is shared fairly between tenants (the orgs whose tasks the sandboxes run): jobs wait in a
 * queue per tenant, served in turn, and while other tenants have work a tenant holds at most its
 * share of the workers, so one org's flood of scans delays another's by one job at most.
 */
import { createRequire } from "node:module";
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { TREE_WORKER_SOURCE } from "./tree-worker.js";

interface TreeJobBase {
  /** The tree's root on the host. */
  root: string;
  /** The sandbox's uid (as root): only its files are read. */
  owner: number | null;
  skipDirs: string[];
  maxDepth: number;
  maxFiles: number;
  maxFileBytes: number;
  /** A NUL in this many first bytes makes a file binary (BINARY_SNIFF_BYTES). */
  sniffBytes: number;
}

export interface GrepJob extends TreeJobBase {
  /** The directory to search, as resolved tree path parts. */
  dir: string[];
  pattern: string;
  ignoreCase: boolean;
  maxResults: number;
  outputBytes: number;
}

export interface GrepResult {
  matches: { path: string; line: number; text: string }[];
  truncated: boolean;
}

export interface DiffJob extends TreeJobBase {
  base: string;
  tree: string;
  maxEditLength: number;
  fileTimeoutMs: number;
  maxDiffBytes: number;
}

export interface DiffResult {
  diff: string;
  filesChanged: number;
  insertions: number;
  deletions: number;
  skipped: { path: string; reason: string }[];
}

/** A job that ran past its deadline (waiting for a worker counts). */
export class JobTimeout extends Error {}
/** A job whose caller's signal aborted. */
export class JobAborted extends Error {}

interface Waiting {
  tenant: string;
  job: Record<string, unknown>;
  deadline: number;
  signal: AbortSignal | undefined;
  resolve: (r: unknown) => void;
  reject: (err: Error) => void;
  cancel?: () => void;
}

/**
 * Where jsdiff is, for the workers to require: resolved when a diff is first asked for, so a host
 * bundled without it still starts (the container image copies it beside the bundle).
 */
let diffModule: string | undefined;
const jsdiff = () => (diffModule ??= createRequire(import.meta.url).resolve("diff"));

export class TreePool {
  private readonly idle: Worker[] = [];
  private readonly queues = new Map<string, Waiting[]>();
  private readonly busy = new Map<string, number>();
  private live = 0;
  private closed = false;

  constructor(
    private readonly size = Math.max(1, availableParallelism()),
    /** Heap of each worker, in MiB: a job that would take more ends its worker, not the host. */
    private readonly heapMb = 512,
  ) {}

  grep(tenant: string, job: GrepJob, timeoutMs: number, signal?: AbortSignal): Promise<GrepResult> {
    return this.submit(tenant, { kind: "grep", ...job }, timeoutMs, signal) as Promise<GrepResult>;
  }

  diff(tenant: string, job: DiffJob, timeoutMs: number, signal?: AbortSignal): Promise<DiffResult> {
    return this.submit(
      tenant,
      { kind: "diff", diffModule: jsdiff(), ...job },
      timeoutMs,
      signal,
    ) as Promise<DiffResult>;
  }

  private submit(tenant: string, job: Record<string, unknown>, timeoutMs: number, signal?: AbortSignal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(new JobAborted("the job's caller gave up"));
      const w: Waiting = { tenant, job, deadline: performance.now() + timeoutMs, signal, resolve, reject };
      const queue = this.queues.get(tenant) ?? [];
      queue.push(w);
      this.queues.set(tenant, queue);
      // Until it runs, a deadline or an abort takes it out of its queue.
      const drop = (err: Error) => {
        const q = this.queues.get(tenant);
        const i = q?.indexOf(w) ?? -1;
        if (i < 0) return;
        q!.splice(i, 1);
        if (q!.length === 0) this.queues.delete(tenant);
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        reject(err);
      };
      const onAbort = () => drop(new JobAborted("the job's caller gave up"));
      const timer = setTimeout(() => drop(new JobTimeout("the job waited past its time")), Math.max(1, timeoutMs));
      signal?.addEventListener("abort", onAbort, { once: true });
      w.cancel = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      this.next();
    });
  }

  /** How many workers a tenant may hold now: the pool split between the tenants with work. */
  private share(): number {
    const tenants = new Set([...this.queues.keys(), ...[...this.busy].filter(([, n]) => n > 0).map(([t]) => t)]);
    return Math.max(1, Math.ceil(this.size / Math.max(1, tenants.size)));
  }

  private pick(): Waiting | undefined {
    const share = this.share();
    // The tenant that holds the fewest workers goes first; in a tie, the one that has waited longest.
    let best: [string, Waiting[]] | undefined;
    for (const entry of this.queues) {
      const held = this.busy.get(entry[0]) ?? 0;
      if (held >= share) continue;
      if (!best || held < (this.busy.get(best[0]) ?? 0)) best = entry;
    }
    if (!best) return undefined;
    const w = best[1].shift()!;
    if (best[1].length === 0) this.queues.delete(best[0]);
    else {
      // Its queue goes to the back of the turn.
      this.queues.delete(best[0]);
      this.queues.set(best[0], best[1]);
    }
    return w;
  }

  private next(): void {
    while (!this.closed && this.queues.size > 0 && (this.idle.length > 0 || this.live < this.size)) {
      const w = this.pick();
      if (!w) return;
      w.cancel?.();
      let worker = this.idle.shift();
      if (!worker) {
        worker = new Worker(TREE_WORKER_SOURCE, {
          eval: true,
          resourceLimits: { maxOldGenerationSizeMb: this.heapMb },
        });
        worker.unref();
        this.live++;
      }
      this.run(worker, w);
    }
  }

  private run(worker: Worker, w: Waiting): void {
    this.busy.set(w.tenant, (this.busy.get(w.tenant) ?? 0) + 1);
    const left = w.deadline - performance.now();
    let settled = false;
    const done = (fn: () => void, keep: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      w.signal?.removeEventListener("abort", onAbort);
      worker.removeAllListeners("message");
      worker.removeAllListeners("error");
      const held = (this.busy.get(w.tenant) ?? 1) - 1;
      if (held > 0) this.busy.set(w.tenant, held);
      else this.busy.delete(w.tenant);
      if (keep && !this.closed) this.idle.push(worker);
      else {
        this.live--;
        void worker.terminate();
      }
      fn();
      this.next();
    };
    const timer = setTimeout(
      () => done(() => w.reject(new JobTimeout("the job ran past its time")), false),
      Math.max(1, left),
    );
    const onAbort = () => done(() => w.reject(new JobAborted("the job's caller gave up")), false);
    w.signal?.addEventListener("abort", onAbort, { once: true });
    worker.once("message", (m: { ok: boolean; result?: unknown; message?: string }) =>
      done(() => (m.ok ? w.resolve(m.result) : w.reject(new Error(m.message))), true),
    );
    worker.once("error", (err) => done(() => w.reject(err), false));
    worker.postMessage(w.job);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const q of this.queues.values())
      for (const w of q.splice(0)) {
        w.cancel?.();
        w.reject(new Error("the sandbox host is stopping"));
      }
    this.queues.clear();
    await Promise.all(this.idle.splice(0).map((worker) => worker.terminate()));
  }
}
