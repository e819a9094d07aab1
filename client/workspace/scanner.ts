import { closeSync, fstatSync, lstatSync, openSync, readdirSync, readSync, type Stats } from "node:fs";
import { join } from "node:path";
import { IgnoreStack } from "./ignore-rules.js";
import type { WorkspaceSecret } from "./secret.js";
import type { StatEntry } from "./state.js";

export const DEFAULT_MAX_FILE_BYTES = 1024 * 1024;
/** git's binary heuristic: a NUL byte in the first 8,000 bytes. */
const BINARY_PROBE_BYTES = 8000;

export interface ScanOptions {
  maxFileBytes?: number;
  /** Previous scan's entries by path; unchanged files are not read again. */
  previous?: ReadonlyMap<string, StatEntry>;
  /** When the previous scan started: entries modified at or after it are "racily clean" and re-read. */
  previousStartedAt?: number;
  useDefaults?: boolean;
  globalExcludes?: string | null;
  onProgress?: (event: { phase: "scan" | "hash"; done: number; total?: number }) => void;
}

export interface ScanSkips {
  binary: number;
  tooLarge: number;
  symlink: number;
  unreadable: number;
  vanished: number;
}

export interface ScanResult {
  startedAt: number;
  files: Map<string, StatEntry>;
  skipped: ScanSkips;
  /** Files whose content was read and hashed in this scan. */
  hashed: number;
}

type Outcome = StatEntry | keyof ScanSkips;

/**
 * Walks a workspace with git's ignore semantics plus `.sextantignore`, hashing file contents with
 * the workspace's keyed hash. Symlinks are never followed (so nothing outside the workspace is
 * read); unreadable files and files that vanish or change mid-scan are counted, never fatal.
 */
export function scanWorkspace(root: string, secret: WorkspaceSecret, options: ScanOptions = {}): ScanResult {
  const startedAt = Date.now();
  const maxFileBytes = options.maxFileBytes ?? DEFAULT_MAX_FILE_BYTES;
  const previous = options.previous;
  const racyAfter = options.previousStartedAt ?? 0;
  const files = new Map<string, StatEntry>();
  const skipped: ScanSkips = { binary: 0, tooLarge: 0, symlink: 0, unreadable: 0, vanished: 0 };
  const toHash: { path: string; absolute: string; stats: Stats }[] = [];

  const walk = (relative: string, absolute: string, parentRules: IgnoreStack) => {
    let entries;
    try {
      entries = readdirSync(absolute, { withFileTypes: true });
    } catch (err) {
      if (relative === "") throw err;
      skipped[(err as NodeJS.ErrnoException).code === "ENOENT" ? "vanished" : "unreadable"]++;
      return;
    }
    const rules = parentRules.enter(relative, absolute);
    for (const entry of entries) {
      const name = entry.name;
      const path = relative === "" ? name : `${relative}/${name}`;
      if (entry.isDirectory()) {
        if (name === ".git" || rules.ignores(path, true)) continue;
        walk(path, join(absolute, name), rules);
      } else if (entry.isSymbolicLink()) {
        if (!rules.ignores(path, false)) skipped.symlink++;
      } else if (entry.isFile()) {
        if (rules.ignores(path, false)) continue;
        const fileAbsolute = join(absolute, name);
        let stats: Stats;
        try {
          stats = lstatSync(fileAbsolute);
        } catch (err) {
          skipped[(err as NodeJS.ErrnoException).code === "ENOENT" ? "vanished" : "unreadable"]++;
          continue;
        }
        if (stats.size > maxFileBytes) {
          skipped.tooLarge++;
          continue;
        }
        const known = previous?.get(path);
        if (
          known &&
          known.size === stats.size &&
          known.mtimeMs === stats.mtimeMs &&
          known.ino === stats.ino &&
          stats.mtimeMs < racyAfter
        ) {
          files.set(path, known);
        } else {
          toHash.push({ path, absolute: fileAbsolute, stats });
        }
      }
      options.onProgress?.({ phase: "scan", done: files.size + toHash.length });
    }
  };
  walk("", root, IgnoreStack.forRoot(root, options));

  let hashed = 0;
  for (const file of toHash) {
    const outcome = hashFile(file.absolute, file.stats, secret);
    if (typeof outcome === "string") skipped[outcome]++;
    else files.set(file.path, outcome);
    hashed++;
    options.onProgress?.({ phase: "hash", done: hashed, total: toHash.length });
  }
  return { startedAt, files, skipped, hashed };
}

const chunk = Buffer.allocUnsafe(64 * 1024);

/** Reads through one descriptor; a file that changed while being read is hashed but not cached as clean. */
export function hashFile(absolute: string, before: Stats, secret: WorkspaceSecret): Outcome {
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
      hash: hasher.digest("hex"),
    };
  } catch {
    return "unreadable";
  } finally {
    closeSync(fd);
  }
}
