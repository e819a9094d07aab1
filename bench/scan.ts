/**
 * Warm and cold scans of a generated tree against git on the same tree, in the same run:
 * - cold: no stat cache, every file read and hashed, the Merkle tree built; against
 *   `git hash-object --stdin-paths` fed the scan's file list, which reads and hashes every file
 *   and writes nothing (`git add -A` would also compress and write an object per file);
 * - warm: the state loaded, every file and directory stat'ed, nothing read, the tree reused;
 *   against `git status` with the same files committed and its untracked cache on, which stats
 *   every file against its index and every directory against the cache, and reads none.
 *
 *   npx tsx bench/scan.ts                  # 100,000 files
 *   BENCH_FILES=20000 npx tsx bench/scan.ts
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
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
  runs: { cold: number; warm: number };
  gitVersion: string;
  coldMs: number;
  warmMs: number;
  gitHashMs: number;
  gitStatusMs: number;
}

function git(root: string, home: string, args: string[], input?: string): { ms: number; stdout: string } {
  const started = performance.now();
  const result = spawnSync("git", args, {
    cwd: root,
    env: { ...process.env, HOME: home, XDG_CONFIG_HOME: home, GIT_CONFIG_NOSYSTEM: "1" },
    input,
    encoding: "utf8",
    maxBuffer: 256 * 2 ** 20,
    stdio: ["pipe", "pipe", "pipe"],
  });
  const ms = performance.now() - started;
  if (result.status !== 0) throw new Error(`git ${args.join(" ")}: ${result.stderr}`);
  return { ms, stdout: result.stdout };
}

export async function runScanBench(count: number, runs = { cold: 3, warm: 15 }): Promise<ScanFigures> {
  const { root } = generateTree(join(tmpdir(), `sextant-bench-tree-${count}`), count);
  const home = mkdtempSync(join(tmpdir(), "sextant-bench-home-"));
  process.env.SEXTANT_CACHE_DIR = mkdtempSync(join(tmpdir(), "sextant-bench-cache-"));
  const ws = offlineWorkspace(root);
  const { secret } = ws;
  const gitVersion = git(root, home, ["--version"])
    .stdout.trim()
    .replace(/^git version /, "");

  // A commit of the tree for the warm baseline, made before anything is timed: with the index and
  // HEAD both holding every file, `git status` stats each and has nothing to report, as a warm
  // scan of an unchanged tree does (with no commit it would list every file as added).
  rmSync(join(root, ".git"), { recursive: true, force: true });
  git(root, home, ["init", "-q"]);
  git(root, home, ["add", "-A"]);
  git(root, home, ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "tree"]);
  // A warm scan stats each directory and lists again only those whose mtime moved; git does the
  // same with its untracked cache, and reads every directory without it.
  git(root, home, ["config", "core.untrackedCache", "true"]);
  git(root, home, ["status", "--porcelain"]);
  // Untimed: the same pages cached for every timed run on either side, and the file list git hashes.
  const first = await scanLocal(ws, emptyState());
  const list = first.scan.files.paths.join("\n") + "\n";

  // git and sextant runs alternate, each leading in turn, so both see the same machine: on a shared
  // machine, timings drift by a quarter from minute to minute, and back-to-back blocks would
  // measure the drift.
  const gitHash: number[] = [];
  const cold: number[] = [];
  const coldScan = async () => {
    await removeState(ws.stateKey);
    const fresh = new WorkspaceSecret(secret.bytes);
    const [result, ms] = await timed(async () => scanLocal({ ...ws, secret: fresh }, emptyState()));
    if (result.tree.root !== first.tree.root) throw new Error("a cold scan built another tree");
    cold.push(ms);
  };
  const hashObjects = () => {
    const { ms, stdout } = git(root, home, ["hash-object", "--stdin-paths"], list);
    const hashed = stdout.split("\n").filter(Boolean).length;
    if (hashed !== first.scan.files.size) throw new Error(`git hashed ${hashed} files of ${first.scan.files.size}`);
    gitHash.push(ms);
  };
  for (let i = 0; i < runs.cold; i++) {
    if (i % 2 === 0) {
      hashObjects();
      await coldScan();
    } else {
      await coldScan();
      hashObjects();
    }
  }
  const state = emptyState();
  const scan = await scanLocal(ws, state);
  // Let the racily-clean window pass, as it has for any file saved more than a moment ago.
  await new Promise((resolve) => setTimeout(resolve, 50));
  await saveState(ws.stateKey, { ...state, startedAt: Date.now() });

  const gitStatus: number[] = [];
  const warm: number[] = [];
  const warmScan = async () => {
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
  };
  const status = () => {
    const { ms, stdout } = git(root, home, ["status", "--porcelain"]);
    // The same files as the index holds: a clean tree, so git stats them all and reads none.
    if (stdout !== "") throw new Error(`git status found changes: ${stdout.slice(0, 200)}`);
    gitStatus.push(ms);
  };
  for (let i = 0; i < runs.warm; i++) {
    if (i % 2 === 0) {
      status();
      await warmScan();
    } else {
      await warmScan();
      status();
    }
  }
  return {
    files: scan.scan.files.size,
    runs,
    gitVersion,
    coldMs: median(cold),
    warmMs: median(warm),
    gitHashMs: median(gitHash),
    gitStatusMs: median(gitStatus),
  };
}

export function reportScan(f: ScanFigures): string {
  return [
    `scan of ${f.files.toLocaleString("en-US")} files (medians)`,
    `  cold: sextant ${fmt(f.coldMs)} ms   git hash-object --stdin-paths ${fmt(f.gitHashMs)} ms   ratio ${(f.coldMs / f.gitHashMs).toFixed(2)}x`,
    `  warm: sextant ${fmt(f.warmMs)} ms   git status (untracked cache)  ${fmt(f.gitStatusMs)} ms   ratio ${(f.warmMs / f.gitStatusMs).toFixed(2)}x`,
    `  settings: ${f.files.toLocaleString("en-US")} files of 100 to 2,000 bytes, ${f.runs.cold} cold and ${f.runs.warm} warm runs each side, alternating with git (each leading in turn) after one untimed scan; git ${f.gitVersion}, no system or user config, the tree committed, core.untrackedCache on; ${cpus().length} cores, Node ${process.versions.node}`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 100_000);
  console.log(reportScan(await runScanBench(count)));
}
