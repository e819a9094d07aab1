/**
 * Watch latency on the local edge: the time from a file being saved to the edge's tree holding
 * it, through `sextant watch`'s own loop (file-system events, debounce, warm scan, sync). Each
 * save is confirmed by reading the edge's root and comparing it with the local tree's. The
 * debounce is `sextant watch`'s default unless `BENCH_DEBOUNCE_MS` sets another; every save
 * waits it out, so the report gives the latency beyond it too.
 *
 * The baseline is the same one-file save pushed by the watcher's own sync step called directly
 * (no watcher, no debounce), confirmed the same way. The two take turns, one of each a round, and
 * the watcher runs only for its own saves: a running watcher would see the baseline's save too and
 * sync it alongside, loading the edge under the baseline and leaving a sync in flight for the next
 * watched save. So each round starts a watcher, waits out its first sync, times one save and stops
 * it; which side goes first alternates from round to round.
 *
 *   npx tsx bench/watch-latency.ts            # 10,000-file workspace, 30 saves a side
 *   BENCH_FILES=2000 BENCH_SAVES=20 npx tsx bench/watch-latency.ts
 */
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { SYNC_PROTOCOL } from "../protocol/sync.js";
import type { Sextant } from "../client/sdk/client.js";
import { indexWorkspace, type IndexReport, type OpenWorkspace } from "../client/workspace/session.js";
import { loadState } from "../client/workspace/state.js";
import { DEFAULT_DEBOUNCE_MS, watchWorkspace } from "../client/workspace/watch.js";
import { startLocalEdge } from "../test/support/local-edge.js";
import { edgeWorkspace } from "./edge-workspace.js";
import { fmt, quantile } from "./stats.js";
import { generateTree } from "./tree-fixture.js";

/** Between one save reaching the edge and the next save. */
const PAUSE_MS = 100;
/** How often the edge's root is read while a save is on its way. */
const POLL_MS = 5;

export interface WatchFigures {
  files: number;
  saves: number;
  /** Baseline saves, pushed by the sync step directly. */
  directSaves: number;
  debounceMs: number;
  protocol: number;
  p50: number;
  p95: number;
  max: number;
  directP50: number;
  directP95: number;
  directMax: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Reads the edge's root until it is `root`. */
async function edgeHolds(sextant: Sextant, workspaceId: string, root: string, since: number, what: string) {
  for (;;) {
    const remote = await sextant.workspaces.tree(workspaceId);
    if (remote.root === root) return;
    if (performance.now() - since > 60_000) throw new Error(`${what} never reached the edge`);
    await sleep(POLL_MS);
  }
}

/** One save through a watcher started for it alone, timed from the save to the edge holding it. */
async function watchedSave(
  sextant: Sextant,
  ws: OpenWorkspace,
  debounceMs: number,
  path: string,
  label: string,
): Promise<number> {
  const controller = new AbortController();
  // A holder, not a variable: the callback sets it behind the type checker's back.
  const seen: { last?: IndexReport; error?: unknown } = {};
  // Ready once the watcher's first sync (the one it runs on starting) is done, so that the save
  // does not wait behind it.
  let ready!: () => void;
  let failed!: (error: unknown) => void;
  const isReady = new Promise<void>((resolve, reject) => ((ready = resolve), (failed = reject)));
  const watching = watchWorkspace(sextant, ws, {
    debounceMs,
    signal: controller.signal,
    // The watcher retries a failed sync after a backoff: a latency that would measure the backoff.
    onError: (error) => {
      seen.error = error;
      failed(error);
    },
    onSync: (report, reason) => {
      seen.last = report;
      if (reason === "start") ready();
    },
  });
  try {
    await isReady;
    seen.last = undefined;
    const savedAt = performance.now();
    writeFileSync(path, `// ${label} at ${Date.now()}\n`);
    // Done when a sync has run after the save, carried a change, and the edge's root is its root.
    for (;;) {
      const last = seen.last as IndexReport | undefined;
      if (last && last.sync.converged && last.sync.changed + last.sync.added > 0) {
        const remote = await sextant.workspaces.tree(ws.entry.workspaceId);
        if (remote.root === last.sync.root) break;
      }
      if (seen.error !== undefined) throw new Error(`${label}: a sync failed`, { cause: seen.error });
      if (performance.now() - savedAt > 60_000) throw new Error(`${label} never reached the edge`);
      await sleep(POLL_MS);
    }
    return performance.now() - savedAt;
  } finally {
    controller.abort();
    await watching;
  }
}

/**
 * One save pushed by the watcher's sync step itself (a resident state and the saved path), with no
 * watcher running, timed from the save to the edge holding it.
 */
async function directSave(sextant: Sextant, ws: OpenWorkspace, path: string, rel: string, label: string) {
  // Loaded before the save, as the watcher loads it on starting rather than for each sync.
  const state = await loadState(ws.stateKey);
  const savedAt = performance.now();
  writeFileSync(path, `// ${label} at ${Date.now()}\n`);
  const report = await indexWorkspace(sextant, ws, { state, paths: new Set([rel]) });
  if (!report.sync.converged || report.sync.changed + report.sync.added === 0)
    throw new Error(`${label}: the sync did not carry the save`);
  await edgeHolds(sextant, ws.entry.workspaceId, report.sync.root, savedAt, label);
  return performance.now() - savedAt;
}

export async function runWatchLatency(
  count: number,
  saves: number,
  debounceMs = Number(process.env.BENCH_DEBOUNCE_MS ?? DEFAULT_DEBOUNCE_MS),
): Promise<WatchFigures> {
  if (!Number.isFinite(debounceMs) || debounceMs < 0) throw new Error(`a debounce in milliseconds, not ${debounceMs}`);
  const { root, files } = generateTree(join(tmpdir(), `sextant-bench-watch-${count}`), count);
  const edge = await startLocalEdge();
  try {
    const { sextant, ws } = await edgeWorkspace(edge, root);
    await indexWorkspace(sextant, ws);

    const watched: number[] = [];
    const direct: number[] = [];
    for (let i = 0; i < saves; i++) {
      // Two different files a round, so each side's save is a change of its own.
      const watchedFile = files[(2 * i * 7919) % files.length]!;
      const directFile = files[((2 * i + 1) * 7919) % files.length]!;
      const sides = [
        async () => watched.push(await watchedSave(sextant, ws, debounceMs, join(root, watchedFile), `save ${i}`)),
        async () => direct.push(await directSave(sextant, ws, join(root, directFile), directFile, `direct save ${i}`)),
      ];
      if (i % 2 === 1) sides.reverse();
      for (const side of sides) {
        await side();
        await sleep(PAUSE_MS);
      }
    }
    return {
      files: count,
      saves,
      directSaves: direct.length,
      debounceMs,
      protocol: SYNC_PROTOCOL,
      p50: quantile(watched, 0.5),
      p95: quantile(watched, 0.95),
      max: Math.max(...watched),
      directP50: quantile(direct, 0.5),
      directP95: quantile(direct, 0.95),
      directMax: Math.max(...direct),
    };
  } finally {
    await edge.stop();
  }
}

export function reportWatch(f: WatchFigures): string {
  const beyond = (ms: number) => fmt(Math.max(0, ms - f.debounceMs));
  const ratio = (a: number, b: number) => (b > 0 ? `${(a / b).toFixed(2)}x` : "n/a");
  return [
    `watch latency, save to edge: p50 ${fmt(f.p50)} ms, p95 ${fmt(f.p95)} ms, max ${fmt(f.max)} ms, of which the debounce is ${f.debounceMs} ms (beyond it: p50 ${beyond(f.p50)} ms, p95 ${beyond(f.p95)} ms)`,
    `direct sync, save to edge: p50 ${fmt(f.directP50)} ms, p95 ${fmt(f.directP95)} ms, max ${fmt(f.directMax)} ms`,
    `watch/direct: p50 ${ratio(f.p50, f.directP50)}, p95 ${ratio(f.p95, f.directP95)}`,
    `  settings: ${f.files.toLocaleString("en-US")}-file workspace, ${f.saves} saves, debounce ${f.debounceMs} ms${f.debounceMs === DEFAULT_DEBOUNCE_MS ? " (sextant watch's default)" : ` (sextant watch's default is ${DEFAULT_DEBOUNCE_MS})`}, ${PAUSE_MS} ms between saves, edge's root read every ${POLL_MS} ms, sync protocol ${f.protocol}, local edge (npm start), built-in embedder; baseline: ${f.directSaves} direct syncs of a one-file save (the watcher's sync step, no watcher, no debounce), alternating with the watched saves, a fresh watcher for each watched save`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 10_000);
  const saves = Number(process.env.BENCH_SAVES ?? 30);
  console.log(reportWatch(await runWatchLatency(count, saves)));
}
