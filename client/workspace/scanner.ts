import { closeSync, fstatSync, lstatSync, openSync, readdirSync, readSync, type Dirent } from "node:fs";
import { resolve } from "node:path";
import { createHash } from "node:crypto";
import { IgnoreStack, type RuleLog } from "./ignore-rules.js";
import { StatPrefetch, type StatLike } from "./prefetch.js";
import { encryptedSegmentLength, type WorkspaceSecret } from "./secret.js";
import { FileTable, FileTableBuilder } from "./file-table.js";
import type { DirListing } from "./state.js";
import { MAX_DEPTH, MAX_FILE_BYTES, MAX_PATH_LENGTH } from "../../protocol/sync.js";

export const DEFAULT_MAX_FILE_BYTES = 1024 * 1024;

/** The size past which a file is skipped: as asked, but never past what a commit can describe. */
export const fileSizeLimit = (maxFileBytes: number | undefined): number =>
  Math.min(maxFileBytes ?? DEFAULT_MAX_FILE_BYTES, MAX_FILE_BYTES);
/** git's binary heuristic: a NUL byte in the first 8,000 bytes. */
const BINARY_PROBE_BYTES = 8000;

export interface ScanOptions {
  maxFileBytes?: number;
  /** Previous scan's files by path; unchanged files are not read again. */
  previous?: FileTable;
  /** Previous scan's directory listings; a directory whose mtime has not moved is not listed again. */
  previousDirs?: ReadonlyMap<string, DirListing>;
  /** When the previous scan started: anything modified at or after it is "racily clean" and re-read. */
  previousStartedAt?: number;
  /** What the previous scan skipped, reported again when nothing changed. */
  previousSkipped?: ScanSkips;
  previousSkippedFiles?: readonly SkippedFile[];
  /**
   * Fingerprint of the ignore rules the previous scan used. While the rules are the same, what it
   * included is included again without re-matching; if they turn out to differ, the scan reruns.
   */
  previousRules?: string;
  useDefaults?: boolean;
  globalExcludes?: string | null;
  onProgress?: (event: { phase: "scan" | "hash"; done: number; total?: number }) => void;
}

export interface ScanSkips {
  binary: number;
  tooLarge: number;
  /** Deeper or longer, once encrypted, than a sync path may be (MAX_DEPTH, MAX_PATH_LENGTH). */
  pathTooLong: number;
  symlink: number;
  /** A FIFO, socket or device: nothing to index. */
  special: number;
  /** A name that is not UTF-8 (Linux allows any bytes): it cannot be read back by the name the scan sees. */
  badName: number;
  unreadable: number;
  vanished: number;
}

export type SkipReason = keyof ScanSkips;

/** One skipped path (a directory's whole subtree when the directory itself is skipped) and why. */
export interface SkippedFile {
  path: string;
  reason: SkipReason;
}

export const noSkips = (): ScanSkips => ({
  binary: 0,
  tooLarge: 0,
  pathTooLong: 0,
  symlink: 0,
  special: 0,
  badName: 0,
  unreadable: 0,
  vanished: 0,
});

export interface ScanResult {
  startedAt: number;
  files: FileTable;
  dirs: Map<string, DirListing>;
  skipped: ScanSkips;
  /** Every skipped path, in the order the walk met them. */
  skippedFiles: SkippedFile[];
  /** Files whose content was read and hashed in this scan. */
  hashed: number;
  /** Fingerprint of every ignore rule in force. */
  rules: string;
  /** Directories listed again because they changed (or were new) since the previous scan. */
  relisted: number;
}

type Outcome = { size: number; mtimeMs: number; ino: number; hash: Buffer } | keyof ScanSkips;

/** A listing entry's kind, as the first character of its cached form. */
const KIND = { file: "f", dir: "d", link: "l", other: "o" } as const;

/** The one-letter kind prefix a cached listing stores with each name. */
export function kindOf(entry: Dirent): string {
  if (entry.isFile()) return KIND.file;
  if (entry.isDirectory()) return KIND.dir;
  if (entry.isSymbolicLink()) return KIND.link;
  return KIND.other;
}

/**
 * Walks a workspace with git's ignore semantics plus `.sextantignore`, hashing file contents with
 * the workspace's keyed hash. Like git's index, it trusts what stat says: a file whose size, mtime
 * and inode match the previous scan is not read, and a directory whose mtime has not moved is not
 * listed again. Symlinks are never followed (so nothing outside the workspace is read); unreadable
 * files and files that vanish or change mid-scan are counted, never fatal.
 */
export async function scanWorkspace(
  root: string,
  secret: WorkspaceSecret,
  options: ScanOptions = {},
): Promise<ScanResult> {
  const startedAt = Date.now();
  const maxFileBytes = fileSizeLimit(options.maxFileBytes);
  const previous = options.previous;
  const previousDirs = options.previousDirs;
  const racyAfter = options.previousStartedAt ?? 0;
  const trust = previous !== undefined && previousDirs !== undefined && options.previousRules !== undefined;
  const files = new FileTableBuilder(previous?.size ?? 1024);
  const dirs = new Map<string, DirListing>();
  const skipped = noSkips();
  const skippedFiles: SkippedFile[] = [];
  const skip = (path: string, reason: SkipReason) => {
    skipped[reason]++;
    skippedFiles.push({ path, reason });
  };
  const toHash: { path: string; absolute: string; stats: StatLike }[] = [];
  const ruleHash = createHash("sha256");
  const log: RuleLog = (source, text) => ruleHash.update(`${source}\0${text}\0`);
  let found = 0;
  let relisted = 0;

  // Warm: stat every path the previous scan saw, in parallel, before walking; the walk then reads
  // those results and stats only what is new. Stats taken a moment earlier are still a snapshot
  // taken after `startedAt`, which is all the racily-clean rule needs.
  let prefetch: StatPrefetch | undefined;
  const dirSlot = new Map<string, number>();
  if (previous && previousDirs) {
    const paths = [...previous.paths];
    for (const dir of previousDirs.keys()) {
      dirSlot.set(dir, paths.length);
      paths.push(dir || ".");
    }
    prefetch = await StatPrefetch.run(root, paths);
    if (prefetch && trust && options.previousSkipped && options.previousSkippedFiles) {
      const quick = verifyUnchanged(root, options, previous, previousDirs, prefetch, dirSlot, startedAt);
      if (quick) {
        return {
          ...quick,
          skipped: { ...noSkips(), ...options.previousSkipped },
          skippedFiles: [...options.previousSkippedFiles],
        };
      }
    }
  }
  // The walk meets files in the previous scan's order, so the next row is almost always the right one.
  let cursor = 0;
  const previousRow = (path: string): number | undefined => {
    if (!previous) return undefined;
    if (previous.paths[cursor] === path) return cursor++;
    const row = previous.row(path);
    if (row !== undefined) cursor = row + 1;
    return row;
  };
  const miss = (path: string, err: unknown) => {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") skip(path, "unreadable");
    // Listed, then not found: gone, or a name that is not UTF-8 and so came back with U+FFFD in it.
    else skip(path, path.includes("\uFFFD") ? "badName" : "vanished");
  };

  const list = (relative: string, absolute: string): string[] | undefined => {
    let mtimeMs: number;
    try {
      const slot = dirSlot.get(relative);
      mtimeMs = ((slot !== undefined && prefetch?.at(slot)) || lstatSync(absolute)).mtimeMs;
    } catch (err) {
      if (relative === "") throw err;
      miss(relative, err);
      return undefined;
    }
    const cached = previousDirs?.get(relative);
    if (cached && cached.mtimeMs === mtimeMs && mtimeMs < racyAfter) {
      dirs.set(relative, cached);
      return cached.names;
    }
    try {
      const names = readdirSync(absolute, { withFileTypes: true }).map((e) => kindOf(e) + e.name);
      relisted++;
      dirs.set(relative, { mtimeMs, names });
      return names;
    } catch (err) {
      if (relative === "") throw err;
      miss(relative, err);
      return undefined;
    }
  };

  // `encrypted` is the length `relative` will have once encrypted, `depth` its number of segments:
  // a path the sync protocol cannot carry is skipped here, before anything is read or uploaded.
  const walk = (relative: string, absolute: string, parentRules: IgnoreStack, encrypted: number, depth: number) => {
    const names = list(relative, absolute);
    if (!names) return;
    const rules = parentRules.enter(relative, absolute, {
      gitignore: names.includes(`${KIND.file}.gitignore`),
      sextantignore: names.includes(`${KIND.file}.sextantignore`),
    });
    for (const entry of names) {
      const kind = entry[0];
      const name = entry.slice(1);
      const path = relative === "" ? name : `${relative}/${name}`;
      const length = encrypted + (relative === "" ? 0 : 1) + encryptedSegmentLength(name);
      if (kind === KIND.dir) {
        if (name === ".git") continue;
        if (!(trust && previousDirs!.has(path)) && rules.ignores(path, true)) continue;
        // A directory that no file below it could fit in: skipped whole, and named once.
        if (depth + 1 >= MAX_DEPTH || length + 1 + encryptedSegmentLength("x") > MAX_PATH_LENGTH)
          skip(path, "pathTooLong");
        else walk(path, `${absolute}/${name}`, rules, length, depth + 1);
      } else if (kind === KIND.link) {
        if (!rules.ignores(path, false)) skip(path, "symlink");
      } else if (kind === KIND.other) {
        if (!rules.ignores(path, false)) skip(path, "special");
      } else if (kind === KIND.file) {
        const row = previousRow(path);
        if (!(trust && row !== undefined) && rules.ignores(path, false)) continue;
        const meta = previous?.meta;
        if (
          row !== undefined &&
          prefetch &&
          meta![row * 3 + 1]! < racyAfter &&
          prefetch.unchanged(row, meta![row * 3]!, meta![row * 3 + 1]!, meta![row * 3 + 2]!)
        ) {
          // The common warm case: same file, same stat, outside the racy window.
          if (meta![row * 3]! <= maxFileBytes) {
            found++;
            files.copy(previous!, row);
          } else skip(path, "tooLarge");
          continue;
        }
        if (length > MAX_PATH_LENGTH) {
          skip(path, "pathTooLong");
          continue;
        }
        const fileAbsolute = `${absolute}/${name}`;
        let stats: StatLike;
        try {
          const prefetched = row !== undefined ? prefetch?.at(row) : undefined;
          stats = prefetched || lstatSync(fileAbsolute);
        } catch (err) {
          miss(path, err);
          continue;
        }
        if (!stats.isFile()) continue;
        if (stats.size > maxFileBytes) {
          skip(path, "tooLarge");
          continue;
        }
        found++;
        if (
          row !== undefined &&
          meta![row * 3] === stats.size &&
          meta![row * 3 + 1] === stats.mtimeMs &&
          meta![row * 3 + 2] === stats.ino &&
          stats.mtimeMs < racyAfter
        ) {
          files.copy(previous!, row);
        } else {
          toHash.push({ path, absolute: fileAbsolute, stats });
        }
      }
    }
    options.onProgress?.({ phase: "scan", done: found });
  };
  walk("", resolve(root), IgnoreStack.forRoot(root, { ...options, log }), 0, 0);
  const rules = ruleHash.digest("hex");
  if (trust && rules !== options.previousRules) {
    // The ignore rules changed: what was included before proves nothing now.
    return scanWorkspace(root, secret, { ...options, previousRules: undefined });
  }

  let hashed = 0;
  for (const file of toHash) {
    const outcome = hashFile(file.absolute, file.stats, secret);
    if (typeof outcome === "string") skip(file.path, outcome);
    else files.push(file.path, outcome.size, outcome.mtimeMs, outcome.ino, outcome.hash);
    hashed++;
    options.onProgress?.({ phase: "hash", done: hashed, total: toHash.length });
  }
  return { startedAt, files: files.build(), dirs, skipped, skippedFiles, hashed, rules, relisted };
}

/**
 * The warm scan's common case, decided without walking: every file the previous scan kept has
 * the same stat outside the racy window, every directory it listed has the same mtime (so the same
 * entries), and the ignore rules hash the same. Then the previous result is this scan's result.
 * Anything else returns undefined and the walk decides.
 */
function verifyUnchanged(
  root: string,
  options: ScanOptions,
  previous: FileTable,
  previousDirs: ReadonlyMap<string, DirListing>,
  prefetch: StatPrefetch,
  dirSlot: ReadonlyMap<string, number>,
  startedAt: number,
): Omit<ScanResult, "skipped" | "skippedFiles"> | undefined {
  const racyAfter = options.previousStartedAt ?? 0;
  const maxFileBytes = fileSizeLimit(options.maxFileBytes);
  const meta = previous.meta;
  for (let row = 0; row < previous.size; row++) {
    const size = meta[row * 3]!;
    const mtimeMs = meta[row * 3 + 1]!;
    if (mtimeMs >= racyAfter || size > maxFileBytes) return undefined;
    if (!prefetch.unchanged(row, size, mtimeMs, meta[row * 3 + 2]!)) return undefined;
  }
  for (const [dir, listing] of previousDirs) {
    const stat = prefetch.at(dirSlot.get(dir)!);
    if (!stat || !stat.isDirectory() || stat.mtimeMs !== listing.mtimeMs || listing.mtimeMs >= racyAfter) {
      return undefined;
    }
  }
  // The rule files, read in the walk's order (the listings' order is the order they were walked in).
  const ruleHash = createHash("sha256");
  const log: RuleLog = (source, text) => ruleHash.update(`${source}\0${text}\0`);
  const base = resolve(root);
  const stack = IgnoreStack.forRoot(root, { ...options, log });
  for (const [dir, listing] of previousDirs) {
    stack.enter(dir, dir === "" ? base : `${base}/${dir}`, {
      gitignore: listing.names.includes(`${KIND.file}.gitignore`),
      sextantignore: listing.names.includes(`${KIND.file}.sextantignore`),
    });
  }
  const rules = ruleHash.digest("hex");
  if (rules !== options.previousRules) return undefined;
  return { startedAt, files: previous, dirs: new Map(previousDirs), hashed: 0, rules, relisted: 0 };
}

const chunk = Buffer.allocUnsafe(64 * 1024);

/** Reads through one descriptor; a file that changed while being read is hashed but not cached as clean. */
export function hashFile(absolute: string, before: StatLike, secret: WorkspaceSecret): Outcome {
  let fd: number;
  try {
    fd = openSync(absolute, "r");
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOENT" ? "vanished" : "unreadable";
  }
  try {
    const hasher = secret.contentHasher();
    let size = 0;
    for (;;) {
      const n = readSync(fd, chunk, 0, chunk.length, size);
      if (n === 0) break;
      if (size < BINARY_PROBE_BYTES && chunk.subarray(0, Math.min(n, BINARY_PROBE_BYTES - size)).includes(0)) {
        return "binary";
      }
      hasher.update(chunk.subarray(0, n));
      size += n;
    }
    const after = fstatSync(fd);
    const stable = after.mtimeMs === before.mtimeMs && after.size === size;
    return {
      size,
      // An unstable file gets an impossible mtime, so the next scan reads it again.
      mtimeMs: stable ? after.mtimeMs : -1,
      ino: after.ino,
      hash: hasher.digest(),
    };
  } catch {
    return "unreadable";
  } finally {
    closeSync(fd);
  }
}
