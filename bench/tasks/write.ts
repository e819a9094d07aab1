/**
 * Writes one task directory (the Harbor layout, docs/evals.md) from a def and the package's
 * unpacked source, and checks it on the host: the reference solution applied to the mutated tree
 * passes the package's own tests (which also counts them for the verifier), and the mutated tree
 * fails them. The directory is then packed and read as the sandboxes will read it.
 */
import { execFile } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { checkTaskDir } from "../../client/envs/task-archive.js";
import { TaskRefused } from "../../protocol/envs/harbor.js";
import { applyEdits, DefRefused, within, type TaskDef } from "./def.js";
import { dockerfile, instruction, solveScript, taskToml, testScript } from "./scripts.js";

const run = promisify(execFile);

export interface WriteOptions {
  /** The set's root: the task goes to `<out>/<split>/<id>`. */
  out: string;
  split: "train" | "heldout";
  /** Run the package's tests on the host: solved passes, mutated fails (and count the passing tests). */
  check: boolean;
  /** Places `def.test.runner`'s packages into the tree's node_modules (npm.ts's, or a test's own). */
  placeRunner?: (name: string, version: string, tree: string) => Promise<void>;
}

export interface WrittenTask {
  dir: string;
  /** Passing tests of the solved tree, which the verifier requires; 0 when not checked. */
  expected: number;
  /** The verifier's own line on the mutated tree (why it fails), when checked. */
  mutated?: string;
  files: number;
  bytes: number;
}

/** What a run of test.sh or solve.sh on the host gave. */
interface HostRun {
  ok: boolean;
  reward: string | undefined;
  log: string;
}

const PATH = "/usr/local/bin:/usr/bin:/bin";

/** Runs a task script on the host as a sandbox would (no inherited environment), with its paths given by TASK_*. */
async function runScript(script: string, env: Record<string, string>, timeoutSec: number): Promise<HostRun> {
  const home = mkdtempSync(join(tmpdir(), "sextant-task-home-"));
  try {
    const ran = await run("bash", [script], {
      cwd: env.TASK_TREE,
      env: { PATH, HOME: home, TMPDIR: home, LANG: "C.UTF-8", ...env },
      timeout: timeoutSec * 1000,
      maxBuffer: 64 * 2 ** 20,
      killSignal: "SIGKILL",
    }).then(
      ({ stdout, stderr }) => ({ ok: true, log: `${stdout}${stderr}` }),
      (err: { stdout?: string; stderr?: string; message: string }) => ({
        ok: false,
        log: `${err.stdout ?? ""}${err.stderr ?? ""}\n${err.message}`,
      }),
    );
    let reward: string | undefined;
    try {
      if (env.TASK_LOGS) reward = readFileSync(join(env.TASK_LOGS, "reward.txt"), "utf8").trim();
    } catch {
      reward = undefined;
    }
    return { ...ran, reward };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

const verdictLine = (log: string) =>
  log
    .split("\n")
    .reverse()
    .find((l) => l.startsWith("sextant-verifier: "))
    ?.slice("sextant-verifier: ".length);
/** The log's last lines, on one line: the build prints one line per task. */
const tail = (log: string, lines = 6) =>
  log
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean)
    .slice(-lines)
    .join(" | ");

function treeSize(dir: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      const s = statSync(p);
      if (s.isDirectory()) walk(p);
      else {
        files++;
        bytes += s.size;
      }
    }
  };
  walk(dir);
  return { files, bytes };
}

function writeFile(path: string, text: string, mode = 0o644) {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
  chmodSync(path, mode);
}

/** Writes the task of `def` from the package's unpacked `source` (read, never written). Throws DefRefused. */
export async function writeTask(def: TaskDef, source: string, options: WriteOptions): Promise<WrittenTask> {
  const dir = join(options.out, options.split, def.id);
  // Whatever an earlier build wrote for this id goes first: a def refused now leaves no stale task.
  for (const split of ["train", "heldout"]) rmSync(join(options.out, split, def.id), { recursive: true, force: true });
  const mutatedFiles = [...new Set(def.mutation.edits.map((e) => e.file))];
  const runner = Object.entries(def.test.runner?.npm ?? {});
  const restore = [...def.test.files, ...runner.map(([name]) => `node_modules/${name}`)];
  for (const path of def.test.files)
    if (!existsSync(join(source, path))) throw new DefRefused(`test path ${path} is not in the package`);
  for (const file of mutatedFiles) {
    if (!existsSync(join(source, file))) throw new DefRefused(`${file} is not in the package`);
    const restored = restore.find((r) => within(file, r));
    if (restored) throw new DefRefused(`${file} is under ${restored}, which the verifier restores`);
  }
  if (existsSync(join(source, "Dockerfile")))
    throw new DefRefused("the package has a Dockerfile of its own at its root");
  const mutated = new Map(
    mutatedFiles.map((f) => [f, applyEdits(f, readFileSync(join(source, f), "utf8"), def.mutation.edits)]),
  );

  const work = mkdtempSync(join(tmpdir(), `sextant-task-${def.id}-`));
  try {
    const env = join(dir, "environment");
    cpSync(source, env, { recursive: true });
    for (const [name, version] of runner) {
      if (!options.placeRunner) throw new DefRefused("the def names runner packages and nothing places them");
      await options.placeRunner(name, version, env);
    }
    for (const path of restore) cpSync(join(env, path), join(dir, "tests", "files", path), { recursive: true });
    for (const file of mutatedFiles) {
      cpSync(join(env, file), join(dir, "solution", "files", file));
      writeFileSync(join(env, file), mutated.get(file)!);
    }
    writeFile(join(env, "Dockerfile"), dockerfile(def));
    writeFile(join(dir, "instruction.md"), instruction(def));
    writeFile(join(dir, "solution", "solve.sh"), solveScript(mutatedFiles), 0o755);
    const size = treeSize(env);
    writeFile(join(dir, "task.toml"), taskToml(def, { split: options.split, treeBytes: size.bytes }));

    let expected = 0;
    let mutatedVerdict: string | undefined;
    const testSh = join(dir, "tests", "test.sh");
    const timeoutSec = def.test.timeoutSec + 60;
    if (options.check) {
      // The solved tree is the mutated one after solve.sh, so the check runs the reference solution too.
      const solved = join(work, "solved");
      cpSync(env, solved, { recursive: true });
      const solve = await runScript(
        join(dir, "solution", "solve.sh"),
        { TASK_TREE: solved, TASK_SOLUTION: join(dir, "solution") },
        60,
      );
      if (!solve.ok) throw new DefRefused(`solve.sh failed on the host: ${tail(solve.log)}`);
      const counting = join(work, "counting.sh");
      writeFile(counting, testScript(def.test.command, def.test.timeoutSec, 0, restore), 0o755);
      const logs0 = join(work, "logs-solved");
      const pristine = await runScript(
        counting,
        { TASK_TREE: solved, TASK_TESTS: join(dir, "tests"), TASK_LOGS: logs0 },
        timeoutSec,
      );
      const verdict = verdictLine(pristine.log);
      const count = /with (\d+) passing/.exec(verdict ?? "")?.[1];
      if (pristine.reward !== "1" || count === undefined)
        throw new DefRefused(`the package's own tests do not pass untouched on the host: ${tail(pristine.log)}`);
      expected = Number(count);
      writeFile(testSh, testScript(def.test.command, def.test.timeoutSec, expected, restore), 0o755);
      const broken = join(work, "mutated");
      cpSync(env, broken, { recursive: true });
      const logs1 = join(work, "logs-mutated");
      const failing = await runScript(
        testSh,
        { TASK_TREE: broken, TASK_TESTS: join(dir, "tests"), TASK_LOGS: logs1 },
        timeoutSec,
      );
      mutatedVerdict = verdictLine(failing.log);
      if (failing.reward !== "0")
        throw new DefRefused(`the mutated tree still passes the package's tests (${mutatedVerdict ?? "no verdict"})`);
    } else {
      writeFile(testSh, testScript(def.test.command, def.test.timeoutSec, expected, restore), 0o755);
    }

    try {
      const packed = await checkTaskDir(dir);
      if (packed.skipped.length)
        throw new DefRefused(
          `the archive would leave out ${packed.skipped.map((s) => `${s.path} (${s.reason})`).join(", ")}`,
        );
    } catch (err) {
      if (err instanceof TaskRefused) throw new DefRefused(`the sandboxes would refuse the task: ${err.message}`);
      throw err;
    }
    return { dir, expected, ...(mutatedVerdict ? { mutated: mutatedVerdict } : {}), ...size };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
