import { relative, sep } from "node:path";
import { watch } from "chokidar";
import type { Sextant } from "../sdk/client.js";
import { indexWorkspace, type IndexReport, type OpenWorkspace } from "./session.js";
import { loadState } from "./state.js";

export interface WatchOptions {
  /** Quiet time after the last event before a sync starts: edits in a burst become one sync. */
  debounceMs?: number;
  /** A full reconcile runs this often even without events, catching anything the watcher missed. */
  reconcileMs?: number;
  onSync?: (report: IndexReport, reason: "start" | "change" | "reconcile" | "retry") => void;
  onError?: (error: unknown, retryInMs: number) => void;
  onReady?: () => void;
  signal?: AbortSignal;
  /** Index generated files too, as `sextant index --include-generated` does. */
  includeGenerated?: boolean;
}

/** `sextant watch --debounce`'s default: long enough to fold an editor's save burst into one sync. */
export const DEFAULT_DEBOUNCE_MS = 200;

const NEVER_WATCHED = /(^|\/)(\.git|node_modules)(\/|$)/;

/**
 * Turns file-system events into syncs. Each sync is a warm scan plus the sync protocol, so what
 * the edge ends up with never depends on having seen every event; a failed sync (the edge down,
 * the network gone) is retried with backoff, and the edits made meanwhile are caught up then.
 */
export async function watchWorkspace(sextant: Sextant, ws: OpenWorkspace, options: WatchOptions = {}): Promise<void> {
  const debounceMs = options.debounceMs ?? DEFAULT_DEBOUNCE_MS;
  const reconcileMs = options.reconcileMs ?? 10 * 60_000;
  const root = ws.entry.root;
  let timer: NodeJS.Timeout | undefined;
  let running = false;
  let again: "change" | "reconcile" | "retry" | undefined;
  let failures = 0;
  // Paths reported since the last sync; a directory event or an overflow asks for a full scan.
  let changed = new Set<string>();
  let full = true;
  const state = await loadState(ws.stateKey);

  const schedule = (reason: "start" | "change" | "reconcile" | "retry", delay = debounceMs) => {
    if (options.signal?.aborted) return;
    if (running) {
      again = reason === "start" ? "change" : reason;
      return;
    }
    clearTimeout(timer);
    timer = setTimeout(() => void run(reason), delay);
  };

  const run = async (reason: "start" | "change" | "reconcile" | "retry") => {
    running = true;
    again = undefined;
    const paths = full || reason !== "change" || changed.size > 1000 ? undefined : changed;
    changed = new Set();
    full = false;
    try {
      const report = await indexWorkspace(sextant, ws, {
        state,
        ...(paths ? { paths } : {}),
        ...(options.includeGenerated ? { includeGenerated: true } : {}),
        ...(options.signal ? { signal: options.signal } : {}),
      });
      failures = 0;
      options.onSync?.(report, reason);
    } catch (err) {
      if (options.signal?.aborted) return;
      full = true;
      const retryIn = Math.min(1000 * 2 ** failures++, 30_000);
      options.onError?.(err, retryIn);
      again = undefined;
      running = false;
      schedule("retry", retryIn);
      return;
    }
    running = false;
    if (again) schedule(again);
  };

  const watcher = watch(root, {
    ignoreInitial: true,
    followSymlinks: false,
    ignored: (path) => NEVER_WATCHED.test(relative(root, path)),
  });
  watcher.on("all", (event, path) => {
    if (event === "addDir" || event === "unlinkDir") full = true;
    else changed.add(relative(root, path).split(sep).join("/"));
    schedule("change");
  });
  await new Promise<void>((resolve) => watcher.once("ready", () => resolve()));
  options.onReady?.();
  schedule("start", 0);
  const reconcile = setInterval(() => schedule("reconcile", 0), reconcileMs);

  await new Promise<void>((resolve) => {
    if (options.signal?.aborted) return resolve();
    options.signal?.addEventListener("abort", () => resolve(), { once: true });
  });
  clearInterval(reconcile);
  clearTimeout(timer);
  await watcher.close();
}
