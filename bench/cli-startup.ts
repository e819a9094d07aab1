/**
 * What the `sextant` CLI costs to start, as a user runs it: each run is a fresh process of the real
 * bin, and its CPU (user + system, all threads) comes from `process.resourceUsage()` read in an exit
 * handler that a preloaded module installs, so the figure is the child's own. Against baselines from
 * the same run, interleaved with it:
 *
 * - `node -e 0`: what any Node process costs, which `--version`'s CPU is given as a multiple of (at
 *   most 2x is the goal: `--version` answers before the rest of the CLI loads);
 * - `sextant --version` from source through tsx, as the bin ran before the bundle;
 * - the search's HTTP call alone: the same request (path, headers, body) sent with `fetch` from a
 *   fresh Node process, so `sextant search` minus it is what the CLI adds to the call.
 *
 * The search runs against a local edge (`npm start`'s script) and a generated workspace indexed by
 * the bundled CLI itself, which also checks that the bundle's chunker finds its `.wasm` files.
 *
 *   npm run bench:cli                 # 20 runs of each, 200-file workspace
 *   BENCH_RUNS=50 npm run bench:cli
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { LocalEdge as LocalEdgeFile, localEdgePath, readJsonFile } from "../client/cli/credentials.js";
import { Sextant } from "../client/sdk/client.js";
import { openWorkspace } from "../client/workspace/session.js";
import { SYNC_PROTOCOL, VECTOR_KEY_HEADER } from "../protocol/sync.js";
import { buildCli } from "../scripts/build-cli.js";
import { startLocalEdge } from "../test/support/local-edge.js";
import { generateCodeTree } from "./code-fixture.js";
import { fmt, median } from "./stats.js";

const ROOT = new URL("../", import.meta.url).pathname;
const BIN = join(ROOT, "client/bin/sextant.js");
/** tsx's loader by URL: the runs' working directory is outside the checkout. */
const TSX = import.meta.resolve("tsx");
const QUERY = "remove the expired entries from the cache";
/** The first words of the bin's notice that it runs the source because the bundle is missing or stale. */
const STALE_NOTICE = "sextant: client/dist is missing or older than the source";
/** `--version`'s CPU as a multiple of `node -e 0`'s, and the search's CPU beyond its HTTP call, in ms. */
const CPU_GOAL = { versionRatio: 2, searchOverhead: 250 } as const;

export interface Cost {
  /** Medians over the runs, in milliseconds. */
  cpuMs: number;
  wallMs: number;
}

export interface CliStartupFigures {
  runs: number;
  files: number;
  node: Cost;
  version: Cost;
  versionFromSource: Cost;
  search: Cost;
  httpCall: Cost;
}

/** Records the process's own CPU when it exits, whatever ends it (`process.exit` included). */
const PRELOAD = `import { writeFileSync } from "node:fs";
process.on("exit", () => {
  const u = process.resourceUsage();
  writeFileSync(process.env.BENCH_RUSAGE_FILE, String((u.userCPUTime + u.systemCPUTime) / 1000));
});
`;

/** The search request as `searchWorkspace` sends it, sent once with `fetch` from a fresh process. */
const FETCH_ONCE = `const { url, headers, body } = JSON.parse(process.env.BENCH_REQUEST);
const res = await fetch(url, { method: "POST", headers, body });
await res.text();
if (!res.ok) process.exitCode = 1;
`;

export async function runCliStartup(runs = 20, files = 200): Promise<CliStartupFigures> {
  await buildCli();
  const scratch = mkdtempSync(join(tmpdir(), "sextant-cli-bench-"));
  const preload = join(scratch, "rusage.mjs");
  const usageFile = join(scratch, "rusage");
  const fetchScript = join(scratch, "fetch-once.mjs");
  writeFileSync(preload, PRELOAD);
  writeFileSync(fetchScript, FETCH_ONCE);
  const edge = await startLocalEdge();
  try {
    const env: Record<string, string> = {
      ...(process.env as Record<string, string>),
      SEXTANT_API_KEY: "",
      SEXTANT_BASE_URL: "",
      SEXTANT_CONFIG_DIR: edge.configDir,
      SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-bench-cache-")),
    };
    const measure = async (
      args: string[],
      extraEnv: Record<string, string> = {},
    ): Promise<Cost & { stdout: string }> => {
      rmSync(usageFile, { force: true });
      const started = performance.now();
      const run = spawnSync(process.execPath, ["--import", pathToFileURL(preload).href, ...args], {
        cwd: scratch,
        env: { ...env, ...extraEnv, BENCH_RUSAGE_FILE: usageFile },
        encoding: "utf8",
        maxBuffer: 64 * 2 ** 20,
      });
      const wallMs = performance.now() - started;
      // A source file edited since the build makes the bin fall back to tsx, which is not what is measured.
      if (run.stderr.startsWith(STALE_NOTICE)) {
        await buildCli();
        return measure(args, extraEnv);
      }
      // Any other notice on stderr (the bin falling back to tsx) means the bundle was not what ran.
      if (run.status !== 0 || run.stderr) {
        throw new Error(`node ${args.join(" ")} exited ${run.status}:\n${run.stdout}${run.stderr}`);
      }
      return { cpuMs: Number(readFileSync(usageFile, "utf8")), wallMs, stdout: run.stdout };
    };

    const dir = join(scratch, "repo");
    generateCodeTree(dir, files);
    await measure([BIN, "index", dir]);
    // The same request as the CLI's search: its workspace, vector key, key and body.
    process.env.SEXTANT_CONFIG_DIR = edge.configDir;
    const apiKey = (await readJsonFile(localEdgePath(), LocalEdgeFile))!.apiKey;
    const ws = await openWorkspace(new Sextant({ apiKey, baseURL: edge.baseURL }), dir);
    const request = JSON.stringify({
      url: `${edge.baseURL}/v1/workspaces/${encodeURIComponent(ws.entry.workspaceId)}/search`,
      headers: {
        Authorization: `Bearer ${apiKey}`,
        "Content-Type": "application/json",
        [VECTOR_KEY_HEADER]: ws.secret.vectorKey,
      },
      body: JSON.stringify({ protocol: SYNC_PROTOCOL, query: QUERY, topK: 10 }),
    });

    const samples: Record<Exclude<keyof CliStartupFigures, "runs" | "files">, Cost[]> = {
      node: [],
      version: [],
      versionFromSource: [],
      search: [],
      httpCall: [],
    };
    for (let i = 0; i < runs; i++) {
      // `--version` and its baseline take turns leading, so neither always follows the other's spawn.
      const pair = [
        async () => samples.node.push(await measure(["-e", "0"])),
        async () => samples.version.push(await measure([BIN, "--version"])),
      ];
      for (const step of i % 2 ? pair.reverse() : pair) await step();
      samples.versionFromSource.push(await measure(["--import", TSX, join(ROOT, "client/cli/entry.ts"), "--version"]));
      const search = await measure([BIN, "search", QUERY, dir, "-k", "10"]);
      if (!search.stdout.trim()) throw new Error("sextant search printed no hits");
      samples.search.push(search);
      samples.httpCall.push(await measure([fetchScript], { BENCH_REQUEST: request }));
    }
    const summary = (costs: Cost[]): Cost => ({
      cpuMs: median(costs.map((c) => c.cpuMs)),
      wallMs: median(costs.map((c) => c.wallMs)),
    });
    return {
      runs,
      files,
      node: summary(samples.node),
      version: summary(samples.version),
      versionFromSource: summary(samples.versionFromSource),
      search: summary(samples.search),
      httpCall: summary(samples.httpCall),
    };
  } finally {
    await edge.stop();
    rmSync(scratch, { recursive: true, force: true });
  }
}

export function reportCliStartup(f: CliStartupFigures): string {
  const row = (name: string, c: Cost) => `| ${name} | ${fmt(c.cpuMs)} | ${fmt(c.wallMs)} |`;
  const overhead = {
    cpuMs: f.search.cpuMs - f.httpCall.cpuMs,
    wallMs: f.search.wallMs - f.httpCall.wallMs,
  };
  return [
    `CLI start-up: medians of ${f.runs} runs, each a fresh process; search over a ${f.files}-file workspace`,
    "",
    "| run | CPU ms | wall ms |",
    "| --- | --- | --- |",
    row("`node -e 0`", f.node),
    row("`sextant --version`", f.version),
    row("`sextant --version` from source (tsx)", f.versionFromSource),
    row("the search's HTTP call alone (`fetch`)", f.httpCall),
    row("`sextant search`", f.search),
    "",
    `version: ${fmt(f.version.cpuMs)} ms CPU, ${(f.version.cpuMs / f.node.cpuMs).toFixed(2)}x \`node -e 0\`'s ${fmt(f.node.cpuMs)} ms in the same runs (goal ≤ ${CPU_GOAL.versionRatio}x), ${fmt(f.version.cpuMs - f.node.cpuMs)} ms over it`,
    `search overhead over the HTTP call: ${fmt(overhead.cpuMs)} ms CPU (goal ≤ ${CPU_GOAL.searchOverhead}), ${fmt(overhead.wallMs)} ms wall`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  const figures = await runCliStartup(Number(process.env.BENCH_RUNS ?? 20), Number(process.env.BENCH_FILES ?? 200));
  console.log(reportCliStartup(figures));
}
