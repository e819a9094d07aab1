import { parentPort, workerData } from "node:worker_threads";
import { deserializeFingerprints } from "./fingerprint.js";
import { minePackage } from "./mine.js";
import type { MineTask } from "./pool.js";

/** One mining thread: the held-out digests arrive once, then one package per message. */
const held = deserializeFingerprints(workerData.fingerprints);
parentPort!.on("message", async ({ index, task }: { index: number; task: MineTask }) => {
  try {
    parentPort!.postMessage({ index, result: await minePackage(task, held, task.maxPairs) });
  } catch (err) {
    parentPort!.postMessage({ index, error: err instanceof Error ? err.message : String(err) });
  }
});
