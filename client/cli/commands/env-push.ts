import { statSync } from "node:fs";
import { resolve } from "node:path";
import type { Command } from "commander";
import { ARCHIVE_SKIP_REASONS, type SkippedEntry } from "../../envs/task-archive.js";
import { checkTaskSet, NoTasksError, pushTaskSet, type CheckedSet } from "../../envs/task-set.js";
import { client, UsageError, type GlobalOptions } from "../context.js";
import { printJson } from "../output.js";
import { progress } from "../progress.js";

const globals = (cmd: Command) => cmd.optsWithGlobals<GlobalOptions>();
const line = (text: string): void => void process.stdout.write(text + "\n");
const plural = (n: number, word: string) => `${n.toLocaleString("en-US")} ${word}${n === 1 ? "" : "s"}`;
/** One printable line: a name with a newline or other control character is shown quoted and escaped. */
const printable = (text: string) => (/[\u0000-\u001f\u007f-\u009f]/.test(text) ? JSON.stringify(text) : text);
/** Skipped entries named per task in human output. */
const NAMED_SKIPS = 10;

function printSkips(name: string, skipped: SkippedEntry[]): void {
  for (const s of skipped.slice(0, NAMED_SKIPS))
    line(`  ${printable(name)}: skipped ${printable(s.path)} (${ARCHIVE_SKIP_REASONS[s.reason]})`);
  if (skipped.length > NAMED_SKIPS) line(`  ${printable(name)}: and ${skipped.length - NAMED_SKIPS} more skipped`);
}

function printChecked(checked: CheckedSet): void {
  for (const t of checked.ready) printSkips(t.name, t.skipped);
  for (const t of checked.refused) {
    line(`  refused ${printable(t.name)}: ${printable(t.reason)}`);
    printSkips(t.name, t.skipped);
  }
}

const jsonChecked = (checked: CheckedSet) => ({
  ready: checked.ready.map(({ dir: _dir, ...t }) => t),
  refused: checked.refused.map(({ dir: _dir, ...t }) => t),
});

/** Adds `push` to the `envs` command group (made here if no other command made it first). */
export function envPush(program: Command): void {
  const envs =
    program.commands.find((c) => c.name() === "envs") ??
    program.command("envs").description("Environments: task sets, sessions and rollouts for training");

  envs
    .command("push")
    .description(
      "Check, pack and upload the Harbor task directories under <dir> (or <dir> itself) as a task set, " +
        "and write <dir>/.sextant-taskset.json mapping each task's name to its index and archive hash",
    )
    .argument("<dir>", "a task set (a directory of task directories) or one task directory")
    .option("--dry-run", "check and pack every task, and upload nothing")
    .option(
      "--archive-base-url <url>",
      "upload no archive: the set names each task's archive at <url>/<sha256>.tar.gz (https, a public " +
        "location you publish the archives at; the edge fetches a task's archive from there when a sandbox " +
        "host lacks it, and refuses the task if the bytes there are not the archive's)",
    )
    .option(
      "--out <dir>",
      "write each task's archive to <dir>/<sha256>.tar.gz, for you to publish at --archive-base-url " +
        "(before any session or rollout runs on the set)",
    )
    .action(async (dir: string, opts: { dryRun?: boolean; archiveBaseUrl?: string; out?: string }, cmd: Command) => {
      const root = resolve(dir);
      let isDir = false;
      try {
        isDir = statSync(root).isDirectory();
      } catch {
        // Reported below, as for a file.
      }
      if (!isDir) throw new UsageError(`${dir} is not a directory.`);
      const base = opts.archiveBaseUrl;
      if (base !== undefined && (!URL.canParse(base) || !/^https?:$/.test(new URL(base).protocol)))
        throw new UsageError(`--archive-base-url must be an https URL, not ${JSON.stringify(base)}.`);
      const outDir = opts.out === undefined ? undefined : resolve(opts.out);
      const json = Boolean(globals(cmd).json);
      const bar = progress(!json);
      let seen = 0;
      const onTask = () => bar.update("checking", ++seen);

      if (opts.dryRun) {
        const checked = await checkTaskSet(root, onTask);
        bar.stop();
        if (checked.ready.length + checked.refused.length === 0)
          throw new UsageError(`No task directories under ${dir}.`);
        if (json) return printJson(jsonChecked(checked));
        printChecked(checked);
        line(
          `${plural(checked.ready.length, "task")} ready, ${checked.refused.length} refused; nothing uploaded (--dry-run).`,
        );
        return;
      }

      const { sextant, resolved } = await client(globals(cmd));
      let result;
      try {
        result = await pushTaskSet(sextant.envs, root, resolved.baseURL, {
          onTask,
          ...(base !== undefined ? { archiveBaseUrl: base } : {}),
          ...(outDir !== undefined ? { outDir } : {}),
        });
      } catch (err) {
        bar.stop();
        if (err instanceof NoTasksError && !json) printChecked(err.checked);
        throw err;
      }
      bar.stop();
      if (json)
        return printJson({
          id: result.map.id,
          tasks: result.map.tasks,
          uploaded: result.uploaded.length,
          present: result.present.length,
          map: result.mapPath,
          ...(base !== undefined ? { archiveBaseUrl: base } : {}),
          ...(outDir !== undefined ? { out: outDir } : {}),
          ...jsonChecked(result.checked),
        });
      printChecked(result.checked);
      const { ready, refused } = result.checked;
      const sent =
        base !== undefined
          ? `archives named at ${base}/<sha256>.tar.gz, none sent`
          : `${plural(result.uploaded.length, "archive")} sent, ${result.present.length} already on the host`;
      line(
        `Pushed task set ${result.map.id}: ${plural(ready.length, "task")} (${sent})` +
          `${refused.length ? `; ${refused.length} refused` : ""}.`,
      );
      if (outDir !== undefined) line(`Archives to publish: ${outDir}`);
      line(`Task names, indexes and hashes: ${result.mapPath}`);
    });
}
