/**
 * The diff from the tree as uploaded to the tree now, as `git apply` reads it: `a/` and `b/`
 * prefixes, `/dev/null` for created and deleted files, hunks with three lines of context (jsdiff's
 * `structuredPatch`). `.git` and `node_modules` are left out (what a build or an install wrote there
 * is not the task's change); binary files, and files past the caps below, are listed in `skipped`.
 *
 * It runs in the host's worker pool (`tree-worker.ts`), never on its event loop, under a deadline and
 * caps: files past `MAX_FILE_BYTES` and what comes past `MAX_DIFF_BYTES` of diff are listed in
 * `skipped`, not diffed, and a file whose patch would take longer than its edit-length or time cap
 * to find is written as a whole replacement (a rewritten lockfile costs its size, not its square).
 */
import { BINARY_SNIFF_BYTES } from "../protocol/binary.js";
import type { DiffResponse } from "../protocol/agents/sandbox.js";
import { HttpError } from "./http.js";
import { SKIPPED_DIRS } from "./tools.js";
import { JobAborted, JobTimeout, type TreePool } from "./tree-pool.js";

export const MAX_FILE_BYTES = 2 * 2 ** 20;
export const MAX_DIFF_BYTES = 16 * 2 ** 20;
const DIFF_DEADLINE_MS = 60_000;

export interface DiffSource {
  tenant: string;
  base: string;
  tree: string;
  uid: number;
}

export async function treeDiff(pool: TreePool, s: DiffSource, signal?: AbortSignal): Promise<DiffResponse> {
  try {
    return await pool.diff(
      s.tenant,
      {
        root: s.tree,
        base: s.base,
        tree: s.tree,
        owner: process.getuid?.() === 0 ? s.uid : null,
        skipDirs: SKIPPED_DIRS,
        maxDepth: 64,
        maxFiles: 50_000,
        maxFileBytes: MAX_FILE_BYTES,
        sniffBytes: BINARY_SNIFF_BYTES,
        maxEditLength: 4_000,
        fileTimeoutMs: 500,
        maxDiffBytes: MAX_DIFF_BYTES,
      },
      DIFF_DEADLINE_MS,
      signal,
    );
  } catch (err) {
    if (err instanceof JobTimeout)
      throw new HttpError(413, "payload_too_large", `The tree's changes took over ${DIFF_DEADLINE_MS} ms to diff.`);
    if (err instanceof JobAborted) throw new HttpError(409, "conflict", "The sandbox was stopped while its diff ran.");
    if ((err as NodeJS.ErrnoException).code === "ERR_WORKER_OUT_OF_MEMORY")
      throw new HttpError(413, "payload_too_large", "The tree's changes took more memory to diff than a diff may.");
    throw err;
  }
}
