/**
 * The agent's tools as the sandbox host runs them, on one task's tree. File tools run in the host
 * through `TreeFs` (`tree-fs.ts`): each path walked from the tree's root a component at a time, with
 * no symlink followed out of the tree and nothing opened that could block (a FIFO, a device). Heavy
 * work (grep's scan) runs in the host's worker pool with a deadline. Commands (run_terminal,
 * read_lints) run through the sandbox's driver. A tool's failure is a result the model reads
 * (`{ ok: false, error: { code, message } }`), never a host error.
 */
import { createHash } from "node:crypto";
import type { z } from "zod";
import { relative } from "node:path";
import { CodebaseSearchCall, type SandboxLimits } from "../protocol/agents/sandbox.js";
import { BINARY_SNIFF_BYTES, looksBinary } from "../protocol/binary.js";
import { NOT_INDEXED, toolNamed, type ToolOutcome } from "../protocol/agents/tools.js";
import type { RunResult, SandboxDriver } from "./drivers.js";
import type { TaskIndex } from "./search.js";
import { TreeError, type TreeFs } from "./tree-fs.js";
import { JobAborted, JobTimeout, type TreePool } from "./tree-pool.js";

export interface ToolContext {
  tree: string;
  /** The tree, as the host touches it. */
  fs: TreeFs;
  /** The host's worker pool, for grep's scan. */
  pool: TreePool;
  /** Whose work this is, for the pool's fair share (the task's org, opaque). */
  tenant: string;
  limits: SandboxLimits;
  /** The sandbox's driver (where its commands see the tree). */
  driver: SandboxDriver;
  /** The sandbox's uid when the host runs as root: only its files are read. */
  owner: number | null;
  /** Aborted when the sandbox is destroyed or its task cancelled. */
  signal?: AbortSignal;
  /** Runs a command of the sandbox (its driver, its cgroup, its directories). */
  exec(command: string, timeoutMs: number): Promise<RunResult>;
  /** Called with each command's result, so the host can count the sandbox's command time. */
  ran(result: RunResult): void;
  /** The index codebase_search reads, when the task came with one. */
  index?: TaskIndex | undefined;
}

export class ToolError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export const SKIPPED_DIRS = [".git", "node_modules"];
const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex");

/** The most a file tool reads of one file: past it, `run_terminal` (`sed -n`, `head`) reads it. */
export const MAX_TOOL_FILE_BYTES = 16 * 2 ** 20;

function cap(text: string, bytes: number): { text: string; truncated: boolean } {
  const buffer = Buffer.from(text, "utf8");
  if (buffer.length <= bytes) return { text, truncated: false };
  return {
    text: buffer
      .subarray(0, bytes)
      .toString("utf8")
      .replace(/\uFFFD$/, ""),
    truncated: true,
  };
}

async function readText(ctx: ToolContext, path: string): Promise<Buffer> {
  return ctx.fs.read(path, MAX_TOOL_FILE_BYTES);
}

async function readFileTool(ctx: ToolContext, a: { path: string; startLine?: number; endLine?: number }) {
  const bytes = await readText(ctx, a.path);
  if (looksBinary(bytes)) throw new ToolError("binary", `${a.path} is a binary file.`);
  const text = bytes.toString("utf8");
  // Where each line starts: line n is text.slice(starts[n - 1], starts[n]), its newline included.
  const starts = [0];
  for (let i = text.indexOf("\n"); i >= 0 && i < text.length - 1; i = text.indexOf("\n", i + 1)) starts.push(i + 1);
  const total = text.length === 0 ? 0 : starts.length;
  starts.push(text.length);
  const start = a.startLine ?? 1;
  let end = Math.min(a.endLine ?? total, total);
  if (start > Math.max(total, 1) || end < start - 1)
    throw new ToolError("invalid_arguments", `${a.path} has ${total} lines; ask for a range within them.`);
  // Whole lines up to the output cap; a first line longer than the cap is cut.
  let truncated = false;
  let size = 0;
  for (let line = start; line <= end; line++) {
    size += Buffer.byteLength(text.slice(starts[line - 1], starts[line]));
    if (size <= ctx.limits.outputBytes) continue;
    truncated = true;
    end = Math.max(line - 1, start);
    break;
  }
  const selected = text.slice(starts[start - 1], starts[end]);
  const content = truncated ? cap(selected, ctx.limits.outputBytes).text : selected;
  return { path: a.path, content, startLine: start, endLine: end, lines: total, hash: sha256(bytes), truncated };
}

async function listDir(ctx: ToolContext, a: { path?: string; depth: number }) {
  const path = a.path ?? ".";
  if (!(await ctx.fs.isDirectory(path))) throw new ToolError("not_found", `${path} is not a directory.`);
  const entries: string[] = [];
  let bytes = 0;
  const complete = await ctx.fs.walk(path, a.depth, new Set(SKIPPED_DIRS), (rel, isDir) => {
    const entry = isDir ? `${rel}/` : rel;
    bytes += entry.length + 1;
    if (bytes > ctx.limits.outputBytes || entries.length >= 5000) return false;
    entries.push(entry);
    return true;
  });
  return { entries, truncated: !complete };
}

const GREP_BUDGET_MS = 10_000;

async function grep(ctx: ToolContext, a: { pattern: string; path?: string; ignoreCase: boolean; maxResults: number }) {
  try {
    new RegExp(a.pattern, a.ignoreCase ? "i" : "");
  } catch (err) {
    throw new ToolError("invalid_arguments", `The pattern is not a regular expression: ${(err as Error).message}`);
  }
  const dir = await ctx.fs.resolveDir(a.path ?? ".");
  const budgetMs = Math.min(ctx.limits.commandTimeoutMs, GREP_BUDGET_MS);
  try {
    return await ctx.pool.grep(
      ctx.tenant,
      {
        root: ctx.tree,
        owner: ctx.owner,
        dir,
        skipDirs: SKIPPED_DIRS,
        maxDepth: 64,
        maxFiles: 20_000,
        pattern: a.pattern,
        ignoreCase: a.ignoreCase,
        maxResults: a.maxResults,
        outputBytes: ctx.limits.outputBytes,
        maxFileBytes: 4 * 2 ** 20,
        sniffBytes: BINARY_SNIFF_BYTES,
      },
      budgetMs,
      ctx.signal,
    );
  } catch (err) {
    if (err instanceof JobAborted) throw new ToolError("cancelled", "The task was cancelled while grep ran.");
    if (!(err instanceof JobTimeout)) throw err;
    throw new ToolError(
      "timeout",
      `The search took over ${budgetMs} ms; narrow its path or simplify the pattern (nested repetition backtracks).`,
    );
  }
}

async function editFile(
  ctx: ToolContext,
  a: { path: string; oldText: string; newText: string; expectedHash?: string },
) {
  const bytes = await readText(ctx, a.path);
  if (a.expectedHash && sha256(bytes) !== a.expectedHash)
    throw new ToolError("hash_mismatch", `${a.path} changed since it was read (its hash is ${sha256(bytes)}).`);
  const text = bytes.toString("utf8");
  const at = text.indexOf(a.oldText);
  if (at < 0) throw new ToolError("no_match", `oldText does not occur in ${a.path}.`);
  if (text.indexOf(a.oldText, at + 1) >= 0)
    throw new ToolError("ambiguous_match", `oldText occurs more than once in ${a.path}; include more context.`);
  const next = text.slice(0, at) + a.newText + text.slice(at + a.oldText.length);
  await ctx.fs.write(a.path, next);
  return { path: a.path, hash: sha256(next) };
}

async function createFile(ctx: ToolContext, a: { path: string; content: string }) {
  await ctx.fs.write(a.path, a.content, { exclusive: true });
  return { path: a.path, hash: sha256(a.content) };
}

async function deleteFile(ctx: ToolContext, a: { path: string }) {
  await ctx.fs.remove(a.path);
  return { path: a.path };
}

async function runTerminal(ctx: ToolContext, a: { command: string; timeoutMs: number }) {
  const result = await ctx.exec(a.command, Math.min(a.timeoutMs, ctx.limits.commandTimeoutMs));
  ctx.ran(result);
  return result;
}

/** `file(line,col): error TSxxxx: message`, as `tsc --pretty false` prints a diagnostic. */
const TSC_LINE = /^(.+?)\((\d+),(\d+)\): (error|warning) (TS\d+): (.*)$/;

/** Under this much of read_lints' timeout left, a linter is not started. */
const MIN_LINT_MS = 100;

/** A linter read_lints had no time left to run: reported as timed out, with no exit code. */
const notRun = (name: string) => ({ name, exitCode: null, timedOut: true });

async function readLints(ctx: ToolContext, a: { paths?: string[]; timeoutMs?: number }) {
  const present = async (p: string) => (await ctx.fs.lstat(p).catch(() => undefined)) !== undefined;
  const linters: { name: string; exitCode: number | null; timedOut: boolean }[] = [];
  const diagnostics: {
    path: string;
    line: number;
    column: number;
    severity: string;
    message: string;
    source: string;
  }[] = [];
  // The linters share the call's timeout: the second is given what the first left of it.
  const until = performance.now() + Math.min(a.timeoutMs ?? ctx.limits.commandTimeoutMs, ctx.limits.commandTimeoutMs);
  const run = (command: string) => {
    const left = Math.floor(until - performance.now());
    return left < MIN_LINT_MS ? undefined : runTerminal(ctx, { command, timeoutMs: left });
  };
  if ((await present("tsconfig.json")) && (await present("node_modules/.bin/tsc"))) {
    const r = await run("node_modules/.bin/tsc --noEmit --pretty false");
    linters.push(r ? { name: "tsc", exitCode: r.exitCode, timedOut: r.timedOut } : notRun("tsc"));
    for (const line of (r?.stdout ?? "").split("\n")) {
      const m = TSC_LINE.exec(line.trim());
      if (m)
        diagnostics.push({ path: m[1]!, line: +m[2]!, column: +m[3]!, severity: m[4]!, message: m[6]!, source: m[5]! });
    }
  }
  const eslintConfig = ["eslint.config.js", "eslint.config.mjs", "eslint.config.cjs", ".eslintrc.json", ".eslintrc.js"];
  const hasConfig = (await Promise.all(eslintConfig.map(present))).some(Boolean);
  if (hasConfig && (await present("node_modules/.bin/eslint"))) {
    const targets = (a.paths ?? ["."]).map((p) => `'${p.replace(/'/g, "'\\''")}'`).join(" ");
    const r = await run(`node_modules/.bin/eslint -f json ${targets}`);
    linters.push(r ? { name: "eslint", exitCode: r.exitCode, timedOut: r.timedOut } : notRun("eslint"));
    try {
      for (const file of JSON.parse(r?.stdout ?? "") as { filePath: string; messages: Record<string, unknown>[] }[])
        for (const m of file.messages)
          diagnostics.push({
            path: relative(ctx.driver.workdir(ctx.tree), file.filePath),
            line: Number(m.line ?? 0),
            column: Number(m.column ?? 0),
            severity: m.severity === 2 ? "error" : "warning",
            message: String(m.message ?? ""),
            source: String(m.ruleId ?? "eslint"),
          });
    } catch {
      // eslint failed (or had no time to run) before it could report: its entry says so.
    }
  }
  const wanted = a.paths && new Set(a.paths);
  return { linters, diagnostics: wanted ? diagnostics.filter((d) => wanted.has(d.path)) : diagnostics };
}

const RUNNERS: Record<string, (ctx: ToolContext, args: never) => Promise<unknown>> = {
  read_file: readFileTool,
  list_dir: listDir,
  grep,
  edit_file: editFile,
  create_file: createFile,
  delete_file: deleteFile,
  run_terminal: runTerminal,
  read_lints: readLints,
  codebase_search: async (ctx, args: z.output<typeof CodebaseSearchCall>) => {
    if (!ctx.index) throw new ToolError(NOT_INDEXED.code, NOT_INDEXED.message);
    return ctx.index.resolve(async (path) => (await readText(ctx, path)).toString("utf8"), args);
  },
};

/** Runs one tool call: its arguments checked against the tool's schema, its failure a result. */
export async function runTool(ctx: ToolContext, name: string, args: unknown): Promise<ToolOutcome> {
  const tool = toolNamed(name);
  const runner = RUNNERS[name];
  if (!tool || !runner)
    return { ok: false, error: { code: "unknown_tool", message: `The host runs no tool named ${name}.` } };
  // codebase_search arrives with the edge's answer beside the model's arguments (protocol/agents/sandbox.ts).
  const parsed = (name === "codebase_search" ? CodebaseSearchCall : tool.args).safeParse(args);
  if (!parsed.success)
    return {
      ok: false,
      error: {
        code: "invalid_arguments",
        message: parsed.error.issues.map((i) => `${i.path.join(".") || "arguments"}: ${i.message}`).join("; "),
      },
    };
  try {
    return { ok: true, result: await runner(ctx, parsed.data as never) };
  } catch (err) {
    if (err instanceof ToolError || err instanceof TreeError)
      return { ok: false, error: { code: err.code, message: err.message } };
    const code = (err as NodeJS.ErrnoException).code;
    return { ok: false, error: { code: "io_error", message: `${name} failed: ${code ?? (err as Error).message}` } };
  }
}
