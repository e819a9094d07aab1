/**
 * How soon a teammate's clone of an indexed repository is searchable. One user indexes a generated
 * source tree and exports the workspace key. Each teammate then starts from a copy of the tree in a
 * new directory (a clone: the same content, fresh mtimes, no local state) with fresh config and
 * cache directories on the same account and edge, and runs three `sextant` processes: `key
 * import`, `index` (a cold scan, then a sync that finds the edge already holding this tree) and
 * `search`, repeated until a hit names a file of the clone with lines that match the index. The
 * floor, measured in the same run, is a `sextant --version` process: what starting the CLI costs
 * before it does anything.
 * The first teammate's search is the workspace's first, so it also builds the Workspace object's
 * hot index from R2, as it would for anyone searching a workspace whose object had gone idle.
 *
 *   npx tsx bench/teammate-clone.ts              # 10,000 files, 5 teammates
 *   BENCH_FILES=2000 BENCH_CLONES=5 npx tsx bench/teammate-clone.ts
 */
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { IndexReport } from "../client/workspace/session.js";
import type { LocalHit } from "../client/workspace/search.js";
import { sextant, startLocalEdge, type CliResult } from "../test/support/local-edge.js";
import { generateCodeTree } from "./code-fixture.js";
import { median } from "./stats.js";

export interface CloneRun {
  importMs: number;
  /** The whole `sextant index` process, and the scan and sync it reports. */
  indexMs: number;
  scanMs: number;
  syncMs: number;
  roundTrips: number;
  strategy: IndexReport["sync"]["strategy"];
  chunksUploaded: number;
  searchMs: number;
  /** Searches until one answered with a hit in the clone (1 when the first did). */
  searches: number;
  totalMs: number;
  /** Whether the top hit was the file the query's function was taken from (another may define the same name). */
  topHitExpected: boolean;
  /** The workspace's first search: the object's hot index was built from R2 during it. */
  coldIndex: boolean;
}

export interface CloneFigures {
  files: number;
  chunks: number;
  ownerIndexMs: number;
  cliStartMs: number;
  runs: CloneRun[];
}

function timedCli(args: string[], env: Record<string, string>): [CliResult, number] {
  const started = performance.now();
  const result = sextant(args, env);
  const ms = performance.now() - started;
  if (result.code !== 0) throw new Error(`sextant ${args.join(" ")} exited ${result.code}: ${result.stderr}`);
  return [result, ms];
}

export async function runTeammateClone(count: number, clones = 5): Promise<CloneFigures> {
  const tree = generateCodeTree(join(tmpdir(), `sextant-bench-code-${count}`), count);
  const edge = await startLocalEdge();
  try {
    const { apiKey } = JSON.parse(readFileSync(join(edge.configDir, "local-edge.json"), "utf8")) as { apiKey: string };
    const owner = {
      SEXTANT_CONFIG_DIR: edge.configDir,
      SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-bench-cache-")),
    };
    const [indexed, ownerIndexMs] = timedCli(["--json", "index", tree.root], owner);
    const ownerReport = JSON.parse(indexed.stdout) as IndexReport;
    const key = timedCli(["key", "export", tree.root], owner)[0].stdout.trim();

    const floor: number[] = [];
    const runs: CloneRun[] = [];
    for (let i = 0; i < clones; i++) {
      floor.push(timedCli(["--version"], owner)[1]);
      // Each teammate asks about a different function, so no answer is served from a warm path.
      const target = (i * 7919 + 11) % tree.files.length;
      const query = tree.functions[target]!;
      const clone = mkdtempSync(join(tmpdir(), "sextant-bench-clone-"));
      cpSync(tree.root, clone, { recursive: true });
      const teammate = {
        SEXTANT_CONFIG_DIR: mkdtempSync(join(tmpdir(), "sextant-bench-teammate-")),
        SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-bench-cache-")),
        SEXTANT_BASE_URL: edge.baseURL,
        SEXTANT_API_KEY: apiKey,
      };

      const started = performance.now();
      const importMs = timedCli(["key", "import", key, clone], teammate)[1];
      const [index, indexMs] = timedCli(["--json", "index", clone], teammate);
      const report = JSON.parse(index.stdout) as IndexReport;
      let searchMs = 0;
      let searches = 0;
      let hits: LocalHit[] = [];
      for (;;) {
        const [search, ms] = timedCli(["--json", "search", query, clone, "-k", "5"], teammate);
        searchMs += ms;
        searches++;
        hits = JSON.parse(search.stdout) as LocalHit[];
        const top = hits[0];
        if (top && !top.stale && existsSync(join(clone, top.path))) break;
        if (performance.now() - started > 120_000) throw new Error(`no usable hit for ${query}: ${search.stdout}`);
      }
      runs.push({
        importMs,
        indexMs,
        scanMs: report.scanMs,
        syncMs: report.syncMs,
        roundTrips: report.sync.roundTrips,
        strategy: report.sync.strategy,
        chunksUploaded: report.sync.chunks,
        searchMs,
        searches,
        totalMs: performance.now() - started,
        topHitExpected: hits[0]!.path === tree.files[target],
        coldIndex: i === 0,
      });
      rmSync(clone, { recursive: true, force: true });
    }
    return {
      files: ownerReport.files,
      chunks: ownerReport.sync.chunks,
      ownerIndexMs,
      cliStartMs: median(floor),
      runs,
    };
  } finally {
    await edge.stop();
  }
}

export function reportTeammateClone(f: CloneFigures): string {
  const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const lines = [
    `teammate clone: ${f.files.toLocaleString("en-US")} files, ${f.chunks.toLocaleString("en-US")} chunks indexed by the owner in ${s(f.ownerIndexMs)}; each teammate runs key import, index and search as separate processes (starting one: ${s(f.cliStartMs)}, median)`,
    "teammate  total    key import  index (scan / sync, round trips, strategy)     chunks uploaded  search (tries)  top hit expected  hot index",
  ];
  f.runs.forEach((r, i) =>
    lines.push(
      `${String(i + 1).padStart(8)}  ${s(r.totalMs).padStart(7)}  ${s(r.importMs).padStart(10)}  ${`${s(r.indexMs)} (${s(r.scanMs)} / ${s(r.syncMs)}, ${r.roundTrips}, ${r.strategy})`.padEnd(46)} ${String(r.chunksUploaded).padStart(15)}  ${`${s(r.searchMs)} (${r.searches})`.padStart(14)}  ${(r.topHitExpected ? "yes" : "no").padEnd(16)}  ${r.coldIndex ? "built by this search" : "warm"}`,
    ),
  );
  const total = median(f.runs.map((r) => r.totalMs));
  lines.push(
    `  median from nothing to a search hit: ${s(total)}, of which starting three processes ${s(3 * f.cliStartMs)}; slowest ${s(Math.max(...f.runs.map((r) => r.totalMs)))}`,
  );
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 10_000);
  console.log(reportTeammateClone(await runTeammateClone(count, Number(process.env.BENCH_CLONES ?? 5))));
}
