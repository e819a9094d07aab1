import { lstatSync } from "node:fs";
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";

/** Below this many paths, starting threads costs more than it saves. */
const MIN_PARALLEL_PATHS = 4000;

// Plain CommonJS evaluated in each thread: no loader, so a thread starts in a few milliseconds.
const WORKER = `
const { parentPort } = require("node:worker_threads");
const { lstatSync } = require("node:fs");
parentPort.on("message", ({ root, paths }) => {
  const list = paths.split("\\0");
  const out = new Float64Array(list.length * 4);
  for (let i = 0; i < list.length; i++) {
    const s = lstatSync(root + "/" + list[i], { throwIfNoEntry: false });
    if (!s) { out[i * 4 + 3] = -1; continue; }
    out[i * 4] = s.size;
    out[i * 4 + 1] = s.mtimeMs;
    out[i * 4 + 2] = s.ino;
    out[i * 4 + 3] = s.isFile() ? 1 : s.isDirectory() ? 2 : 3;
  }
  parentPort.postMessage(out, [out.buffer]);
});`;

function statAll(root: string, paths: readonly string[]): Float64Array {
  const out = new Float64Array(paths.length * 4);
  for (let i = 0; i < paths.length; i++) {
    const s = lstatSync(`${root}/${paths[i]}`, { throwIfNoEntry: false });
    if (!s) {
      out[i * 4 + 3] = -1;
      continue;
    }
    out[i * 4] = s.size;
    out[i * 4 + 1] = s.mtimeMs;
    out[i * 4 + 2] = s.ino;
    out[i * 4 + 3] = s.isFile() ? 1 : s.isDirectory() ? 2 : 3;
  }
  return out;
}

export interface StatLike {
  size: number;
  mtimeMs: number;
  ino: number;
  isFile(): boolean;
  isDirectory(): boolean;
}

/** One prefetched lstat, read out of the shared results without a closure per call. */
class PrefetchedStat implements StatLike {
  constructor(
    readonly size: number,
    readonly mtimeMs: number,
    readonly ino: number,
    private readonly kind: number,
  ) {}
  isFile(): boolean {
    return this.kind === 1;
  }
  isDirectory(): boolean {
    return this.kind === 2;
  }
}

/**
 * lstat for many workspace-relative paths at once, spread over threads. A warm scan is a stat per
 * file and little else, and on Node each stat costs several times what it costs git in C; running
 * them on every core is what brings a warm scan of a large tree near `git status`.
 */
export class StatPrefetch {
  private constructor(private readonly values: Float64Array) {}

  static #pool: Worker[] | undefined;

  /**
   * Starts the threads ahead of need (they start while the state loads) and keeps them for the
   * life of the process, so `sextant watch` pays for them once. They never keep the process alive.
   */
  static prepare(): Worker[] {
    if (!StatPrefetch.#pool) {
      // One share of the work stays on this thread, which would otherwise only wait.
      const threads = Math.min(availableParallelism(), 8) - 1;
      StatPrefetch.#pool = Array.from({ length: threads }, () => new Worker(WORKER, { eval: true }));
      for (const worker of StatPrefetch.#pool) worker.unref();
    }
    return StatPrefetch.#pool;
  }

  /** Stops the threads; the next scan starts new ones. */
  static async shutdown(): Promise<void> {
    const pool = StatPrefetch.#pool ?? [];
    StatPrefetch.#pool = undefined;
    await Promise.all(pool.map((worker) => worker.terminate()));
  }

  /** Stats `paths` (relative to `root`); results are read back by position with `at`. */
  static async run(root: string, paths: readonly string[]): Promise<StatPrefetch | undefined> {
    if (paths.length < MIN_PARALLEL_PATHS) return undefined;
    const pool = StatPrefetch.prepare();
    if (pool.length < 1) return undefined;
    const per = Math.ceil(paths.length / (pool.length + 1));
    const pending = Promise.all(
      pool.map((worker, k) => {
        const slice = paths.slice(k * per, (k + 1) * per);
        return new Promise<Float64Array>((resolve, reject) => {
          const onError = (err: Error) => {
            StatPrefetch.#pool = undefined;
            reject(err);
          };
          worker.once("error", onError);
          worker.once("message", (out: Float64Array) => {
            worker.off("error", onError);
            resolve(out);
          });
          worker.postMessage({ root, paths: slice.join("\0") });
        });
      }),
    );
    const own = statAll(root, paths.slice(pool.length * per));
    const parts = [...(await pending), own];
    const values = new Float64Array(paths.length * 4);
    let offset = 0;
    for (const part of parts) {
      values.set(part, offset);
      offset += part.length;
    }
    return new StatPrefetch(values);
  }

  /**
   * Whether the path at `i` is a regular file with exactly this size, mtime and inode: the warm
   * scan's question for every file, answered without building an object.
   */
  unchanged(i: number, size: number, mtimeMs: number, ino: number): boolean {
    const v = this.values;
    return v[i * 4 + 3] === 1 && v[i * 4] === size && v[i * 4 + 1] === mtimeMs && v[i * 4 + 2] === ino;
  }

  /** The lstat of the path at position `i`, or null if it did not exist. */
  at(i: number): StatLike | null {
    const v = this.values;
    const kind = v[i * 4 + 3]!;
    if (kind === -1) return null;
    return new PrefetchedStat(v[i * 4]!, v[i * 4 + 1]!, v[i * 4 + 2]!, kind);
  }
}
