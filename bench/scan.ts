/**
 * Warm and cold scans of a generated tree against git on the same tree, in the same run:
 * - cold: no stat cache, every file read and hashed, the Merkle tree built; against `git add -A`
 *   into a fresh index (which also reads and hashes every file);
 * - warm: the state loaded, every file stat'ed, nothing read, the tree reused; against
 *   `git status` right after that `git add -A` (which stats every file against its index).
 *
 *   npx tsx bench/scan.ts                  # 100,000 files
 *   BENCH_FILES=20000 npx tsx bench/scan.ts
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { StatPrefetch } from "../client/workspace/prefetch.js";
import { scanLocal } from "../client/workspace/session.js";
import { WorkspaceSecret } from "../client/workspace/secret.js";
import { emptyState, loadState, removeState, saveState } from "../client/workspace/state.js";
import { fmt, median, timed } from "./stats.js";
import { offlineWorkspace } from "./offline-workspace.js";
import { generateTree } from "./tree-fixture.js";

export interface ScanFigures {
  files: number;
  coldMs: number;
  warmMs: number;
  gitAddMs: number;
  gitStatusMs: number;
}

function git(root: string, home: string, args: string[]): number {
  const started = performance.now();
  const result = spawnSync("git", args, {
    cwd: root,
    env: { ...process.env, HOME: home, XDG_CONFIG_HOME: home, GIT_CONFIG_NOSYSTEM: "1" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  if (result.status !== 0) throw new Error(`git ${args.join(" ")}: ${result.stderr}`);
  return performance.now() - started;
}

export async function runScanBench(count: number, runs = { cold: 3, warm: 15 }): Promise<ScanFigures> {
  const { root } = generateTree(join(tmpdir(), `sextant-bench-tree-${count}`), count);
  const home = mkdtempSync(join(tmpdir(), "sextant-bench-home-"));
  process.env.SEXTANT_CACHE_DIR = mkdtempSync(join(tmpdir(), "sextant-bench-cache-"));
  const ws = offlineWorkspace(root);
  const { secret } = ws;

  // git and sextant runs alternate, so both see the same machine: on a shared machine, timings
  // drift by a quarter from minute to minute, and back-to-back blocks would measure the drift.
  const gitAdd: number[] = [];
  const cold: number[] = [];
  for (let i = 0; i < runs.cold; i++) {
    rmSync(join(root, ".git"), { recursive: true, force: true });
    git(root, home, ["init", "-q"]);
    gitAdd.push(git(root, home, ["add", "-A"]));
    await removeState(ws.stateKey);
    const fresh = new WorkspaceSecret(secret.bytes);
    const [, ms] = await timed(async () => scanLocal({ ...ws, secret: fresh }, emptyState()));
    cold.push(ms);
  }
  const state = emptyState();
  const scan = await scanLocal(ws, state);
  // Let the racily-clean window pass, as it has for any file saved more than a moment ago.
  await new Promise((resolve) => setTimeout(resolve, 50));
  await saveState(ws.stateKey, { ...state, startedAt: Date.now() });

  const gitStatus: number[] = [];
  const warm: number[] = [];
  for (let i = 0; i < runs.warm; i++) {
    gitStatus.push(git(root, home, ["status", "--porcelain"]));
    const fresh = new WorkspaceSecret(secret.bytes);
    // As `sextant status` does: threads start while the state loads.
    const [result, ms] = await timed(async () => {
      StatPrefetch.prepare();
      return scanLocal({ ...ws, secret: fresh }, await loadState(ws.stateKey));
    });
    if (result.scan.hashed !== 0 || result.tree.root !== scan.tree.root) throw new Error("a warm scan re-read files");
    warm.push(ms);
    // Each run pays for starting its threads, as a fresh `sextant status` process does.
    await StatPrefetch.shutdown();
  }
  return {
    files: scan.scan.files.size,
    coldMs: median(cold),
    warmMs: median(warm),
    gitAddMs: median(gitAdd),
    gitStatusMs: median(gitStatus),
  };
}

export function reportScan(f: ScanFigures): string {
  return [
    `scan of ${f.files.toLocaleString("en-US")} files (medians)`,
    `  cold: sextant ${fmt(f.coldMs)} ms   git add -A (fresh index) ${fmt(f.gitAddMs)} ms   ratio ${(f.coldMs / f.gitAddMs).toFixed(2)}x`,
    `  warm: sextant ${fmt(f.warmMs)} ms   git status               ${fmt(f.gitStatusMs)} ms   ratio ${(f.warmMs / f.gitStatusMs).toFixed(2)}x`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 100_000);
  console.log(reportScan(await runScanBench(count)));
}
