/**
 * Watch latency on the local edge: the time from a file being saved to the edge's tree holding
 * it, through `sextant watch`'s own loop (file-system events, debounce, warm scan, sync). Each
 * save is confirmed by reading the edge's root and comparing it with the local tree's.
 *
 *   npx tsx bench/watch-latency.ts            # 10,000-file workspace, 30 saves
 *   BENCH_FILES=100000 BENCH_SAVES=20 npx tsx bench/watch-latency.ts
 */
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { indexWorkspace, type IndexReport } from "../client/workspace/session.js";
import { watchWorkspace } from "../client/workspace/watch.js";
import { startLocalEdge } from "../test/support/local-edge.js";
import { edgeWorkspace } from "./edge-workspace.js";
import { fmt, quantile } from "./stats.js";
import { generateTree } from "./tree-fixture.js";

export interface WatchFigures {
  files: number;
  saves: number;
  p50: number;
  p95: number;
  max: number;
}

export async function runWatchLatency(count: number, saves: number): Promise<WatchFigures> {
  const { root, files } = generateTree(join(tmpdir(), `sextant-bench-watch-${count}`), count);
  const edge = await startLocalEdge();
  const controller = new AbortController();
  try {
    const { sextant, ws } = await edgeWorkspace(edge, root);
    const workspace = { id: ws.entry.workspaceId };
    await indexWorkspace(sextant, ws);

    // A holder, not a variable: the callback sets it behind the type checker's back.
    const seen: { last?: IndexReport } = {};
    let ready!: () => void;
    const isReady = new Promise<void>((resolve) => (ready = resolve));
    const watching = watchWorkspace(sextant, ws, {
      debounceMs: 50,
      signal: controller.signal,
      onReady: () => ready(),
      onSync: (report) => (seen.last = report),
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
        if (performance.now() - savedAt > 60_000) throw new Error(`save ${i} never reached the edge`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      latencies.push(performance.now() - savedAt);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    controller.abort();
    await watching;
    return {
      files: count,
      saves,
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
  return `watch latency, save to edge, ${f.files.toLocaleString("en-US")}-file workspace, ${f.saves} saves: p50 ${fmt(f.p50)} ms, p95 ${fmt(f.p95)} ms, max ${fmt(f.max)} ms`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 10_000);
  const saves = Number(process.env.BENCH_SAVES ?? 30);
  console.log(reportWatch(await runWatchLatency(count, saves)));
}
