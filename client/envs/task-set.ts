/**
 * A task set on disk: a directory of Harbor task directories (or one task directory), checked and
 * packed task by task, pushed as one set, and remembered in `<set>/.sextant-taskset.json`, which
 * maps each task's name (its path under the set) to its index in the set and its archive's hash.
 * Task names never leave this machine: the edge knows tasks by index and hash only.
 */
import { mkdir, readdir, rename, writeFile } from "node:fs/promises";
import { basename, join, relative, sep } from "node:path";
import type { ManifestSettings } from "../../protocol/envs/api.js";
import type { TaskSettings } from "../../protocol/envs/harbor.js";
import { TaskRefused } from "../../protocol/envs/harbor.js";
import type { Envs, PushOptions, TaskToPush } from "../sdk/envs.js";
import { SextantError } from "../sdk/errors.js";
import { checkTaskDir, TASKSET_FILE, type CheckedTask, type SkippedEntry } from "./task-archive.js";

export { TASKSET_FILE };

/** How deep under the set a task directory is looked for. */
const MAX_DEPTH = 4;
/** Directories never looked into for tasks: they hold a task's own files, not tasks. */
const NOT_TASKS = new Set(["node_modules", "environment", "tests", "solution"]);

/** Whether a directory is a task: it holds the files every Harbor task has. */
async function isTask(dir: string): Promise<boolean> {
  try {
    const names = new Set(await readdir(dir));
    return names.has("task.toml") || names.has("instruction.md");
  } catch {
    return false;
  }
}

/**
 * The task directories of a set, sorted by name: `root` itself when it is a task, else every
 * directory under it (to a depth of 4, not following links or entering dot-directories) that is a
 * task, without looking inside a task for more.
 */
export async function findTaskDirs(root: string): Promise<{ name: string; dir: string }[]> {
  if (await isTask(root)) return [{ name: basename(root), dir: root }];
  const found: { name: string; dir: string }[] = [];
  const walk = async (dir: string, depth: number) => {
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      if (!entry.isDirectory() || entry.name.startsWith(".") || NOT_TASKS.has(entry.name)) continue;
      const child = join(dir, entry.name);
      if (await isTask(child)) found.push({ name: relative(root, child).split(sep).join("/"), dir: child });
      else if (depth < MAX_DEPTH) await walk(child, depth + 1);
    }
  };
  await walk(root, 1);
  return found.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export interface ReadyTask {
  name: string;
  dir: string;
  sha256: string;
  bytes: number;
  files: number;
  skipped: SkippedEntry[];
}

export interface RefusedTask {
  name: string;
  dir: string;
  reason: string;
  skipped: SkippedEntry[];
}

export interface CheckedSet {
  ready: ReadyTask[];
  refused: RefusedTask[];
}

/** The settings the manifest carries: the sandbox limits the task asks for, as the host will honour them. */
export function manifestSettings(settings: TaskSettings): ManifestSettings {
  const { verifierTimeoutSec, agentTimeoutSec, cpus, memoryMb, storageMb } = settings;
  return { verifierTimeoutSec, agentTimeoutSec, cpus, memoryMb, storageMb };
}

/**
 * Checks and packs each task in name order, yielding the ready ones (archive and settings) one at a
 * time and recording every task, ready or refused with its reason, in `into`.
 */
export async function* checkedTasks(
  root: string,
  into: CheckedSet,
  onTask?: (name: string) => void,
): AsyncGenerator<TaskToPush> {
  for (const { name, dir } of await findTaskDirs(root)) {
    onTask?.(name);
    let checked: CheckedTask;
    try {
      checked = await checkTaskDir(dir);
    } catch (err) {
      const skipped = (err as { skipped?: SkippedEntry[] }).skipped ?? [];
      const reason = err instanceof TaskRefused ? err.message : `could not be read: ${(err as Error).message}`;
      into.refused.push({ name, dir, reason, skipped });
      continue;
    }
    into.ready.push({
      name,
      dir,
      sha256: checked.sha256,
      bytes: checked.archive.byteLength,
      files: checked.files.size,
      skipped: checked.skipped,
    });
    yield { sha256: checked.sha256, archive: checked.archive, settings: manifestSettings(checked.task.settings) };
  }
}

/** Checks every task without pushing any (`sextant envs push --dry-run`). */
export async function checkTaskSet(root: string, onTask?: (name: string) => void): Promise<CheckedSet> {
  const out: CheckedSet = { ready: [], refused: [] };
  for await (const _ of checkedTasks(root, out, onTask));
  return out;
}

/** The tasks as they pass, each archive written to `<dir>/<sha256>.tar.gz` first (for the user to publish). */
async function* writtenTo(dir: string, tasks: AsyncIterable<TaskToPush>): AsyncGenerator<TaskToPush> {
  await mkdir(dir, { recursive: true });
  for await (const task of tasks) {
    const path = join(dir, `${task.sha256}.tar.gz`);
    const partial = `${path}.${process.pid}.tmp`;
    await writeFile(partial, task.archive);
    await rename(partial, path);
    yield task;
  }
}

/** Nothing to push: no task directories, or every one refused (named in `checked`). */
export class NoTasksError extends SextantError {
  override name = "NoTasksError";
  constructor(
    root: string,
    readonly checked: CheckedSet,
  ) {
    super(
      checked.refused.length
        ? `Every task under ${root} was refused (${checked.refused.length}); nothing was pushed.`
        : `No task directories (with a task.toml or instruction.md) under ${root}.`,
    );
  }
}

export interface TaskSetMap {
  id: string;
  baseUrl: string;
  pushedAt: string;
  tasks: Record<string, { index: number; sha256: string; bytes: number }>;
}

export interface PushResult {
  map: TaskSetMap;
  mapPath: string;
  checked: CheckedSet;
  uploaded: string[];
  present: string[];
}

/**
 * Pushes the tasks under `root` that the sandboxes would run as one task set, in name order (a
 * task's index is its place among the ready tasks), and writes the name → index/hash map at the
 * root (a task directory pushed alone keeps it too: its archive leaves the map out).
 */
export async function pushTaskSet(
  envs: Envs,
  root: string,
  baseUrl: string,
  options: PushOptions & { onTask?: (name: string) => void; outDir?: string } = {},
): Promise<PushResult> {
  const { onTask, outDir, ...pushOptions } = options;
  if ((await findTaskDirs(root)).length === 0) throw new NoTasksError(root, { ready: [], refused: [] });
  const checked: CheckedSet = { ready: [], refused: [] };
  const tasks = checkedTasks(root, checked, onTask);
  let pushed;
  try {
    pushed = await envs.pushTaskSet(outDir === undefined ? tasks : writtenTo(outDir, tasks), pushOptions);
  } catch (err) {
    if (checked.ready.length === 0) throw new NoTasksError(root, checked);
    throw err;
  }
  const map: TaskSetMap = {
    id: pushed.id,
    baseUrl,
    pushedAt: new Date().toISOString(),
    tasks: Object.fromEntries(checked.ready.map((t, index) => [t.name, { index, sha256: t.sha256, bytes: t.bytes }])),
  };
  const mapPath = join(root, TASKSET_FILE);
  const partial = `${mapPath}.${process.pid}.tmp`;
  await writeFile(partial, JSON.stringify(map, null, 2) + "\n");
  await rename(partial, mapPath);
  return { map, mapPath, checked, uploaded: pushed.uploaded, present: pushed.present };
}
