import { createHash } from "node:crypto";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import envPaths from "env-paths";
import { z } from "zod";

/** What a scan learned about one file: its stat identity and its keyed content hash. */
export interface StatEntry {
  size: number;
  mtimeMs: number;
  ino: number;
  hash: string;
}

/**
 * The client's memory of one workspace, in the per-user cache directory:
 * - the stat cache (like git's index), so a warm scan reads no unchanged file;
 * - the synced snapshot: the tree the edge confirmed at the end of the last complete sync, so
 *   the next sync can send exactly what changed since, without asking the edge.
 * It is a cache: a missing, corrupt or foreign file is discarded and rebuilt, never trusted.
 */
export interface WorkspaceState {
  startedAt: number;
  entries: Map<string, StatEntry>;
  synced: Map<string, string>;
  syncedRoot: string | null;
}

const FORMAT = 1;
const hex64 = z.string().regex(/^[0-9a-f]{64}$/);
const StateFile = z.object({
  format: z.literal(FORMAT),
  root: z.string(),
  workspaceId: z.string(),
  fingerprint: z.string(),
  startedAt: z.number(),
  syncedRoot: hex64.nullable(),
  entries: z.array(z.tuple([z.string(), z.number(), z.number(), z.number(), hex64])),
  synced: z.array(z.tuple([z.string(), hex64])),
});

export interface StateKey {
  root: string;
  workspaceId: string;
  /** The secret's fingerprint: a cache written under another secret holds other hashes. */
  fingerprint: string;
}

export const emptyState = (): WorkspaceState => ({
  startedAt: 0,
  entries: new Map(),
  synced: new Map(),
  syncedRoot: null,
});

export function cacheDir(): string {
  return process.env.SEXTANT_CACHE_DIR || envPaths("sextant", { suffix: "" }).cache;
}

export function statePath(key: StateKey): string {
  const id = createHash("sha256").update(`${key.root}\0${key.workspaceId}`).digest("hex").slice(0, 32);
  return join(cacheDir(), "workspaces", `${id}.json`);
}

export async function loadState(key: StateKey): Promise<WorkspaceState> {
  let text: string;
  try {
    text = await readFile(statePath(key), "utf8");
  } catch {
    return emptyState();
  }
  try {
    const file = StateFile.parse(JSON.parse(text));
    if (file.root !== key.root || file.workspaceId !== key.workspaceId || file.fingerprint !== key.fingerprint) {
      return emptyState();
    }
    return {
      startedAt: file.startedAt,
      entries: new Map(file.entries.map(([path, size, mtimeMs, ino, hash]) => [path, { size, mtimeMs, ino, hash }])),
      synced: new Map(file.synced),
      syncedRoot: file.syncedRoot,
    };
  } catch {
    return emptyState();
  }
}

/** Atomic: written to a temporary file and renamed over the old one. */
export async function saveState(key: StateKey, state: WorkspaceState): Promise<void> {
  const path = statePath(key);
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const file: z.input<typeof StateFile> = {
    format: FORMAT,
    ...key,
    startedAt: state.startedAt,
    syncedRoot: state.syncedRoot,
    entries: [...state.entries].map(([path, e]) => [path, e.size, e.mtimeMs, e.ino, e.hash]),
    synced: [...state.synced],
  };
  const tmp = `${path}.${process.pid}.${Date.now()}.tmp`;
  await writeFile(tmp, JSON.stringify(file), { mode: 0o600 });
  await rename(tmp, path);
}

export async function removeState(key: StateKey): Promise<void> {
  await rm(statePath(key), { force: true });
}
