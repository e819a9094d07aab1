import { basename } from "node:path";
import type { Sextant } from "../sdk/client.js";
import { NotFoundError } from "../sdk/errors.js";
import { canonicalRoot, findEntry, saveEntry, type RegistryEntry } from "./registry.js";
import { scanWorkspace, type ScanOptions, type ScanSkips } from "./scanner.js";
import { WorkspaceSecret } from "./secret.js";
import { loadState, saveState, type StateKey, type WorkspaceState } from "./state.js";
import { syncTree, type SyncReport } from "./sync.js";
import { LocalTree } from "./tree.js";

export interface OpenWorkspace {
  entry: RegistryEntry;
  secret: WorkspaceSecret;
  stateKey: StateKey;
  created: boolean;
}

export class WorkspaceNotIndexedError extends Error {
  override name = "WorkspaceNotIndexedError";
}

/**
 * The workspace bound to `dir` (or its nearest registered ancestor) on this client's edge. With
 * `create`, a new secret and workspace are made on first use; the workspace's name on the edge is
 * the encrypted directory name, so not even that leaves the device in the clear.
 */
export async function openWorkspace(
  sextant: Sextant,
  dir: string,
  options: { create?: boolean } = {},
): Promise<OpenWorkspace> {
  let entry = await findEntry(dir, sextant.baseURL);
  let created = false;
  if (!entry) {
    if (!options.create) throw new WorkspaceNotIndexedError(`${dir} is not indexed yet: run \`sextant index\` there.`);
    const root = canonicalRoot(dir);
    const secret = WorkspaceSecret.generate();
    const workspace = await sextant.workspaces.create({ name: secret.encryptSegment(basename(root) || "root") });
    entry = { root, baseURL: sextant.baseURL, workspaceId: workspace.id, secret: secret.toString() };
    await saveEntry(entry);
    created = true;
  }
  const secret = WorkspaceSecret.parse(entry.secret);
  return {
    entry,
    secret,
    created,
    stateKey: { root: entry.root, workspaceId: entry.workspaceId, fingerprint: secret.fingerprint },
  };
}

export interface IndexReport {
  root: string;
  workspaceId: string;
  created: boolean;
  files: number;
  hashed: number;
  skipped: ScanSkips;
  sync: SyncReport;
  scanMs: number;
  syncMs: number;
}

export interface IndexOptions extends Pick<ScanOptions, "maxFileBytes" | "onProgress"> {
  onUpload?: (event: { done: number; total: number }) => void;
  signal?: AbortSignal;
}

/** Scan (warm from the stat cache), build the Merkle tree, sync it, and remember what the edge holds. */
export async function indexWorkspace(
  sextant: Sextant,
  ws: OpenWorkspace,
  options: IndexOptions = {},
): Promise<IndexReport> {
  const state: WorkspaceState = await loadState(ws.stateKey);
  const scanStarted = performance.now();
  const scan = scanWorkspace(ws.entry.root, ws.secret, {
    previous: state.entries,
    previousStartedAt: state.startedAt,
    ...(options.maxFileBytes ? { maxFileBytes: options.maxFileBytes } : {}),
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
  });
  const tree = new LocalTree(scan.files, ws.secret);
  state.entries = scan.files;
  state.startedAt = scan.startedAt;
  const scanMs = performance.now() - scanStarted;
  await saveState(ws.stateKey, state);

  const syncStarted = performance.now();
  let sync: SyncReport;
  try {
    sync = await syncTree({
      sextant,
      workspaceId: ws.entry.workspaceId,
      secret: ws.secret,
      tree,
      state,
      ...(options.onUpload ? { onProgress: (e) => options.onUpload!(e) } : {}),
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
  await saveState(ws.stateKey, state);
  return {
    root: ws.entry.root,
    workspaceId: ws.entry.workspaceId,
    created: ws.created,
    files: scan.files.size,
    hashed: scan.hashed,
    skipped: scan.skipped,
    sync,
    scanMs,
    syncMs: performance.now() - syncStarted,
  };
}
