import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { FileTableBuilder } from "./file-table.js";
import { IgnoreStack } from "./ignore-rules.js";
import { parentOf } from "../../protocol/merkle.js";
import {
  fileSizeLimit,
  generatedByName,
  hashFile,
  kindOf,
  noSkips,
  type ScanResult,
  type SkippedFile,
} from "./scanner.js";
import { encryptedSegmentLength, type WorkspaceSecret } from "./secret.js";
import { MAX_DEPTH, MAX_PATH_LENGTH } from "../../protocol/sync.js";
import type { WorkspaceState } from "./state.js";

const RULE_FILES = new Set([".gitignore", ".sextantignore"]);

function fitsProtocol(path: string): boolean {
  const segments = path.split("/");
  const length = segments.reduce((n, s) => n + encryptedSegmentLength(s) + 1, -1);
  return segments.length <= MAX_DEPTH && length <= MAX_PATH_LENGTH;
}

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
  options: { maxFileBytes?: number; includeGenerated?: boolean } = {},
): ScanResult | undefined {
  if (state.entries.size === 0 || !state.rules) return undefined;
  const maxFileBytes = fileSizeLimit(options.maxFileBytes);
  const updates = new Map<string, { size: number; mtimeMs: number; ino: number; hash: Buffer } | null>();
  const relist = new Set<string>();
  let hashed = 0;
  const examined = new Set<string>();
  const skips: SkippedFile[] = [];

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
    // A path the sync cannot carry is skipped, and named, by the full scan.
    if (!fitsProtocol(path)) return undefined;
    const absolute = join(root, path);
    examined.add(path);
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
      if (rules.ignores(path, false)) continue;
      if (stats.isSymbolicLink()) skips.push({ path, reason: "symlink" });
      else if (stats.isFile()) skips.push({ path, reason: "tooLarge" });
      continue;
    }
    if (!options.includeGenerated && generatedByName(name)) {
      updates.set(path, null);
      skips.push({ path, reason: "generated" });
      continue;
    }
    const known = state.entries.get(path);
    if (known && known.size === stats.size && known.mtimeMs === stats.mtimeMs && known.ino === stats.ino) continue;
    const outcome = hashFile(absolute, stats, secret, options.includeGenerated);
    hashed++;
    updates.set(path, typeof outcome === "string" ? null : outcome);
    if (typeof outcome === "string") skips.push({ path, reason: outcome });
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
    ...skippedAfter(state.skippedFiles ?? [], examined, skips),
    hashed,
    rules: state.rules,
    relisted: relist.size,
  };
}

/** The previous scan's skips, with the paths looked at again replaced by what they are now. */
function skippedAfter(previous: readonly SkippedFile[], examined: ReadonlySet<string>, now: SkippedFile[]) {
  const skippedFiles = [...previous.filter((f) => !examined.has(f.path)), ...now];
  const skipped = noSkips();
  for (const f of skippedFiles) skipped[f.reason]++;
  return { skipped, skippedFiles };
}
