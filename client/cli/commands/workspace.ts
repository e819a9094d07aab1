import { readFileSync } from "node:fs";
import type { Command } from "commander";
import { Language, LANGUAGE_CODES, MAX_FILE_BYTES } from "../../../protocol/sync.js";
import type { IndexReport } from "../../workspace/session.js";
import type { SkippedFile, SkipReason } from "../../workspace/scanner.js";
import { copiesLine } from "../../workspace/collapse.js";
import { scopeWithin, searchWorkspace } from "../../workspace/search.js";
import { indexWorkspace, openWorkspace, scanLocal } from "../../workspace/session.js";
import { StatPrefetch } from "../../workspace/prefetch.js";
import { pendingChanges, type Reembed } from "../../workspace/sync.js";
import { DEFAULT_DEBOUNCE_MS, watchWorkspace } from "../../workspace/watch.js";
import {
  exportToken,
  parseToken,
  readRegistry,
  removeEntry,
  saveEntry,
  canonicalRoot,
} from "../../workspace/registry.js";
import { loadState, removeState, saveState } from "../../workspace/state.js";
import { NotFoundError } from "../../sdk/errors.js";
import { client, UsageError, type GlobalOptions } from "../context.js";
import { printFields, printJson, printTable, shortDate } from "../output.js";
import { progress } from "../progress.js";

const plural = (n: number, word: string) => `${n.toLocaleString("en-US")} ${word}${n === 1 ? "" : "s"}`;

const SKIP_REASONS: Record<SkipReason, string> = {
  binary: "binary",
  tooLarge: "too large",
  pathTooLong: "path too long",
  symlink: "symlink",
  generated: "generated",
  special: "not a regular file",
  badName: "name not UTF-8",
  unreadable: "unreadable",
  vanished: "vanished",
};
/** Skipped paths named in human output; `--json` lists them all. */
const NAMED_SKIPS = 20;

function skippedLine(report: IndexReport): string {
  const parts = Object.entries(report.skipped)
    .filter(([, n]) => n > 0)
    .map(([why, n]) => `${n} ${SKIP_REASONS[why as SkipReason] ?? why}`);
  return parts.length ? `; skipped ${parts.join(", ")}` : "";
}

/** A path as one printable line: a name with a newline or other control character is shown quoted and escaped. */
const printable = (path: string) => (/[\u0000-\u001f\u007f-\u009f]/.test(path) ? JSON.stringify(path) : path);

/** One line per skipped path and why, up to NAMED_SKIPS, then how many more. */
export function skippedList(files: readonly SkippedFile[]): string {
  const lines = files.slice(0, NAMED_SKIPS).map((f) => `  skipped ${printable(f.path)}: ${SKIP_REASONS[f.reason]}\n`);
  if (files.length > NAMED_SKIPS) lines.push(`  and ${files.length - NAMED_SKIPS} more (--json lists them all)\n`);
  return lines.join("");
}

/** What `sextant index` says when the edge's embedder changed since the workspace was indexed. */
export function reembedLine(reembed: Reembed): string {
  const from = reembed.from ? ` (indexed by ${reembed.from})` : "";
  const resumed = reembed.alreadyMoved > 0 ? ` (${plural(reembed.alreadyMoved, "file")} moved by an earlier run)` : "";
  return `Moving the workspace to this edge's embedder ${reembed.to}${from}: sending ${plural(reembed.files, "file")} again${resumed}; searches keep working meanwhile.`;
}

export function summary(report: IndexReport): string {
  const { sync } = report;
  const changes =
    sync.added + sync.changed + sync.deleted === 0
      ? "no changes"
      : `+${sync.added} added, ~${sync.changed} changed, -${sync.deleted} deleted`;
  const state = sync.converged ? "in sync" : "not converged (another client is syncing; run again)";
  const withheld = sync.secretsWithheld > 0 ? `; ${sync.secretsWithheld} secret(s) withheld` : "";
  const moved = !sync.reembed
    ? ""
    : sync.reembed.moved
      ? `; moved to ${sync.reembed.to}`
      : `; not yet moved to ${sync.reembed.to} (searches use the old index; run again)`;
  return (
    `${report.created ? "Created workspace" : "Workspace"} ${report.workspaceId}: ${plural(report.files, "file")}, ` +
    `${changes}; ${state}${moved}${skippedLine(report)}${withheld}. ` +
    `Scan ${report.scanMs.toFixed(0)} ms (${plural(report.hashed, "file")} hashed), sync ${report.syncMs.toFixed(0)} ms ` +
    `in ${plural(sync.roundTrips, "round trip")}.`
  );
}

export function workspaceCommands(program: Command): void {
  program
    .command("index")
    .description("Index a directory: scan it, and sync its Merkle tree (encrypted names, keyed hashes) to the edge")
    .argument("[dir]", "the workspace root", ".")
    .option("--max-file-bytes <n>", `skip files larger than this (at most ${MAX_FILE_BYTES})`, String(1024 * 1024))
    .option("--include-generated", "index source maps, minified bundles and files of overlong lines too")
    .action(async (dir: string, opts: { maxFileBytes: string; includeGenerated?: boolean }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const maxFileBytes = Number(opts.maxFileBytes);
      if (!Number.isInteger(maxFileBytes) || maxFileBytes <= 0 || maxFileBytes > MAX_FILE_BYTES)
        throw new UsageError(`--max-file-bytes must be a whole number from 1 to ${MAX_FILE_BYTES}.`);
      const { sextant } = await client(options);
      const ws = await openWorkspace(sextant, dir, { create: true });
      const bar = progress(!options.json);
      try {
        const report = await indexWorkspace(sextant, ws, {
          maxFileBytes,
          ...(opts.includeGenerated ? { includeGenerated: true } : {}),
          onProgress: (e) => bar.update(e.phase === "scan" ? "scanning" : "hashing", e.done, e.total),
          onUpload: (e) => bar.update("syncing", e.done, e.total),
          ...(options.json ? {} : { onReembed: (r: Reembed) => process.stdout.write(reembedLine(r) + "\n") }),
        });
        bar.stop();
        if (options.json) return printJson(report);
        process.stdout.write(summary(report) + "\n" + skippedList(report.skippedFiles));
      } finally {
        bar.stop();
      }
    });

  program
    .command("search")
    .description("Search an indexed directory in plain language; prints real paths, line ranges and snippets")
    .argument("<query>", "what you are looking for")
    .argument("[dir]", "the workspace root or a directory inside it", ".")
    .option("-k, --top-k <n>", "how many results", "10")
    .option(
      "--within <dir>",
      "only files below this directory (relative to the workspace root, or absolute); default: [dir] when it is below the root",
    )
    .option("--lang <language>", `only files in this language (${LANGUAGE_CODES.join(", ")})`)
    .action(
      async (query: string, dir: string, opts: { topK: string; within?: string; lang?: string }, cmd: Command) => {
        const options = cmd.optsWithGlobals<GlobalOptions>();
        const topK = Number(opts.topK);
        if (!Number.isInteger(topK) || topK < 1 || topK > 100) throw new UsageError("--top-k must be 1 to 100.");
        const language = opts.lang === undefined ? undefined : Language.safeParse(opts.lang).data;
        if (opts.lang !== undefined && !language)
          throw new UsageError(`--lang must be one of ${LANGUAGE_CODES.join(", ")}.`);
        const { sextant } = await client(options);
        const ws = await openWorkspace(sextant, dir);
        // Searching from a directory below the root searches below it, as `git grep` does.
        const within =
          opts.within !== undefined
            ? scopeWithin(ws.entry.root, opts.within)
            : scopeWithin(ws.entry.root, canonicalRoot(dir));
        const { hits } = await searchWorkspace(sextant, ws, query, {
          topK,
          ...(within ? { within } : {}),
          ...(language ? { language } : {}),
        });
        if (options.json) return printJson(hits);
        if (hits.length === 0)
          return void process.stdout.write(within ? `No results below ${within}/.\n` : "No results.\n");
        for (const hit of hits) {
          const flag = hit.stale ? "  (changed since indexed)" : "";
          process.stdout.write(`${hit.path}:${hit.startLine}-${hit.endLine}  ${hit.score.toFixed(3)}${flag}\n`);
          if (hit.copies.length > 0) process.stdout.write(`    (${copiesLine(hit.copies)})\n`);
          // The snippet starts where the query matched: say that the chunk's first lines were passed over.
          const lines = hit.snippet.split("\n").slice(0, 6);
          if (hit.snippetLine > hit.startLine) process.stdout.write(`    … (from line ${hit.snippetLine})\n`);
          for (const line of lines) process.stdout.write(`    ${line.slice(0, 160)}\n`);
          process.stdout.write("\n");
        }
      },
    );

  program
    .command("status")
    .description("Compare a directory with what the edge has indexed")
    .argument("[dir]", "the workspace root or a directory inside it", ".")
    .option("--include-generated", "count generated files in, as index --include-generated does")
    .action(async (dir: string, opts: { includeGenerated?: boolean }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const { sextant } = await client(options);
      const ws = await openWorkspace(sextant, dir);
      const remote = await sextant.workspaces.get(ws.entry.workspaceId);
      StatPrefetch.prepare();
      const state = await loadState(ws.stateKey);
      const { scan, tree, changed } = await scanLocal(
        ws,
        state,
        opts.includeGenerated ? { includeGenerated: true } : {},
      );
      if (changed) await saveState(ws.stateKey, state);
      let pending: { added: number; changed: number; deleted: number } | null = null;
      if (state.syncedRoot === remote.tree.root) {
        pending = pendingChanges(scan.files, state.synced);
      }
      const inSync = tree.root === remote.tree.root;
      const result = {
        workspaceId: ws.entry.workspaceId,
        root: ws.entry.root,
        baseURL: ws.entry.baseURL,
        inSync,
        local: { files: scan.files.size, root: tree.root, skipped: scan.skipped, skippedFiles: scan.skippedFiles },
        edge: remote.tree,
        pending,
      };
      if (options.json) return printJson(result);
      printFields([
        ["Workspace", `${result.workspaceId} at ${result.root}`],
        [
          "Edge",
          `${plural(remote.tree.files, "file")}, ${remote.tree.bytes.toLocaleString("en-US")} bytes, last sync ${shortDate(remote.tree.lastSyncAt) ?? "never"}`,
        ],
        ["Local", plural(scan.files.size, "file")],
        [
          "State",
          inSync
            ? "in sync"
            : pending
              ? `${pending.added} to add, ${pending.changed} changed, ${pending.deleted} to delete; run \`sextant index\``
              : "differs from the edge; run `sextant index`",
        ],
      ]);
      process.stdout.write(skippedList(scan.skippedFiles));
    });

  program
    .command("watch")
    .description("Keep a directory indexed: sync on every change, reconcile periodically, ride out edge outages")
    .argument("[dir]", "the workspace root", ".")
    .option("--debounce <ms>", "quiet time before a sync", String(DEFAULT_DEBOUNCE_MS))
    .option("--reconcile <seconds>", "full reconcile interval", "600")
    .option("--include-generated", "index source maps, minified bundles and files of overlong lines too")
    .action(
      async (dir: string, opts: { debounce: string; reconcile: string; includeGenerated?: boolean }, cmd: Command) => {
        const options = cmd.optsWithGlobals<GlobalOptions>();
        const { sextant } = await client(options);
        const ws = await openWorkspace(sextant, dir, { create: true });
        const controller = new AbortController();
        for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => controller.abort());
        const log = (event: object, human: string) =>
          process.stdout.write(
            options.json ? JSON.stringify({ time: new Date().toISOString(), ...event }) + "\n" : `${human}\n`,
          );
        await watchWorkspace(sextant, ws, {
          debounceMs: Number(opts.debounce),
          reconcileMs: Number(opts.reconcile) * 1000,
          ...(opts.includeGenerated ? { includeGenerated: true } : {}),
          signal: controller.signal,
          onReady: () => log({ event: "ready", root: ws.entry.root }, `Watching ${ws.entry.root} (Ctrl-C to stop)`),
          onSync: (report, reason) =>
            log(
              { event: "sync", reason, report },
              `[${new Date().toLocaleTimeString()}] ${reason}: ${summary(report)}`,
            ),
          onError: (error, retryInMs) =>
            log(
              { event: "error", message: String(error instanceof Error ? error.message : error), retryInMs },
              `[${new Date().toLocaleTimeString()}] sync failed: ${error instanceof Error ? error.message : String(error)}; retrying in ${Math.round(retryInMs / 1000)} s`,
            ),
        });
      },
    );

  const workspace = program.command("workspace").description("Manage workspaces");
  workspace
    .command("list")
    .description("List your org's workspaces, with the local directories bound to them")
    .action(async (_opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const { sextant } = await client(options);
      const local = (await readRegistry()).filter((e) => e.baseURL === sextant.baseURL);
      const list = (await sextant.workspaces.list()).map((w) => ({
        ...w,
        roots: local.filter((e) => e.workspaceId === w.id).map((e) => e.root),
      }));
      if (options.json) return printJson(list);
      printTable(list, [
        ["id", (w) => w.id],
        ["local directory", (w) => w.roots.join(", ")],
        ["created", (w) => shortDate(w.createdAt)],
      ]);
    });
  workspace
    .command("delete")
    .description("Delete a directory's workspace on the edge (all of its index) and forget it locally")
    .argument("[dir]", "the workspace root", ".")
    .option("--yes", "confirm the deletion")
    .action(async (dir: string, opts: { yes?: boolean }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const { sextant } = await client(options);
      const ws = await openWorkspace(sextant, dir);
      if (!opts.yes)
        throw new UsageError(
          `This deletes workspace ${ws.entry.workspaceId} and its whole index. Pass --yes to confirm.`,
        );
      try {
        await sextant.workspaces.delete(ws.entry.workspaceId);
      } catch (err) {
        if (!(err instanceof NotFoundError)) throw err;
      }
      await removeState(ws.stateKey);
      await removeEntry(ws.entry);
      if (options.json) return printJson({ deleted: ws.entry.workspaceId, root: ws.entry.root });
      process.stdout.write(`Deleted workspace ${ws.entry.workspaceId} and forgot ${ws.entry.root}.\n`);
    });

  const key = program.command("key").description("Share a workspace's secret with a teammate");
  key
    .command("export")
    .description("Print the workspace key (id and secret) for a teammate; treat it like a password")
    .argument("[dir]", "the workspace root", ".")
    .action(async (dir: string, _opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const { sextant } = await client(options);
      const ws = await openWorkspace(sextant, dir);
      if (options.json) return printJson({ workspaceId: ws.entry.workspaceId, key: exportToken(ws.entry) });
      process.stdout.write(exportToken(ws.entry) + "\n");
    });
  key
    .command("import")
    .description("Bind a directory (a teammate's clone) to a shared workspace key; `-` reads it from stdin")
    .argument("<key>", "the exported key, or - for stdin")
    .argument("[dir]", "the workspace root", ".")
    .action(async (token: string, dir: string, _opts, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const { sextant } = await client(options);
      let parsed;
      try {
        parsed = parseToken(token === "-" ? readFileSync(0, "utf8") : token);
      } catch (err) {
        throw new UsageError((err as Error).message);
      }
      await sextant.workspaces.get(parsed.workspaceId);
      const root = canonicalRoot(dir);
      await saveEntry({
        root,
        baseURL: sextant.baseURL,
        workspaceId: parsed.workspaceId,
        secret: parsed.secret.toString(),
      });
      if (options.json) return printJson({ workspaceId: parsed.workspaceId, root });
      process.stdout.write(`Bound ${root} to workspace ${parsed.workspaceId}. Run \`sextant index\` to sync it.\n`);
    });
}
