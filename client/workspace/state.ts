import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import envPaths from "env-paths";
import { FileTable } from "./file-table.js";
import { Lazy } from "./lazy.js";
import type { ScanSkips, SkippedFile } from "./scanner.js";

export type { StatEntry } from "./file-table.js";

/** A directory's listing and the mtime it was taken at; names carry a one-letter kind prefix. */
export interface DirListing {
  mtimeMs: number;
  names: string[];
}

/**
 * The client's memory of one workspace, in the per-user cache directory:
 * - the stat cache (like git's index) and directory listings, so a warm scan reads no unchanged
 *   file and lists no unchanged directory;
 * - the Merkle tree's directory hashes and encrypted names, so only changed paths are rehashed;
 * - the synced snapshot: the files the edge confirmed at the end of the last complete sync, so the
 *   next sync can send exactly what changed since, without asking the edge.
 * It is a cache: a missing, corrupt or foreign file is discarded and rebuilt, never trusted.
 */
export interface WorkspaceState {
  startedAt: number;
  /** Fingerprint of the ignore rules the last scan used. */
  rules: string | undefined;
  /** What the last scan skipped, by reason. */
  skipped: ScanSkips | undefined;
  /** The paths the last scan skipped, so that a scan that finds nothing changed still names them. */
  skippedFiles: SkippedFile[] | undefined;
  entries: FileTable;
  dirs: Map<string, DirListing>;
  dirHashes: Map<string, string>;
  segments: Lazy<Map<string, string>>;
  synced: FileTable;
  syncedRoot: string | null;
}

const MAGIC = "SXS3";
const HEX64 = /^[0-9a-f]{64}$/;

export interface StateKey {
  root: string;
  workspaceId: string;
  /** The secret's fingerprint: a cache written under another secret holds other hashes. */
  fingerprint: string;
}

export const emptyState = (): WorkspaceState => ({
  startedAt: 0,
  rules: undefined,
  skipped: undefined,
  skippedFiles: undefined,
  entries: FileTable.empty(),
  dirs: new Map(),
  dirHashes: new Map(),
  segments: Lazy.of(new Map()),
  synced: FileTable.empty(),
  syncedRoot: null,
});

export function cacheDir(): string {
  return process.env.SEXTANT_CACHE_DIR || envPaths("sextant", { suffix: "" }).cache;
}

export function statePath(key: StateKey): string {
  const id = createHash("sha256").update(`${key.root}\0${key.workspaceId}`).digest("hex").slice(0, 32);
  return join(cacheDir(), "workspaces", `${id}.state`);
}

class Corrupt extends Error {}
function check(ok: unknown): asserts ok {
  if (!ok) throw new Corrupt();
}

interface Header extends StateKey {
  format: 3;
  startedAt: number;
  rules: string | null;
  skipped: ScanSkips | null;
  skippedFiles?: SkippedFile[] | null;
  syncedRoot: string | null;
  syncedIsEntries: boolean;
  sections: Record<string, [offset: number, length: number]>;
}

function table(paths: Buffer, meta: Buffer | null, hashes: Buffer): FileTable {
  const list = paths.length === 0 ? [] : paths.toString("utf8").split("\0");
  check(hashes.length === list.length * 32);
  let stats: Float64Array;
  if (meta) {
    check(meta.length === list.length * 24);
    // Copied: a Float64Array view needs 8-byte alignment the file does not promise.
    stats = new Float64Array(meta.buffer.slice(meta.byteOffset, meta.byteOffset + meta.length));
  } else stats = new Float64Array(list.length * 3);
  return new FileTable(list, stats, Buffer.from(hashes));
}

/**
 * Binary and columnar: a JSON header, then the paths, stats and hashes as raw sections. Loading
 * 100,000 rows costs a few tens of milliseconds, and the encrypted-name cache is decoded only when
 * a changed path needs it.
 */
export async function loadState(key: StateKey): Promise<WorkspaceState> {
  let bytes: Buffer;
  try {
    bytes = await readFile(statePath(key));
  } catch {
    return emptyState();
  }
  try {
    check(bytes.length >= 8 && bytes.toString("latin1", 0, 4) === MAGIC);
    const headerLength = bytes.readUInt32LE(4);
    const header = JSON.parse(bytes.toString("utf8", 8, 8 + headerLength)) as Header;
    check(header.format === 3 && header.root === key.root && header.workspaceId === key.workspaceId);
    check(header.fingerprint === key.fingerprint && typeof header.startedAt === "number");
    check(header.syncedRoot === null || HEX64.test(header.syncedRoot));
    const base = 8 + headerLength;
    const section = (name: string): Buffer => {
      const span = header.sections[name];
      check(Array.isArray(span) && span[0] >= 0 && base + span[0] + span[1] <= bytes.length);
      return bytes.subarray(base + span[0], base + span[0] + span[1]);
    };
    const entries = table(section("paths"), section("meta"), section("hashes"));
    const dirs = new Map<string, DirListing>();
    for (const [path, mtimeMs, names] of JSON.parse(section("dirs").toString("utf8")) as [string, number, string[]][]) {
      check(typeof path === "string" && typeof mtimeMs === "number" && Array.isArray(names));
      dirs.set(path, { mtimeMs, names });
    }
    const dirHashes = new Map<string, string>();
    for (const [path, hash] of JSON.parse(section("dirHashes").toString("utf8")) as [string, string][]) {
      check(typeof path === "string" && HEX64.test(hash));
      dirHashes.set(path, hash);
    }
    // The encrypted-name cache lives beside the state and is read only when a changed path needs it.
    const segments = new Lazy(() => {
      try {
        const text = readFileSync(namesPath(key), "utf8");
        const parsed = JSON.parse(text) as { fingerprint: string; names: [string, string][] };
        if (parsed.fingerprint !== key.fingerprint) return new Map<string, string>();
        return new Map(parsed.names);
      } catch {
        return new Map<string, string>();
      }
    });
    const synced = header.syncedIsEntries ? entries : table(section("syncedPaths"), null, section("syncedHashes"));
    check(header.rules === null || typeof header.rules === "string");
    const skipped = header.skipped && typeof header.skipped === "object" ? header.skipped : undefined;
    const skippedFiles = Array.isArray(header.skippedFiles)
      ? header.skippedFiles.filter((f) => typeof f?.path === "string" && typeof f?.reason === "string")
      : undefined;
    return {
      startedAt: header.startedAt,
      rules: header.rules ?? undefined,
      skipped,
      skippedFiles,
      entries,
      dirs,
      dirHashes,
      segments,
      synced,
      syncedRoot: header.syncedRoot,
    };
  } catch {
    return emptyState();
  }
}

/** Atomic: written to a temporary file and renamed over the old one. */
export async function saveState(key: StateKey, state: WorkspaceState): Promise<void> {
  const path = statePath(key);
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const syncedIsEntries =
    state.synced === state.entries ||
    (state.synced.size === state.entries.size &&
      state.synced.hashes.equals(state.entries.hashes) &&
      state.synced.paths.every((p, i) => p === state.entries.paths[i]));
  const parts: [string, Buffer][] = [
    ["paths", Buffer.from(state.entries.paths.join("\0"), "utf8")],
    ["meta", Buffer.from(state.entries.meta.buffer, state.entries.meta.byteOffset, state.entries.meta.byteLength)],
    ["hashes", state.entries.hashes],
    ["dirs", Buffer.from(JSON.stringify([...state.dirs].map(([p, d]) => [p, d.mtimeMs, d.names])), "utf8")],
    ["dirHashes", Buffer.from(JSON.stringify([...state.dirHashes]), "utf8")],
  ];
  if (state.segments.loaded) {
    const names = { fingerprint: key.fingerprint, names: [...state.segments.get()] };
    const tmpNames = `${namesPath(key)}.${process.pid}.${Date.now()}.tmp`;
    await writeFile(tmpNames, JSON.stringify(names), { mode: 0o600 });
    await rename(tmpNames, namesPath(key));
  }
  if (!syncedIsEntries) {
    parts.push(
      ["syncedPaths", Buffer.from(state.synced.paths.join("\0"), "utf8")],
      ["syncedHashes", state.synced.hashes],
    );
  }
  const sections: Header["sections"] = {};
  let offset = 0;
  for (const [name, data] of parts) {
    sections[name] = [offset, data.length];
    offset += data.length;
  }
  const header: Header = {
    format: 3,
    ...key,
    startedAt: state.startedAt,
    rules: state.rules ?? null,
    skipped: state.skipped ?? null,
    skippedFiles: state.skippedFiles ?? null,
    syncedRoot: state.syncedRoot,
    syncedIsEntries,
    sections,
  };
  const headerBytes = Buffer.from(JSON.stringify(header), "utf8");
  const prefix = Buffer.alloc(8);
  prefix.write(MAGIC, 0, "latin1");
  prefix.writeUInt32LE(headerBytes.length, 4);
  const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
  await writeFile(tmp, Buffer.concat([prefix, headerBytes, ...parts.map(([, data]) => data)]), { mode: 0o600 });
  await rename(tmp, path);
}

export async function removeState(key: StateKey): Promise<void> {
  await rm(statePath(key), { force: true });
  await rm(namesPath(key), { force: true });
}

const namesPath = (key: StateKey) => statePath(key).replace(/\.state$/, ".names");
