import { basename } from "node:path";
import type { Sextant } from "../sdk/client.js";
import { NotFoundError } from "../sdk/errors.js";
import { canonicalRoot, findEntry, saveEntry, type RegistryEntry } from "./registry.js";
import { scanWorkspace, type ScanOptions, type ScanResult, type ScanSkips, type SkippedFile } from "./scanner.js";
import { WorkspaceSecret } from "./secret.js";
import { loadState, saveState, type StateKey, type WorkspaceState } from "./state.js";
import { syncTree, type SyncOptions, type SyncReport } from "./sync.js";
import { StatPrefetch } from "./prefetch.js";
import { scanPaths } from "./targeted-scan.js";
import { LocalTree } from "./tree.js";

export interface OpenWorkspace {
  entry: RegistryEntry;
  secret: WorkspaceSecret;
  stateKey: StateKey;
  created: boolean;
  /** Not on the edge yet: `indexWorkspace` creates it once its first scan succeeds. */
  pending?: boolean;
}

export class WorkspaceNotIndexedError extends Error {
  override name = "WorkspaceNotIndexedError";
}

/**
 * The workspace bound to `dir` (or its nearest registered ancestor) on this client's edge. With
 * `create`, a directory seen for the first time gets a new secret and a pending workspace, which
 * `indexWorkspace` creates on the edge only once the directory has been scanned: a directory that
 * cannot be scanned leaves no workspace behind.
 */
export async function openWorkspace(
  sextant: Sextant,
  dir: string,
  options: { create?: boolean } = {},
): Promise<OpenWorkspace> {
  let entry = await findEntry(dir, sextant.baseURL);
  const pending = !entry;
  if (!entry) {
    if (!options.create) throw new WorkspaceNotIndexedError(`${dir} is not indexed yet: run \`sextant index\` there.`);
    entry = {
      root: canonicalRoot(dir),
      baseURL: sextant.baseURL,
      workspaceId: "",
      secret: WorkspaceSecret.generate().toString(),
    };
  }
  const secret = WorkspaceSecret.parse(entry.secret);
  return {
    entry,
    secret,
    created: false,
    pending,
    stateKey: { root: entry.root, workspaceId: entry.workspaceId, fingerprint: secret.fingerprint },
  };
}

/**
 * Creates a pending workspace on the edge and remembers it; its name there is the encrypted
 * directory name, so not even that leaves the device in the clear.
 */
async function createPending(sextant: Sextant, ws: OpenWorkspace): Promise<void> {
  if (!ws.pending) return;
  const workspace = await sextant.workspaces.create({
    name: ws.secret.encryptSegment(basename(ws.entry.root) || "root"),
  });
  // In place: a caller holding the entry or the state key (`sextant watch`) sees the new id.
  ws.entry.workspaceId = workspace.id;
  ws.stateKey.workspaceId = workspace.id;
  await saveEntry(ws.entry);
  ws.pending = false;
  ws.created = true;
}

export interface IndexReport {
  root: string;
  workspaceId: string;
  created: boolean;
  files: number;
  hashed: number;
  skipped: ScanSkips;
  /** Every path the scan skipped, and why. */
  skippedFiles: SkippedFile[];
  sync: SyncReport;
  scanMs: number;
  syncMs: number;
}

export interface IndexOptions extends Pick<ScanOptions, "maxFileBytes" | "includeGenerated" | "onProgress"> {
  onUpload?: (event: { done: number; total: number }) => void;
  /** Called before every file is sent again to move the index to the edge's embedder. */
  onReembed?: SyncOptions["onReembed"];
  signal?: AbortSignal;
  /** A state kept in memory between runs (by `sextant watch`), instead of loading it from disk. */
  state?: WorkspaceState;
  /** Paths known to have changed: when given, only they are looked at if that is safe. */
  paths?: Iterable<string>;
}

export interface LocalScan {
  scan: ScanResult;
  tree: LocalTree;
  scanMs: number;
  /** Whether the state learned anything worth writing back. */
  changed: boolean;
}

/**
 * Scans warm from the workspace state and rebuilds the Merkle tree incrementally, updating the
 * state in memory; the caller saves it.
 */
export async function scanLocal(
  ws: OpenWorkspace,
  state: WorkspaceState,
  options: Pick<ScanOptions, "maxFileBytes" | "includeGenerated" | "onProgress"> & { paths?: Iterable<string> } = {},
): Promise<LocalScan> {
  const started = performance.now();
  ws.secret.seed(state.segments);
  const targeted = options.paths
    ? scanPaths(ws.entry.root, ws.secret, state, options.paths, {
        ...(options.maxFileBytes ? { maxFileBytes: options.maxFileBytes } : {}),
        ...(options.includeGenerated ? { includeGenerated: true } : {}),
      })
    : undefined;
  const scan =
    targeted ??
    (await scanWorkspace(ws.entry.root, ws.secret, {
      previous: state.entries,
      previousDirs: state.dirs,
      previousStartedAt: state.startedAt,
      ...(state.rules ? { previousRules: state.rules } : {}),
      ...(state.skipped ? { previousSkipped: state.skipped } : {}),
      ...(state.skippedFiles ? { previousSkippedFiles: state.skippedFiles } : {}),
      ...(options.maxFileBytes ? { maxFileBytes: options.maxFileBytes } : {}),
      ...(options.includeGenerated ? { includeGenerated: true } : {}),
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    }));
  const tree = new LocalTree(scan.files, ws.secret, { files: state.entries, dirHashes: state.dirHashes });
  const changed =
    scan.hashed > 0 ||
    scan.relisted > 0 ||
    scan.rules !== state.rules ||
    state.skipped === undefined ||
    state.skippedFiles === undefined ||
    !state.entries.sameFiles(scan.files);
  state.entries = scan.files;
  state.dirs = scan.dirs;
  state.dirHashes = tree.dirHashes;
  state.startedAt = scan.startedAt;
  state.rules = scan.rules;
  state.skipped = scan.skipped;
  state.skippedFiles = scan.skippedFiles;
  state.segments = ws.secret.segments();
  return { scan, tree, scanMs: performance.now() - started, changed };
}

/** Scan (warm from the stat cache), build the Merkle tree, sync it, and remember what the edge holds. */
export async function indexWorkspace(
  sextant: Sextant,
  ws: OpenWorkspace,
  options: IndexOptions = {},
): Promise<IndexReport> {
  StatPrefetch.prepare();
  const resident = options.state !== undefined;
  const state: WorkspaceState = options.state ?? (await loadState(ws.stateKey));
  const { scan, tree, scanMs, changed } = await scanLocal(ws, state, options);
  await createPending(sextant, ws);
  // A one-shot run keeps its scan even if the sync then fails; a resident state is saved after.
  if (changed && !resident) await saveState(ws.stateKey, state);

  const syncStarted = performance.now();
  let sync: SyncReport;
  try {
    sync = await syncTree({
      sextant,
      workspaceId: ws.entry.workspaceId,
      root: ws.entry.root,
      secret: ws.secret,
      tree,
      state,
      ...(options.onUpload ? { onProgress: (e) => options.onUpload!(e) } : {}),
      ...(options.onReembed ? { onReembed: options.onReembed } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
  } catch (err) {
    if (err instanceof NotFoundError) {
      throw new WorkspaceNotIndexedError(
        `The workspace ${ws.entry.workspaceId} no longer exists on ${ws.entry.baseURL}; run \`sextant workspace delete\` to forget it, then \`sextant index\`.`,
      );
    }
    throw err;
  }
  if (changed || sync.strategy !== "unchanged") await saveState(ws.stateKey, state);
  return {
    root: ws.entry.root,
    workspaceId: ws.entry.workspaceId,
    created: ws.created,
    files: scan.files.size,
    hashed: scan.hashed,
    // Files the sync could not upload are skipped too, as too large.
    skipped: { ...scan.skipped, tooLarge: scan.skipped.tooLarge + sync.skippedFiles.length },
    skippedFiles: [...scan.skippedFiles, ...sync.skippedFiles],
    sync,
    scanMs,
    syncMs: performance.now() - syncStarted,
  };
}
