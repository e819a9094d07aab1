/**
 * Watch latency on the local edge: the time from a file being saved to the edge's tree holding
 * it, through `sextant watch`'s own loop (file-system events, debounce, warm scan, sync). Each
 * save is confirmed by reading the edge's root and comparing it with the local tree's. The
 * debounce is `sextant watch`'s default unless `BENCH_DEBOUNCE_MS` sets another; every save
 * waits it out, so the report gives the latency beyond it too.
 *
 *   npx tsx bench/watch-latency.ts            # 10,000-file workspace, 30 saves
 *   BENCH_FILES=2000 BENCH_SAVES=20 npx tsx bench/watch-latency.ts
 */
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { SYNC_PROTOCOL } from "../protocol/sync.js";
import { indexWorkspace, type IndexReport } from "../client/workspace/session.js";
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
  debounceMs: number;
  protocol: number;
  p50: number;
  p95: number;
  max: number;
}

export async function runWatchLatency(
  count: number,
  saves: number,
  debounceMs = Number(process.env.BENCH_DEBOUNCE_MS ?? DEFAULT_DEBOUNCE_MS),
): Promise<WatchFigures> {
  if (!Number.isFinite(debounceMs) || debounceMs < 0) throw new Error(`a debounce in milliseconds, not ${debounceMs}`);
  const { root, files } = generateTree(join(tmpdir(), `sextant-bench-watch-${count}`), count);
  const edge = await startLocalEdge();
  const controller = new AbortController();
  try {
    const { sextant, ws } = await edgeWorkspace(edge, root);
    const workspace = { id: ws.entry.workspaceId };
    await indexWorkspace(sextant, ws);

    // A holder, not a variable: the callback sets it behind the type checker's back.
    const seen: { last?: IndexReport; error?: unknown } = {};
    // Ready once the watcher's first sync (the one it runs on starting) is done, so that the first
    // save does not wait behind it.
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
    await isReady;

    const latencies: number[] = [];
    for (let i = 0; i < saves; i++) {
      const path = join(root, files[(i * 7919) % files.length]!);
      seen.last = undefined;
      const savedAt = performance.now();
      writeFileSync(path, `// saved ${i} at ${Date.now()}\n`);
      // Done when a sync has run after the save and the edge's root is the local root.
      for (;;) {
        const last = seen.last as IndexReport | undefined;
        if (last && last.sync.converged && last.sync.changed + last.sync.added > 0) {
          const remote = await sextant.workspaces.tree(workspace.id);
          if (remote.root === last.sync.root) break;
        }
        if (seen.error !== undefined) throw new Error(`save ${i}: a sync failed`, { cause: seen.error });
        if (performance.now() - savedAt > 60_000) throw new Error(`save ${i} never reached the edge`);
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
      latencies.push(performance.now() - savedAt);
      await new Promise((resolve) => setTimeout(resolve, PAUSE_MS));
    }
    controller.abort();
    await watching;
    return {
      files: count,
      saves,
      debounceMs,
      protocol: SYNC_PROTOCOL,
      p50: quantile(latencies, 0.5),
      p95: quantile(latencies, 0.95),
      max: Math.max(...latencies),
    };
  } finally {
    controller.abort();
    await edge.stop();
  }
}

export function reportWatch(f: WatchFigures): string {
  const beyond = (ms: number) => fmt(Math.max(0, ms - f.debounceMs));
  return [
    `watch latency, save to edge: p50 ${fmt(f.p50)} ms, p95 ${fmt(f.p95)} ms, max ${fmt(f.max)} ms, of which the debounce is ${f.debounceMs} ms (beyond it: p50 ${beyond(f.p50)} ms, p95 ${beyond(f.p95)} ms)`,
    `  settings: ${f.files.toLocaleString("en-US")}-file workspace, ${f.saves} saves, debounce ${f.debounceMs} ms${f.debounceMs === DEFAULT_DEBOUNCE_MS ? " (sextant watch's default)" : ` (sextant watch's default is ${DEFAULT_DEBOUNCE_MS})`}, ${PAUSE_MS} ms between saves, edge's root read every ${POLL_MS} ms, sync protocol ${f.protocol}, local edge (npm start), built-in embedder`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 10_000);
  const saves = Number(process.env.BENCH_SAVES ?? 30);
  console.log(reportWatch(await runWatchLatency(count, saves)));
}
