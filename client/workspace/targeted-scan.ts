import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { FileTableBuilder } from "./file-table.js";
import { IgnoreStack } from "./ignore-rules.js";
import { parentOf } from "../../protocol/merkle.js";
import { fileSizeLimit, hashFile, kindOf, type ScanResult } from "./scanner.js";
import type { WorkspaceSecret } from "./secret.js";
import type { WorkspaceState } from "./state.js";

const RULE_FILES = new Set([".gitignore", ".sextantignore"]);

/**
 * Updates the previous scan for a handful of paths the file-system watcher reported, instead of
 * walking the whole tree: on a large workspace this is what keeps an edit's way to the edge short.
 * Returns undefined whenever only a full scan can be trusted: no previous scan, a directory event,
 * a changed ignore file, or a path in a directory the previous scan never listed.
 */
export function scanPaths(
  root: string,
  secret: WorkspaceSecret,
  state: WorkspaceState,
  paths: Iterable<string>,
  options: { maxFileBytes?: number } = {},
): ScanResult | undefined {
  if (state.entries.size === 0 || !state.rules) return undefined;
  const maxFileBytes = fileSizeLimit(options.maxFileBytes);
  const updates = new Map<string, { size: number; mtimeMs: number; ino: number; hash: Buffer } | null>();
  const relist = new Set<string>();
  let hashed = 0;

  const rulesFor = (dir: string): IgnoreStack | undefined => {
    // The rules in force in `dir`, rebuilt along its ancestors from the cached listings.
    let stack = IgnoreStack.forRoot(root);
    const segments = dir === "" ? [] : dir.split("/");
    for (let i = 0; i <= segments.length; i++) {
      const here = segments.slice(0, i).join("/");
      const listing = state.dirs.get(here);
      if (!listing) return undefined;
      if (here !== "" && stack.ignores(here, true)) return undefined;
      stack = stack.enter(here, join(root, here), {
        gitignore: listing.names.includes("f.gitignore"),
        sextantignore: listing.names.includes("f.sextantignore"),
      });
    }
    return stack;
  };

  for (const path of new Set(paths)) {
    const name = path.slice(path.lastIndexOf("/") + 1);
    if (path === "" || path.split("/").includes(".git")) continue;
    if (RULE_FILES.has(name)) return undefined;
    const absolute = join(root, path);
    let stats;
    try {
      stats = lstatSync(absolute);
    } catch {
      updates.set(path, null);
      relist.add(parentOf(path));
      continue;
    }
    if (stats.isDirectory()) return undefined;
    relist.add(parentOf(path));
    const rules = rulesFor(parentOf(path));
    if (!rules) return undefined;
    if (!stats.isFile() || stats.size > maxFileBytes || rules.ignores(path, false)) {
      updates.set(path, null);
      continue;
    }
    const known = state.entries.get(path);
    if (known && known.size === stats.size && known.mtimeMs === stats.mtimeMs && known.ino === stats.ino) continue;
    const outcome = hashFile(absolute, stats, secret);
    hashed++;
    updates.set(path, typeof outcome === "string" ? null : outcome);
  }

  const files = new FileTableBuilder(state.entries.size + updates.size);
  state.entries.paths.forEach((path, row) => {
    if (!updates.has(path)) files.copy(state.entries, row);
  });
  for (const [path, entry] of updates) if (entry) files.push(path, entry.size, entry.mtimeMs, entry.ino, entry.hash);

  const dirs = new Map(state.dirs);
  for (const dir of relist) {
    if (!dirs.has(dir)) return undefined;
    try {
      const mtimeMs = lstatSync(join(root, dir)).mtimeMs;
      const names = readdirSync(join(root, dir), { withFileTypes: true }).map((e) => kindOf(e) + e.name);
      dirs.set(dir, { mtimeMs, names });
    } catch {
      return undefined;
    }
  }
  return {
    // The previous full scan's start still bounds the racily-clean window of every row it vouched for.
    startedAt: state.startedAt,
    files: files.build(),
    dirs,
    skipped: { binary: 0, tooLarge: 0, symlink: 0, unreadable: 0, vanished: 0 },
    hashed,
    rules: state.rules,
    relisted: relist.size,
  };
}
