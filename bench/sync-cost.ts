/**
 * What a sync costs as a function of the number of changed files, in a workspace of N files on the
 * local edge: round trips, bytes up and down (bodies and headers), the edge's time (Server-Timing)
 * and wall time. The baseline, measured in the same run, is the flat manifest upload: every path
 * and hash sent once, which is what the first index of the workspace does.
 *
 *   npx tsx bench/sync-cost.ts              # 100,000 files
 *   BENCH_FILES=10000 npx tsx bench/sync-cost.ts
 */
import { appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Sextant } from "../client/sdk/client.js";
import { scanLocal } from "../client/workspace/session.js";
import { emptyState, type WorkspaceState } from "../client/workspace/state.js";
import { syncTree, type SyncReport } from "../client/workspace/sync.js";
import { startLocalEdge } from "../test/support/local-edge.js";
import { edgeWorkspace } from "./edge-workspace.js";
import { fmt } from "./stats.js";
import { generateTree } from "./tree-fixture.js";

export interface SyncCost {
  label: string;
  changed: number;
  roundTrips: number;
  bytesUp: number;
  bytesDown: number;
  serverMs: number;
  wallMs: number;
  strategy: SyncReport["strategy"];
}

/** A fetch that counts what crosses the wire: bodies and headers, both ways. */
function meter() {
  const totals = { requests: 0, up: 0, down: 0, serverMs: 0 };
  const fetchImpl = (async (input: RequestInfo | URL, init: RequestInit = {}) => {
    totals.requests++;
    const url = new URL(String(input));
    const headers = Object.entries((init.headers ?? {}) as Record<string, string>);
    totals.up += `${init.method ?? "GET"} ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n`.length;
    for (const [k, v] of headers) totals.up += k.length + v.length + 4;
    if (typeof init.body === "string") totals.up += Buffer.byteLength(init.body);
    const response = await fetch(input, init);
    const body = Buffer.from(await response.arrayBuffer());
    totals.down += body.length + 17;
    response.headers.forEach((v, k) => (totals.down += k.length + v.length + 4));
    const timing = response.headers.get("Server-Timing")?.match(/dur=([\d.]+)/);
    if (timing) totals.serverMs += Number(timing[1]);
    return new Response(body, { status: response.status, headers: response.headers });
  }) as typeof fetch;
  return { fetchImpl, totals };
}

export async function runSyncCost(count: number, ks: number[]): Promise<{ baseline: SyncCost; runs: SyncCost[] }> {
  const { root, files } = generateTree(join(tmpdir(), `sextant-bench-sync-${count}`), count);
  const edge = await startLocalEdge();
  try {
    const { apiKey, ws } = await edgeWorkspace(edge, root);
    const { secret } = ws;
    const workspace = { id: ws.entry.workspaceId };
    const state = emptyState();

    const measure = async (label: string, changed: number, target: WorkspaceState): Promise<SyncCost> => {
      const { tree } = await scanLocal(ws, target);
      const { fetchImpl, totals } = meter();
      const sextant = new Sextant({ apiKey, baseURL: edge.baseURL, fetch: fetchImpl, timeout: 600_000 });
      const started = performance.now();
      const report = await syncTree({ sextant, workspaceId: workspace.id, root, secret, tree, state: target });
      const wallMs = performance.now() - started;
      if (!report.converged) throw new Error(`${label}: did not converge`);
      return {
        label,
        changed,
        roundTrips: report.roundTrips,
        bytesUp: totals.up,
        bytesDown: totals.down,
        serverMs: totals.serverMs,
        wallMs,
        strategy: report.strategy,
      };
    };

    const baseline = await measure("flat manifest (first index)", files.length, state);
    const runs: SyncCost[] = [];
    let edit = 0;
    for (const k of ks) {
      // Spread the edits over the tree, as real changes spread over packages.
      for (let i = 0; i < k; i++)
        appendFileSync(join(root, files[(edit++ * 7919) % files.length]!), `// edit ${edit}\n`);
      runs.push(await measure(`${k} changed`, k, state));
    }
    for (let i = 0; i < 10; i++)
      appendFileSync(join(root, files[(edit++ * 7919) % files.length]!), `// edit ${edit}\n`);
    const lost = { ...state, synced: emptyState().synced, syncedRoot: null };
    runs.push(await measure("10 changed, no snapshot (descent)", 10, lost));
    return { baseline, runs };
  } finally {
    await edge.stop();
  }
}

export function reportSyncCost(result: { baseline: SyncCost; runs: SyncCost[] }, files: number): string {
  const kb = (n: number) => `${(n / 1024).toFixed(1)} KB`;
  const lines = [
    `sync cost in a workspace of ${files.toLocaleString("en-US")} files (local edge; bytes are bodies plus headers)`,
    "case                                  round trips   bytes up  bytes down  edge ms   wall ms  of flat bytes",
  ];
  const flat = result.baseline.bytesUp + result.baseline.bytesDown;
  for (const r of [result.baseline, ...result.runs]) {
    const share = ((r.bytesUp + r.bytesDown) / flat) * 100;
    lines.push(
      `${r.label.padEnd(38)}${String(r.roundTrips).padStart(11)} ${kb(r.bytesUp).padStart(10)} ${kb(r.bytesDown).padStart(11)} ${fmt(r.serverMs).padStart(8)} ${fmt(r.wallMs).padStart(9)} ${`${share.toFixed(share < 1 ? 3 : 1)}%`.padStart(14)}`,
    );
  }
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 100_000);
  console.log(reportSyncCost(await runSyncCost(count, [0, 1, 10, 1000]), count));
}
