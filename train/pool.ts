import { Worker } from "node:worker_threads";
import { serializeFingerprints, type Fingerprints } from "./fingerprint.js";
import type { MinedPackage } from "./mine.js";

export interface MineTask {
  name: string;
  dir: string;
  roots?: readonly string[];
  maxPairs: number;
}

type Reply = { index: number; result: MinedPackage } | { index: number; error: string };

/**
 * Starts a worker on a TypeScript module: the worker registers tsx's loader itself, since a
 * loader given to the parent with `--import` does not reach worker threads on Node 20.
 */
function tsWorker(module: URL, workerData: unknown): Worker {
  const boot = `import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))})
    .then(({ register }) => { register(); return import(${JSON.stringify(module.href)}); })`;
  return new Worker(boot, { eval: true, workerData });
}

/**
 * Mines packages on `threads` worker threads (parsing is the CPU cost, and one thread parses one
 * file at a time), each package whole on one thread. Results come back in the tasks' order
 * whichever thread finishes first, so the output depends only on the input.
 */
export async function mineInPool(
  tasks: readonly MineTask[],
  held: Fingerprints,
  threads: number,
  onDone: (done: number, result: MinedPackage | undefined, task: MineTask, error?: string) => void,
): Promise<(MinedPackage | undefined)[]> {
  const results: (MinedPackage | undefined)[] = new Array(tasks.length);
  const fingerprints = serializeFingerprints(held);
  let next = 0;
  let done = 0;
  const runWorker = () =>
    new Promise<void>((resolve, reject) => {
      const worker = tsWorker(new URL("./mine-worker.ts", import.meta.url), { fingerprints });
      const send = () => {
        if (next >= tasks.length) {
          void worker.terminate().then(() => resolve());
          return;
        }
        const index = next++;
        worker.postMessage({ index, task: tasks[index] });
      };
      worker.on("message", (reply: Reply) => {
        done++;
        if ("result" in reply) results[reply.index] = reply.result;
        onDone(
          done,
          "result" in reply ? reply.result : undefined,
          tasks[reply.index]!,
          "error" in reply ? reply.error : undefined,
        );
        send();
      });
      worker.on("error", reject);
      send();
    });
  await Promise.all(Array.from({ length: Math.max(1, threads) }, runWorker));
  return results;
}
