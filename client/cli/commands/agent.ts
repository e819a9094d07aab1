import { spawnSync } from "node:child_process";
import { statSync } from "node:fs";
import { dirname, relative, resolve, sep } from "node:path";
import type { Command } from "commander";
import { TaskLimits, type Task, type TaskEvent, type TaskWorkspace } from "../../../protocol/agents/task.js";
import type { Sextant } from "../../sdk/client.js";
import { SextantError } from "../../sdk/errors.js";
import { canonicalRoot, findEntry } from "../../workspace/registry.js";
import { WorkspaceSecret } from "../../workspace/secret.js";
import { UPLOAD_SKIP_REASONS, uploadWorkspace, type WorkspaceUploadReport } from "../agent-upload.js";
import { gitArchiveUrl, GitUrlError } from "../git-archive.js";
import { client, UsageError, type GlobalOptions } from "../context.js";
import { printJson, printTable, shortDate } from "../output.js";
import { progress } from "../progress.js";

/** A task that ended other than `finished`: exit code 1, after its events have been shown. */
export class TaskNotFinishedError extends SextantError {
  override name = "TaskNotFinishedError";
}

/** Skipped paths named in human output. */
const NAMED_SKIPS = 20;

const plural = (n: number, word: string) => `${n.toLocaleString("en-US")} ${word}${n === 1 ? "" : "s"}`;
/** One printable line: a value with a newline or other control character is shown quoted and escaped. */
const printable = (text: string) => (/[\u0000-\u001f\u007f-\u009f]/.test(text) ? JSON.stringify(text) : text);
const clip = (text: string, max = 80) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);
const line = (text: string): void => void process.stdout.write(text + "\n");

/** What a tool call was about, for its one line: the path, command, pattern or paths it was given. */
function subject(args: unknown): string {
  if (!args || typeof args !== "object") return "";
  const a = args as Record<string, unknown>;
  const value = a.path ?? a.command ?? a.pattern ?? (Array.isArray(a.paths) ? a.paths.join(" ") : undefined);
  return typeof value === "string" ? clip(printable(value), 60) : "";
}

/** How a tool call ended: `ok`, a command's exit status, or the error's code and message. */
function outcome(data: Record<string, unknown>): string {
  if (data.ok !== true) {
    const error = (data.error ?? {}) as { code?: string; message?: string };
    return `error ${error.code ?? ""}: ${clip(printable(String(error.message ?? "")), 100)}`;
  }
  const result = data.result as { exitCode?: unknown; timedOut?: unknown } | null;
  if (result && result.timedOut === true) return "timed out";
  if (result && typeof result.exitCode === "number") return result.exitCode === 0 ? "ok" : `exit ${result.exitCode}`;
  return "ok";
}

/** The human view of a task's events: one line per finished tool call, the assistant's text, the end. */
export function eventPrinter(): (event: TaskEvent) => void {
  const calls = new Map<string, string>();
  return (event) => {
    const data = event.data;
    if (!data) return line(`${event.type} (no longer readable: the task's sandbox is gone)`);
    switch (event.type) {
      case "task.created":
        return line(`Task: ${clip(printable(String(data.prompt ?? "")), 100)} (model ${String(data.model)})`);
      case "task.started": {
        const skipped = Number(data.skipped ?? 0);
        line(`Started with ${plural(Number(data.files ?? 0), "file")}${skipped ? `; ${skipped} skipped` : ""}.`);
        const named = Array.isArray(data.skippedEntries)
          ? (data.skippedEntries as { path: string; reason: string }[])
          : [];
        for (const e of named) line(`  skipped ${printable(String(e.path))}: ${String(e.reason)}`);
        return;
      }
      case "user.message":
        return line(`You: ${clip(printable(String(data.content ?? "")), 100)}`);
      case "turn.started":
        return line(`Turn ${String(data.turn)}`);
      case "assistant.message":
        if (typeof data.content === "string" && data.content.trim())
          for (const text of data.content.trim().split("\n")) line(`  ${text}`);
        return;
      case "tool.call":
        calls.set(String(data.callId), subject(data.args));
        return;
      case "tool.result": {
        const duration = typeof data.durationMs === "number" ? `${Math.round(data.durationMs)} ms` : "";
        const about = calls.get(String(data.callId)) ?? "";
        return line(`  ${String(data.tool).padEnd(12)} ${about.padEnd(30)} ${outcome(data)}  ${duration}`.trimEnd());
      }
      case "task.ended": {
        const why = data.summary ?? data.message;
        return line(`Task ${String(data.status)} (${String(data.reason)})${why ? `: ${printable(String(why))}` : "."}`);
      }
    }
  };
}

function uploadSummary(report: WorkspaceUploadReport): string {
  const skipped = Object.entries(report.skipped)
    .filter(([, n]) => n > 0)
    .map(([why, n]) => `${n} ${UPLOAD_SKIP_REASONS[why as keyof typeof UPLOAD_SKIP_REASONS]}`);
  const withheld =
    report.secretsWithheld > 0
      ? `; ${plural(report.secretsWithheld, "secret")} withheld from ${plural(report.filesWithSecrets, "file")}`
      : "";
  const lines = report.skippedFiles
    .slice(0, NAMED_SKIPS)
    .map((f) => `\n  skipped ${printable(f.path)}: ${UPLOAD_SKIP_REASONS[f.reason]}`);
  if (report.skippedFiles.length > NAMED_SKIPS) lines.push(`\n  and ${report.skippedFiles.length - NAMED_SKIPS} more`);
  return (
    `Uploaded ${plural(report.files, "file")} (${report.bytes.toLocaleString("en-US")} bytes) ` +
    `in ${plural(report.requests, "request")}${withheld}` +
    `${skipped.length ? `; skipped ${skipped.join(", ")}` : ""}.${lines.join("")}`
  );
}

/**
 * Prints the task's events until it ends, or up to `until`: human lines, or one JSON line each (the
 * event with its `taskId`). Ctrl-C stops following, not the task.
 */
async function showEvents(sextant: Sextant, id: string, json: boolean, until?: number): Promise<void> {
  const controller = new AbortController();
  const stop = () => controller.abort(new Error("interrupted"));
  process.once("SIGINT", stop);
  const print = json ? (e: TaskEvent) => line(JSON.stringify({ ...e, taskId: id })) : eventPrinter();
  try {
    if (until === 0) return;
    for await (const event of sextant.agents.events(id, { signal: controller.signal })) {
      print(event);
      if (until !== undefined && event.id >= until) return;
    }
  } catch (err) {
    if (!controller.signal.aborted) throw err;
    throw new SextantError(`Stopped following task ${id}; it keeps running (\`sextant agent follow ${id}\`).`);
  } finally {
    process.off("SIGINT", stop);
  }
}

/** After the end: the diff's counts, and exit code 1 unless the task finished. */
async function concluded(sextant: Sextant, id: string, json: boolean, dir?: string): Promise<void> {
  const task = await sextant.agents.get(id);
  if (!json && task.status === "finished") {
    const diff = await sextant.agents.diff(id).catch(() => undefined);
    if (diff)
      line(
        diff.filesChanged === 0
          ? "No files changed."
          : `${plural(diff.filesChanged, "file")} changed, +${diff.insertions} -${diff.deletions}. ` +
              `Apply with \`sextant agent apply ${id}${dir ? ` ${dir}` : ""}\`.`,
      );
  }
  if (task.status !== "finished")
    throw new TaskNotFinishedError(`Task ${id} ended ${task.status} (${task.endReason ?? "unknown reason"}).`);
}

function limitsFrom(opts: { maxTurns?: string; maxTokens?: string; wallSeconds?: string }): Partial<TaskLimits> {
  const flags = [
    ["--max-turns", "turns", opts.maxTurns],
    ["--max-tokens", "tokens", opts.maxTokens],
    ["--wall-seconds", "wallSeconds", opts.wallSeconds],
  ] as const;
  const limits: Partial<TaskLimits> = {};
  for (const [flag, key, raw] of flags) {
    if (raw === undefined) continue;
    const parsed = TaskLimits.shape[key].safeParse(/^\d+$/.test(raw) ? Number(raw) : NaN);
    if (!parsed.success) throw new UsageError(`${flag} must be a whole number: ${parsed.error.issues[0]!.message}.`);
    limits[key] = parsed.data;
  }
  return limits;
}

/**
 * The index codebase_search reads for a task on `root`: the workspace `root` is in (or is), when it
 * was indexed on this edge. Its secret goes to the task's sandbox only.
 */
async function taskWorkspace(sextant: Sextant, root: string): Promise<(TaskWorkspace & { root: string }) | undefined> {
  const entry = await findEntry(root, sextant.baseURL);
  if (!entry?.workspaceId) return undefined;
  const base = relative(entry.root, canonicalRoot(root)).split(sep).join("/");
  return {
    id: entry.workspaceId,
    secret: WorkspaceSecret.parse(entry.secret).bytes.toString("base64url"),
    base,
    root: entry.root,
  };
}

function directory(dir: string): string {
  const root = resolve(dir);
  if (!statSync(root, { throwIfNoEntry: false })?.isDirectory()) throw new UsageError(`${dir} is not a directory.`);
  return root;
}

/** `git apply` run on `root` as a directory of files, even when it lies below some repository's root. */
function git(root: string, args: string[], input: string): { ok: boolean; stdout: string; stderr: string } {
  // Inside a repository git reads the patch's paths from the repository's root and ignores those
  // outside the current directory; stopping the search for one at `root` makes them root's.
  const { GIT_DIR: _dir, GIT_WORK_TREE: _tree, GIT_INDEX_FILE: _index, ...env } = process.env;
  const result = spawnSync("git", ["apply", ...args], {
    cwd: root,
    input,
    encoding: "utf8",
    env: { ...env, GIT_CEILING_DIRECTORIES: dirname(root) },
  });
  if (result.error) throw new SextantError(`Could not run git: ${result.error.message}`);
  return { ok: result.status === 0, stdout: result.stdout, stderr: result.stderr };
}

/** `agent run --git|--archive`: the edge fetches the code into the sandbox; nothing is uploaded from here. */
async function runOnArchive(
  options: GlobalOptions,
  prompt: string,
  limits: Partial<TaskLimits>,
  opts: Record<string, string | boolean | undefined>,
  dir: string | undefined,
): Promise<void> {
  if (dir !== undefined) throw new UsageError("Give a directory or --git/--archive, not both.");
  if (typeof opts.git === "string" && typeof opts.archive === "string")
    throw new UsageError("Give --git or --archive, not both.");
  let url: string;
  try {
    url = typeof opts.git === "string" ? gitArchiveUrl(opts.git) : String(opts.archive);
  } catch (err) {
    if (err instanceof GitUrlError) throw new UsageError(err.message);
    throw err;
  }
  const json = Boolean(options.json);
  const { sextant } = await client(options);
  const task = await sextant.agents.create({
    prompt,
    source: "archive",
    archive: { url },
    limits,
    ...(typeof opts.model === "string" ? { model: opts.model } : {}),
  });
  if (opts.detach) return json ? printJson(task) : line(task.id);
  if (!json) line(`Created task ${task.id} (model ${task.model}); the edge fetches ${url}`);
  await showEvents(sextant, task.id, json);
  await concluded(sextant, task.id, json);
}

export function agentCommands(program: Command): void {
  const agent = program
    .command("agent")
    .description("Run coding-agent tasks in the edge's sandboxes, follow them, and apply what they change");

  agent
    .command("run")
    .description("Upload a directory (ignore rules and secret withholding as `index`), start a task on it, follow it")
    .argument("<task>", "what the agent should do")
    .argument("[dir]", "the directory to upload", ".")
    .option("--model <name>", "a chat model the gateway serves (default: the edge's AGENT_MODEL)")
    .option("--max-turns <n>", "model turns at most (default 30)")
    .option("--max-tokens <n>", "prompt and completion tokens at most (default 500,000)")
    .option("--wall-seconds <n>", "seconds from start to end at most (default 1800)")
    .option("--detach", "print the task id once started, and return")
    .option("--no-codebase-search", "do not give the agent codebase_search, even where the directory is indexed")
    .option("--git <url>", "run on a GitHub or GitLab repository (https://github.com/o/r[#ref]) instead of a directory")
    .option("--archive <url>", "run on the files of a .tar.gz or .tar the edge fetches, instead of a directory")
    .action(async (prompt: string, dir: string, opts: Record<string, string | boolean | undefined>, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const json = Boolean(options.json);
      if (!prompt.trim()) throw new UsageError("The task is empty: say what the agent should do.");
      const limits = limitsFrom(opts as { maxTurns?: string; maxTokens?: string; wallSeconds?: string });
      if (typeof opts.git === "string" || typeof opts.archive === "string")
        return runOnArchive(options, prompt, limits, opts, cmd.args.length > 1 ? dir : undefined);
      const root = directory(dir);
      const { sextant } = await client(options);
      const indexed = opts.codebaseSearch === false ? undefined : await taskWorkspace(sextant, root);
      const created = await sextant.agents.create({
        prompt,
        source: "upload",
        limits,
        ...(typeof opts.model === "string" ? { model: opts.model } : {}),
        ...(indexed ? { workspace: { id: indexed.id, secret: indexed.secret, base: indexed.base } } : {}),
      });
      if (!json) {
        line(`Created task ${created.id} (model ${created.model}); uploading ${root}`);
        line(
          indexed
            ? `codebase_search reads the index of ${indexed.root} (workspace ${indexed.id}).`
            : opts.codebaseSearch === false
              ? "codebase_search is off (--no-codebase-search)."
              : `codebase_search is off: ${root} is not indexed on this edge (\`sextant index\` turns it on).`,
        );
      }
      const bar = progress(!json);
      let report: WorkspaceUploadReport;
      try {
        report = await uploadWorkspace(sextant, created.id, root, {
          onProgress: (e) => bar.update("uploading", e.done, e.total),
        });
      } finally {
        bar.stop();
      }
      if (!json) line(uploadSummary(report));
      const task = await sextant.agents.start(created.id);
      if (opts.detach) return json ? printJson(task) : line(task.id);
      await showEvents(sextant, task.id, json);
      await concluded(sextant, task.id, json, dir);
    });

  agent
    .command("list")
    .description("Your org's latest 50 agent tasks")
    .action(async (_opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const tasks = await (await client(options)).sextant.agents.list();
      if (options.json) return printJson(tasks);
      printTable(tasks, [
        ["id", (t: Task) => t.id],
        ["status", (t) => t.status],
        ["reason", (t) => t.endReason],
        ["model", (t) => t.model],
        ["turns", (t) => String(t.usage.turns)],
        ["tokens", (t) => t.usage.tokens.toLocaleString("en-US")],
        ["created", (t) => shortDate(t.createdAt)],
      ]);
    });

  agent
    .command("logs")
    .description("A task's events so far, without following it")
    .argument("<id>", "the task id, such as task_…")
    .action(async (id: string, _opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const { sextant } = await client(options);
      const task = await sextant.agents.get(id);
      await showEvents(sextant, id, Boolean(options.json), task.lastEventId);
    });

  agent
    .command("follow")
    .description("A task's events, as they happen, until it ends; exit code 1 unless it finished")
    .argument("<id>", "the task id, such as task_…")
    .action(async (id: string, _opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const { sextant } = await client(options);
      await showEvents(sextant, id, Boolean(options.json));
      await concluded(sextant, id, Boolean(options.json));
    });

  agent
    .command("cancel")
    .description("End a task as cancelled (an ended task stays as it is)")
    .argument("<id>", "the task id, such as task_…")
    .action(async (id: string, _opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const task = await (await client(options)).sextant.agents.cancel(id);
      if (options.json) return printJson(task);
      line(
        task.status === "cancelled"
          ? `Cancelled task ${task.id}.`
          : `Task ${task.id} had already ended: ${task.status} (${task.endReason}).`,
      );
    });

  agent
    .command("apply")
    .description("Apply a task's diff to a directory with `git apply`, or refuse if it does not apply")
    .argument("<id>", "the task id, such as task_…")
    .argument("[dir]", "the directory to change", ".")
    .option("--dry-run", "print the diff only")
    .action(async (id: string, dir: string, opts: { dryRun?: boolean }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const root = directory(dir);
      const diff = await (await client(options)).sextant.agents.diff(id);
      if (opts.dryRun) return options.json ? printJson(diff) : void process.stdout.write(diff.diff);
      if (diff.filesChanged === 0 || !diff.diff.trim()) {
        if (options.json) return printJson({ id, dir: root, applied: false, files: [] });
        return line(`Task ${id} changed no files.`);
      }
      const check = git(root, ["--check"], diff.diff);
      if (!check.ok)
        throw new SextantError(
          `The diff of task ${id} does not apply to ${root}; nothing was changed.\n${check.stderr.trim()}`,
        );
      const files = git(root, ["--numstat"], diff.diff)
        .stdout.trim()
        .split("\n")
        .filter(Boolean)
        .map((row) => {
          const [added, deleted, ...path] = row.split("\t");
          return { path: path.join("\t"), insertions: Number(added), deletions: Number(deleted) };
        });
      const applied = git(root, [], diff.diff);
      if (!applied.ok) throw new SextantError(`git apply failed in ${root}: ${applied.stderr.trim()}`);
      if (options.json) return printJson({ id, dir: root, applied: true, files });
      line(`Applied task ${id} to ${root}: ${plural(files.length, "file")} changed.`);
      for (const f of files) line(`  ${printable(f.path)}  +${f.insertions} -${f.deletions}`);
    });
}
