import { EMPTY_ROOT, parentOf } from "../../protocol/merkle.js";
import { MAX_COMMIT_ENTRIES, MAX_DIFF_NODES, SYNC_PROTOCOL, type TreeNode, type Upsert } from "../../protocol/sync.js";
import type { Sextant } from "../sdk/client.js";
import { NotFoundError } from "../sdk/errors.js";
import { FileTable } from "./file-table.js";
import type { WorkspaceSecret } from "./secret.js";
import { prepareUpload, splitUpload, withoutChunks, type PreparedUpload } from "./upload.js";
import type { SkippedFile } from "./scanner.js";
import type { WorkspaceState } from "./state.js";
import { join, type LocalTree } from "./tree.js";

/** The edge's default `MAX_BODY_BYTES`: the most one request body may hold unless the edge says otherwise. */
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
/** Room in a body for the commit's envelope around its upserts and deletes. */
const BODY_MARGIN_BYTES = 16 * 1024;
/** Files are batched up to this many bytes a commit (less where the edge's body limit is lower). */
const MAX_COMMIT_BYTES = 512 * 1024;
/**
 * Nodes asked for per directory in the frontier. The edge expands breadth-first without knowing
 * which subtrees match, so a small budget per differing directory keeps matching subtrees out of
 * the answer at the cost of a round trip per level or two.
 */
const DIFF_BUDGET_PER_DIR = 100;
const MAX_FRONTIER = 500;
/** Extra passes when another client changes the workspace while this one syncs. */
const MAX_PASSES = 3;

export interface SyncChanges {
  upserts: (Upsert & { plain: string })[];
  deletes: string[];
}

export interface SyncReport {
  /** How the changes were found: none needed, from the synced snapshot, or by descending the tree. */
  strategy: "unchanged" | "initial" | "snapshot" | "descent";
  added: number;
  changed: number;
  deleted: number;
  roundTrips: number;
  root: string;
  converged: boolean;
  /** Chunks uploaded for embedding. */
  chunks: number;
  /** Parts staged ahead of a commit, for files whose chunks no single request body holds. */
  stagedParts: number;
  /** Secrets found in changed files and removed before upload. */
  secretsWithheld: number;
  /** Files whose chunks no request body could hold: in the tree, but not searchable. */
  skippedFiles: SkippedFile[];
  /**
   * Set when the edge's index was made by another model than its embedder: every file was sent
   * again so the edge could move the index to `to`; `moved` once the edge reports it done.
   */
  reembed?: Reembed;
}

export interface Reembed {
  /** The index's model before the move (null: one the edge cannot name). */
  from: string | null;
  to: string;
  /** Files sent for the move in this run. */
  files: number;
  /** Files an earlier, interrupted run had already moved (same path and hash): not sent again. */
  alreadyMoved: number;
  moved: boolean;
}

export interface SyncOptions {
  sextant: Sextant;
  workspaceId: string;
  /** The workspace's directory: changed files are read from it to be chunked. */
  root: string;
  secret: WorkspaceSecret;
  tree: LocalTree;
  state: WorkspaceState;
  onProgress?: (event: { phase: "upload"; done: number; total: number }) => void;
  /** Called before every file is sent again to move the index to the edge's embedder. */
  onReembed?: (reembed: Reembed) => void;
  signal?: AbortSignal;
  /** The edge's `MAX_BODY_BYTES`: by default what the edge reports, or DEFAULT_MAX_BODY_BYTES. */
  maxBodyBytes?: number;
}

/**
 * Brings the edge's tree to the local one. With a snapshot that matches the edge's root, the
 * changes are known locally and cost one status round trip plus the commits; otherwise the client
 * descends the edge's tree breadth-first where hashes differ. Every step is idempotent, and the
 * snapshot moves only when the edge's root equals the local root, so an interrupted sync is
 * simply finished by the next one.
 */
export async function syncTree(options: SyncOptions): Promise<SyncReport> {
  const { sextant, workspaceId, tree, state } = options;
  const report: SyncReport = {
    strategy: "unchanged",
    added: 0,
    changed: 0,
    deleted: 0,
    roundTrips: 0,
    root: "",
    converged: false,
    chunks: 0,
    stagedParts: 0,
    secretsWithheld: 0,
    skippedFiles: [],
  };
  const call = <T>(promise: Promise<T>) => {
    report.roundTrips++;
    return promise;
  };

  const status = await call(sextant.workspaces.tree(workspaceId, { signal: options.signal }));
  const maxBodyBytes = options.maxBodyBytes ?? status.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  let serverRoot = status.root;
  // The edge's index is of another model than its embedder: every file goes again, with its chunks.
  let reembed = status.reembed === true;
  const last: { status: { model?: string | null | undefined; reembed?: boolean | undefined } } = { status };
  for (let pass = 0; pass < MAX_PASSES && (serverRoot !== tree.root || reembed); pass++) {
    let changes: SyncChanges;
    if (serverRoot === tree.root) {
      changes = { upserts: [], deletes: [] };
    } else if (pass === 0 && state.syncedRoot === serverRoot) {
      report.strategy = "snapshot";
      changes = fromSnapshot(tree, state, options.secret);
    } else if (serverRoot === EMPTY_ROOT) {
      // A new or emptied workspace: everything is an upload, nothing to descend.
      report.strategy = "initial";
      changes = fromSnapshot(tree, { ...state, synced: FileTable.empty() }, options.secret);
    } else {
      report.strategy = "descent";
      changes = await descend(options, call);
    }
    for (const u of changes.upserts) {
      if (state.synced.has(u.plain)) report.changed++;
      else report.added++;
    }
    report.deleted += changes.deletes.length;
    if (reembed) {
      // Same paths and hashes: the edge keeps serving its index until every file has arrived. Files
      // an interrupted run already moved, unchanged since, are not sent again.
      const moved = await reembedded(options, call);
      const every = fromSnapshot(tree, { ...state, synced: FileTable.empty() }, options.secret).upserts;
      const upserts = every.filter((u) => moved.get(u.path) !== u.hash);
      changes = { upserts, deletes: changes.deletes };
      report.reembed = {
        from: status.model ?? null,
        to: status.embedder ?? "",
        files: upserts.length,
        alreadyMoved: every.length - upserts.length,
        moved: false,
      };
      options.onReembed?.(report.reembed);
      reembed = false;
    }
    serverRoot = await commitAll({ ...options, maxBodyBytes }, changes, call, serverRoot, report, last);
  }
  if (report.reembed) report.reembed.moved = last.status.reembed === false;
  report.root = serverRoot;
  report.converged = serverRoot === tree.root;
  if (report.converged) {
    state.synced = tree.files;
    state.syncedRoot = tree.root;
  }
  return report;
}

/**
 * The files (encrypted path → hash) the edge already holds for the embedder it is moving the index
 * to, page by page. An edge from before `POST …/tree/reembed` answers 404: every file goes again.
 */
async function reembedded(options: SyncOptions, call: <T>(p: Promise<T>) => Promise<T>): Promise<Map<string, string>> {
  const moved = new Map<string, string>();
  let after: string | undefined;
  try {
    do {
      const page = await call(
        options.sextant.workspaces.reembedded(
          options.workspaceId,
          { protocol: SYNC_PROTOCOL, ...(after === undefined ? {} : { after }) },
          options.signal ? { signal: options.signal } : {},
        ),
      );
      for (const file of page.files) moved.set(file.path, file.hash);
      after = page.next ?? undefined;
    } while (after !== undefined);
  } catch (err) {
    if (err instanceof NotFoundError) return new Map();
    throw err;
  }
  return moved;
}

/** How the local files differ from the synced snapshot, as counts. */
export function pendingChanges(
  files: FileTable,
  synced: FileTable,
): { added: number; changed: number; deleted: number } {
  const pending = { added: 0, changed: 0, deleted: 0 };
  files.paths.forEach((path, row) => {
    if (!synced.has(path)) pending.added++;
    else if (!synced.sameHash(path, files, row)) pending.changed++;
  });
  for (const path of synced.keys()) if (!files.has(path)) pending.deleted++;
  return pending;
}

/** Local files against the snapshot of what the edge holds: no round trip, and only changed names are encrypted. */
function fromSnapshot(tree: LocalTree, state: WorkspaceState, secret: WorkspaceSecret): SyncChanges {
  const upserts: SyncChanges["upserts"] = [];
  const { files } = tree;
  files.paths.forEach((path, row) => {
    if (!state.synced.sameHash(path, files, row)) {
      upserts.push({
        path: secret.encryptPath(path),
        hash: files.hashAt(row),
        size: files.meta[row * 3]!,
        plain: path,
      });
    }
  });
  const deletes = [...state.synced.keys()].filter((path) => !tree.files.has(path)).map((p) => secret.encryptPath(p));
  return { upserts, deletes };
}

/** Breadth-first over the edge's tree, expanding only directories whose hashes differ. */
async function descend(options: SyncOptions, call: <T>(p: Promise<T>) => Promise<T>): Promise<SyncChanges> {
  const { sextant, workspaceId, tree } = options;
  const server = new Map<string, TreeNode>();
  const childrenOf = new Map<string, TreeNode[]>();
  let frontier = [""];
  while (frontier.length > 0) {
    const answer = await call(
      sextant.workspaces.diff(
        workspaceId,
        {
          protocol: SYNC_PROTOCOL,
          dirs: frontier.slice(0, MAX_FRONTIER),
          budget: Math.min(MAX_DIFF_NODES, DIFF_BUDGET_PER_DIR * Math.min(frontier.length, MAX_FRONTIER)),
        },
        { signal: options.signal },
      ),
    );
    const expanded = new Set(frontier.slice(0, MAX_FRONTIER));
    for (const node of answer.nodes) {
      server.set(node.path, node);
      if (node.kind === "d") expanded.add(node.path);
      const parent = parentOf(node.path);
      let list = childrenOf.get(parent);
      if (!list) childrenOf.set(parent, (list = []));
      list.push(node);
    }
    for (const dir of answer.truncated) expanded.delete(dir);
    for (const dir of expanded) if (!childrenOf.has(dir)) childrenOf.set(dir, []);
    const pending = [...answer.truncated, ...frontier.slice(MAX_FRONTIER)];
    // Only truncated directories that differ from ours need their children.
    frontier = pending.filter((dir) => tree.get(dir)?.hash !== server.get(dir)?.hash);
  }

  const changes: SyncChanges = { upserts: [], deletes: [] };
  const addAll = (encrypted: string) => {
    for (const [path, node] of tree.filesUnder(encrypted)) {
      changes.upserts.push({ path, hash: node.hash, size: node.size, plain: node.path });
    }
  };
  const compareDir = (dir: string) => {
    const local = tree.get(dir)!;
    const remote = new Map((childrenOf.get(dir) ?? []).map((n) => [n.path, n]));
    for (const name of local.children ?? []) {
      const path = join(dir, name);
      const mine = tree.get(path)!;
      const theirs = remote.get(path);
      remote.delete(path);
      if (!theirs) addAll(path);
      else if (theirs.hash === mine.hash && theirs.kind === mine.kind) continue;
      else if (mine.kind === "f" || theirs.kind === "f") addAll(path);
      else compareDir(path);
    }
    for (const path of remote.keys()) changes.deletes.push(path);
  };
  compareDir("");
  return changes;
}

async function commitAll(
  options: SyncOptions,
  changes: SyncChanges,
  call: <T>(p: Promise<T>) => Promise<T>,
  root: string,
  report: SyncReport,
  last: { status: { model?: string | null | undefined; reembed?: boolean | undefined } },
): Promise<string> {
  const total = changes.deletes.length + changes.upserts.length;
  let deletes = changes.deletes;
  let next = 0;
  let done = 0;
  let pending: PreparedUpload | undefined;
  // One commit in flight while the next batch is prepared: the device's reading, secret scanning and
  // chunking overlap the edge's embedding and storing instead of waiting for it.
  let inFlight: Promise<void> | undefined;
  const maxUpsertBytes = (options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES) - BODY_MARGIN_BYTES;
  const maxCommitBytes = Math.min(MAX_COMMIT_BYTES, maxUpsertBytes);
  const prepare = async (entry: SyncChanges["upserts"][number]) => {
    const prepared = await prepareUpload(options.root, options.secret, entry);
    if (prepared.bytes <= maxUpsertBytes) return prepared;
    const split = splitUpload(prepared, maxUpsertBytes);
    if (!split) {
      report.skippedFiles.push({ path: entry.plain, reason: "tooLarge" });
      return withoutChunks(prepared);
    }
    // Staged in order while the previous commit is in flight; the file's own commit claims them.
    const { path, hash, language, pathTerms } = split.final.upsert;
    for (const [part, chunks] of split.staged.entries()) {
      await call(
        options.sextant.workspaces.stage(
          options.workspaceId,
          { protocol: SYNC_PROTOCOL, path, hash, part, language, pathTerms, chunks },
          { vectorKey: options.secret.vectorKey, ...(options.signal ? { signal: options.signal } : {}) },
        ),
      );
      report.chunks += chunks.length;
      report.stagedParts++;
    }
    return split.final;
  };
  // At least one commit when moving an empty tree's index, so the edge can finish the move.
  let first = report.reembed !== undefined && total === 0;
  while (deletes.length > 0 || next < changes.upserts.length || pending || first) {
    first = false;
    // Deletions first, then files in batches bounded by entries and by bytes (chunk text included).
    let bytes = 0;
    let taken = 0;
    // A delete's path can be 8 KiB encrypted: a full batch of them must still fit a body.
    while (taken < Math.min(deletes.length, MAX_COMMIT_ENTRIES) && bytes + deletes[taken]!.length + 3 <= maxCommitBytes)
      bytes += deletes[taken++]!.length + 3;
    const batchDeletes = deletes.slice(0, taken);
    deletes = deletes.slice(taken);
    const upserts: Upsert[] = [];
    while (batchDeletes.length + upserts.length < MAX_COMMIT_ENTRIES) {
      pending ??= next < changes.upserts.length ? await prepare(changes.upserts[next++]!) : undefined;
      if (!pending) break;
      if (bytes + pending.bytes > maxCommitBytes && batchDeletes.length + upserts.length > 0) break;
      bytes += pending.bytes;
      upserts.push(pending.upsert);
      report.chunks += pending.upsert.chunks.length;
      report.secretsWithheld += pending.withheld;
      pending = undefined;
    }
    if (inFlight) await inFlight;
    inFlight = call(
      options.sextant.workspaces.commit(
        options.workspaceId,
        { protocol: SYNC_PROTOCOL, upserts, deletes: batchDeletes },
        { vectorKey: options.secret.vectorKey, ...(options.signal ? { signal: options.signal } : {}) },
      ),
    ).then((result) => {
      root = result.root;
      last.status = result;
      done += upserts.length + batchDeletes.length;
      options.onProgress?.({ phase: "upload", done, total });
    });
    // Awaited before the next commit or the return; until then a failure must not count as unhandled.
    inFlight.catch(() => {});
  }
  if (inFlight) await inFlight;
  return root;
}
