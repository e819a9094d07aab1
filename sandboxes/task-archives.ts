/**
 * The Harbor tasks the host has been sent (`PUT /v1/archives/{sha256}`), parsed and held by the
 * hash of their archive so each sandbox made from one starts from the same files. Held in this
 * process's memory only, least recently used first out past a byte budget: no file of a task (its
 * tests and solution above all) is on any disk a sandbox's commands can read, and the tests and
 * solution reach a sandbox only when the host verifies or solves it.
 */
import { createHash } from "node:crypto";
import type { ArchiveInfo, SandboxLimits } from "../protocol/agents/sandbox.js";
import {
  readHarborTask,
  sandboxLimitsFor,
  TaskRefused,
  type HarborTask,
  type TaskSettings,
} from "../protocol/envs/harbor.js";
import { TASK_ARCHIVE_LIMITS, unpackTaskArchive, type TaskArchiveLimits } from "../protocol/envs/task-archive.js";
import { HttpError } from "./http.js";

export interface CachedTask {
  sha256: string;
  /** The archive's size as sent. */
  bytes: number;
  task: HarborTask;
  /** What the task's files take in memory. */
  held: number;
}

export class TaskArchives {
  private readonly tasks = new Map<string, CachedTask>();
  private held = 0;

  constructor(
    /** Bytes of unpacked tasks held at most (default 512 MiB). */
    private readonly maxBytes = 512 * 2 ** 20,
    readonly limits: TaskArchiveLimits = TASK_ARCHIVE_LIMITS,
  ) {}

  async put(sha256: string, archive: Buffer): Promise<ArchiveInfo> {
    const actual = createHash("sha256").update(archive).digest("hex");
    if (actual !== sha256)
      throw new HttpError(400, "invalid_request", `The body's SHA-256 is ${actual}, not the ${sha256} it was sent as.`);
    const known = this.touch(sha256);
    if (known) return { sha256, bytes: known.bytes };
    let task: HarborTask;
    try {
      const { files, executable } = await unpackTaskArchive(archive, this.limits);
      task = readHarborTask(files, { executable });
    } catch (err) {
      if (err instanceof TaskRefused) throw new HttpError(400, "invalid_request", `Task refused: ${err.message}`);
      throw err;
    }
    let held = 0;
    for (const files of [task.startingTree, task.tests, task.solution ?? new Map()])
      for (const [path, file] of files) held += file.bytes.byteLength + path.length;
    held += task.instruction.length;
    if (held > this.maxBytes)
      throw new HttpError(413, "payload_too_large", `The task unpacks to more than the host holds (${this.maxBytes}).`);
    // Another upload of the same archive may have finished while this one unpacked.
    if (!this.tasks.has(sha256)) {
      this.tasks.set(sha256, { sha256, bytes: archive.byteLength, task, held });
      this.held += held;
      for (const [oldest, cached] of this.tasks) {
        if (this.held <= this.maxBytes) break;
        this.tasks.delete(oldest);
        this.held -= cached.held;
      }
    }
    return { sha256, bytes: archive.byteLength };
  }

  /** The task of an archive, now the most recently used; undefined when the host does not hold it. */
  touch(sha256: string): CachedTask | undefined {
    const cached = this.tasks.get(sha256);
    if (!cached) return undefined;
    this.tasks.delete(sha256);
    this.tasks.set(sha256, cached);
    return cached;
  }

  info(sha256: string): ArchiveInfo {
    const cached = this.touch(sha256);
    if (!cached) throw new HttpError(404, "not_found", `The host does not hold archive ${sha256}.`);
    return { sha256, bytes: cached.bytes };
  }
}

/**
 * A task's sandbox has the memory and disk its task.toml asks for (`memory_mb`, `storage_mb`, capped
 * by the task reader and held in the protocol's range); the request's other limits stand.
 */
export function taskLimits(limits: SandboxLimits, settings: TaskSettings): SandboxLimits {
  const asked = sandboxLimitsFor(settings);
  const clamp = (n: number, min: number, max: number) => Math.max(min, Math.min(max, n));
  return {
    ...limits,
    memoryBytes: clamp(asked.memoryBytes, 64 * 2 ** 20, 16 * 2 ** 30),
    diskBytes: clamp(asked.diskBytes, 2 ** 20, 64 * 2 ** 30),
  };
}
