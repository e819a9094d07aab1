/**
 * Indexing throughput end to end: the first `sextant index` of a generated source tree on the local
 * edge with the built-in embedder, through the CLI's own code path (`openWorkspace` creating the
 * workspace, then `indexWorkspace`). The baseline, measured in the same run and interleaved with
 * it, is the device's share alone: the cold scan plus everything a commit prepares (read, secret
 * scan, chunk, encrypt), with no network. Whatever the index takes beyond it is the edge's.
 *
 *   npx tsx bench/index-throughput.ts            # 10,000 files
 *   BENCH_FILES=2000 BENCH_RUNS=2 npx tsx bench/index-throughput.ts
 */
import { mkdtempSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { LocalEdge as LocalEdgeFile, localEdgePath, readJsonFile } from "../client/cli/credentials.js";
import { Sextant } from "../client/sdk/client.js";
import { SYNC_PROTOCOL } from "../protocol/sync.js";
import { WorkspaceSecret } from "../client/workspace/secret.js";
import { indexWorkspace, openWorkspace, scanLocal } from "../client/workspace/session.js";
import { emptyState } from "../client/workspace/state.js";
import { prepareUpload } from "../client/workspace/upload.js";
import { startLocalEdge } from "../test/support/local-edge.js";
import { generateCodeTree } from "./code-fixture.js";
import { offlineWorkspace } from "./offline-workspace.js";
import { median } from "./stats.js";

export interface ThroughputFigures {
  files: number;
  bytes: number;
  /** Chunks uploaded by the first index, from its report. */
  chunks: number;
  /** Medians over the runs; each run is a first index into a new workspace. */
  wallMs: number;
  wallRunsMs: number[];
  scanMs: number;
  roundTrips: number;
  /** Requests to the edge, all calls included. */
  requests: number;
  /**
   * Time with at least one request to the edge in flight, and with the Workspace object at work on
   * one (Server-Timing); the request times added up, overlaps counted twice, beside each.
   */
  requestMs: number;
  requestSumMs: number;
  objectMs: number;
  objectSumMs: number;
  /** The device alone: cold scan, then read, secret scan, chunk and encrypt every file. */
  deviceMs: number;
  /** Every device-only run: one before the first index, one after each, and one more for an odd count. */
  deviceRunsMs: number[];
  deviceChunks: number;
  runs: number;
  /** The model whose vectors the index holds, as the edge names it. */
  model: string;
}

/** A [start, end] span of time, in `performance.now()` milliseconds. */
type Span = [number, number];

/**
 * How long at least one of the spans was open: overlapping spans count once. The client keeps a
 * commit in flight while it stages the next file's parts, so the edge's answers overlap, and
 * adding up their durations would count the same time twice.
 */
export function busyMs(spans: Span[]): number {
  const sorted = [...spans].sort((a, b) => a[0] - b[0]);
  let total = 0;
  let open: Span | undefined;
  for (const [start, end] of sorted) {
    if (open && start <= open[1]) open[1] = Math.max(open[1], end);
    else {
      if (open) total += open[1] - open[0];
      open = [start, end];
    }
  }
  return total + (open ? open[1] - open[0] : 0);
}

/** A fetch that records when each request to the edge was in flight, and what its Durable Object took. */
function timedFetch() {
  const requests: Span[] = [];
  const objects: Span[] = [];
  const fetchImpl = (async (input: RequestInfo | URL, init?: RequestInit) => {
    const started = performance.now();
    const response = await fetch(input, init);
    const body = await response.arrayBuffer();
    const ended = performance.now();
    requests.push([started, ended]);
    // Server-Timing gives the object's duration, not its start: placed at the end of its request,
    // where the Worker's call to the object is, bar the answer's way back.
    const timing = response.headers.get("Server-Timing")?.match(/dur=([\d.]+)/);
    if (timing) objects.push([Math.max(started, ended - Number(timing[1])), ended]);
    return new Response(body, { status: response.status, headers: response.headers });
  }) as typeof fetch;
  const totals = () => ({
    requests: requests.length,
    requestMs: busyMs(requests),
    requestSumMs: requests.reduce((sum, [start, end]) => sum + end - start, 0),
    objectMs: busyMs(objects),
    objectSumMs: objects.reduce((sum, [start, end]) => sum + end - start, 0),
  });
  return { fetchImpl, totals };
}

/** What the device does for a first index, without sending anything: the baseline. */
async function deviceOnly(root: string): Promise<{ ms: number; chunks: number; bytes: number }> {
  const started = performance.now();
  const ws = offlineWorkspace(root);
  const { secret } = ws;
  const { scan } = await scanLocal(ws, emptyState());
  let chunks = 0;
  let bytes = 0;
  const { files } = scan;
  for (let row = 0; row < files.size; row++) {
    const plain = files.paths[row]!;
    const size = files.meta[row * 3]!;
    const entry = { path: secret.encryptPath(plain), hash: files.hashAt(row), size, plain };
    chunks += (await prepareUpload(root, secret, entry)).upsert.chunks.length;
    bytes += size;
  }
  return { ms: performance.now() - started, chunks, bytes };
}

export async function runIndexThroughput(count: number, runs = 1): Promise<ThroughputFigures> {
  const { root, files } = generateCodeTree(join(tmpdir(), `sextant-bench-code-${count}`), count);
  const edge = await startLocalEdge();
  try {
    process.env.SEXTANT_CONFIG_DIR = edge.configDir;
    const apiKey = (await readJsonFile(localEdgePath(), LocalEdgeFile))!.apiKey;
    // Grammars and secret rules load once per process, a fixed cost outside every measured run.
    const warm = WorkspaceSecret.generate();
    for (const plain of [files.find((f) => f.endsWith(".ts")), files.find((f) => f.endsWith(".py"))])
      if (plain) await prepareUpload(root, warm, { path: warm.encryptPath(plain), hash: "", size: 0, plain });
    const device = [await deviceOnly(root)];
    const indexed: { wallMs: number; scanMs: number; roundTrips: number; chunks: number; files: number }[] = [];
    let model = "";
    const edgeTimes: ReturnType<ReturnType<typeof timedFetch>["totals"]>[] = [];
    for (let run = 0; run < runs; run++) {
      // A fresh config and cache directory each run, so each is a first index into a new workspace.
      process.env.SEXTANT_CONFIG_DIR = mkdtempSync(join(tmpdir(), "sextant-bench-config-"));
      process.env.SEXTANT_CACHE_DIR = mkdtempSync(join(tmpdir(), "sextant-bench-cache-"));
      const { fetchImpl, totals } = timedFetch();
      const sextant = new Sextant({ apiKey, baseURL: edge.baseURL, fetch: fetchImpl, timeout: 600_000 });
      const started = performance.now();
      const ws = await openWorkspace(sextant, root, { create: true });
      const report = await indexWorkspace(sextant, ws);
      const wallMs = performance.now() - started;
      if (!report.sync.converged || report.sync.strategy !== "initial")
        throw new Error("the first index did not converge");
      indexed.push({
        wallMs,
        scanMs: report.scanMs,
        roundTrips: report.sync.roundTrips,
        chunks: report.sync.chunks,
        files: report.files,
      });
      edgeTimes.push(totals());
      model = (await sextant.workspaces.tree(ws.entry.workspaceId)).model ?? "unnamed";
      device.push(await deviceOnly(root));
    }
    // An odd number of baseline runs, so that its median is one of them.
    if (device.length % 2 === 0) device.push(await deviceOnly(root));
    if (indexed.some((r) => r.chunks !== device[0]!.chunks))
      throw new Error(`the index sent ${indexed[0]!.chunks} chunks, the device prepared ${device[0]!.chunks}`);
    return {
      files: indexed[0]!.files,
      bytes: device[0]!.bytes,
      chunks: indexed[0]!.chunks,
      wallMs: median(indexed.map((r) => r.wallMs)),
      wallRunsMs: indexed.map((r) => r.wallMs),
      scanMs: median(indexed.map((r) => r.scanMs)),
      roundTrips: median(indexed.map((r) => r.roundTrips)),
      requests: median(edgeTimes.map((t) => t.requests)),
      requestMs: median(edgeTimes.map((t) => t.requestMs)),
      requestSumMs: median(edgeTimes.map((t) => t.requestSumMs)),
      objectMs: median(edgeTimes.map((t) => t.objectMs)),
      objectSumMs: median(edgeTimes.map((t) => t.objectSumMs)),
      deviceMs: median(device.map((d) => d.ms)),
      deviceRunsMs: device.map((d) => d.ms),
      deviceChunks: device[0]!.chunks,
      runs,
      model,
    };
  } finally {
    await edge.stop();
  }
}

export function reportThroughput(f: ThroughputFigures): string {
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  const rate = (n: number, ms: number) => Math.round(n / (ms / 1000)).toLocaleString("en-US");
  const share = (ms: number) => `${Math.round((ms / f.wallMs) * 100)}%`;
  return [
    `index throughput: first index of ${f.files.toLocaleString("en-US")} files (${(f.bytes / 2 ** 20).toFixed(1)} MiB, ${f.chunks.toLocaleString("en-US")} chunks) on the local edge, ${f.runs === 1 ? "one run" : `median of ${f.runs} runs`}`,
    `  end to end: ${s(f.wallMs)}${f.runs > 1 ? ` (${f.wallRunsMs.map(s).join(", ")})` : ""}, ${rate(f.chunks, f.wallMs)} chunks/s, ${rate(f.files, f.wallMs)} files/s (scan ${s(f.scanMs)}, ${f.roundTrips} round trips, ${f.requests.toLocaleString("en-US")} requests); ${(f.wallMs / f.deviceMs).toFixed(2)}x the device alone`,
    `  a request to the edge in flight: ${s(f.requestMs)} (${share(f.requestMs)}), the Workspace object at work: ${s(f.objectMs)} (${share(f.objectMs)}); none in flight: ${s(f.wallMs - f.requestMs)} (${share(f.wallMs - f.requestMs)})`,
    `  request times added up, overlaps twice: ${s(f.requestSumMs)} (the Workspace object's ${s(f.objectSumMs)})`,
    `  device alone (scan, read, secret scan, chunk, encrypt; no network), median of ${f.deviceRunsMs.length} (${f.deviceRunsMs.map(s).join(", ")}): ${s(f.deviceMs)}, ${rate(f.deviceChunks, f.deviceMs)} chunks/s`,
    `  settings: ${f.files.toLocaleString("en-US")}-file generated source tree (three in four TypeScript, one in four Python), ${f.runs} index run${f.runs === 1 ? "" : "s"} into new workspaces, the device alone before the first and after each; built-in embedder (${f.model}), sync protocol ${SYNC_PROTOCOL}, local edge (npm start); ${cpus().length} cores, Node ${process.versions.node}`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 10_000);
  console.log(reportThroughput(await runIndexThroughput(count, Number(process.env.BENCH_RUNS ?? 1))));
}
