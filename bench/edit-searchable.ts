/**
 * Edit to searchable under `sextant watch`: each save adds a function with a name made of words
 * that exist nowhere else, and the latency runs from the save until a search for those words (the
 * SDK's `searchWorkspace`, as `sextant search` runs it) ranks that file first with a snippet that
 * holds the new function and matches what was indexed. The watcher is the real CLI in its own
 * process, with its default debounce, as a user runs it beside an editor. Its sync events give the
 * other half of the breakdown: when the edge had the save, against when search returned it.
 *
 *   npx tsx bench/edit-searchable.ts              # 2,000-file workspace, 30 saves
 *   BENCH_FILES=10000 BENCH_SAVES=50 npx tsx bench/edit-searchable.ts
 */
import { spawn } from "node:child_process";
import { randomInt } from "node:crypto";
import { appendFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { LocalEdge as LocalEdgeFile, localEdgePath, readJsonFile } from "../client/cli/credentials.js";
import { Sextant } from "../client/sdk/client.js";
import { searchWorkspace } from "../client/workspace/search.js";
import { openWorkspace, type IndexReport } from "../client/workspace/session.js";
import { sextant as cli, startLocalEdge } from "../test/support/local-edge.js";
import { generateCodeTree, rng } from "./code-fixture.js";
import { fmt, quantile } from "./stats.js";

const BIN = new URL("../client/bin/sextant.js", import.meta.url).pathname;

export interface EditFigures {
  files: number;
  chunks: number;
  saves: number;
  debounceMs: number;
  /** Save to the edge holding it, as the watcher reported its sync. */
  synced: { p50: number; p95: number; max: number };
  /** Save to a search returning the new function first. */
  searchable: { p50: number; p95: number; max: number };
  /** One search round trip, the resolution of `searchable`. */
  searchMs: number;
}

/** Two consonants by sixteen vowels and codas: 32 syllables, so 6 of them carry 30 random bits. */
const SYLLABLES = ["z", "v"].flatMap((c) =>
  ["a", "e", "i", "o", "u", "y", "ae", "ou", "ar", "el", "ix", "om", "ut", "yn", "ep", "ob"].map((v) => c + v),
);

/**
 * A word no vocabulary has and no earlier save used: with 30 random bits, two saves share a word
 * about once in a billion, where a shared word would let an older save compete for the top hit.
 */
function inventedWord(random: (n: number) => number): string {
  const bits = random(2 ** 30);
  return Array.from({ length: 6 }, (_, k) => SYLLABLES[(bits >>> (5 * k)) & 31]!).join("");
}

const summary = (values: number[]) => ({
  p50: quantile(values, 0.5),
  p95: quantile(values, 0.95),
  max: Math.max(...values),
});

/** A function to append to `path`, in its language, named and documented with two invented words. */
function newFunction(path: string, random: (n: number) => number): { name: string; text: string; query: string } {
  const [noun, thing] = [inventedWord(random), inventedWord(random)];
  const query = `reconcile ${noun} ${thing}`;
  const doc = `Reconciles the ${noun} ${thing} entries against the ledger.`;
  if (path.endsWith(".py")) {
    const name = `reconcile_${noun}_${thing}`;
    const text = `\n\ndef ${name}(entries, limit=10):\n    """${doc}"""\n    return [e for e in entries if e.${noun}][:limit]\n`;
    return { name, text, query };
  }
  const name = `reconcile${noun[0]!.toUpperCase()}${noun.slice(1)}${thing[0]!.toUpperCase()}${thing.slice(1)}`;
  const text = `\n/** ${doc} */\nexport function ${name}(entries: { ${noun}: boolean }[], limit = 10) {\n  return entries.filter((e) => e.${noun}).slice(0, limit);\n}\n`;
  return { name, text, query };
}

/** `sextant --json watch` in its own process; records when each sync that changed something arrived. */
function startWatcher(root: string, env: Record<string, string>, debounceMs: number) {
  const child = spawn(process.execPath, [BIN, "--json", "watch", root, "--debounce", String(debounceMs)], {
    env: { ...process.env, ...env, SEXTANT_API_KEY: "", SEXTANT_BASE_URL: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const syncs: { at: number; changed: number }[] = [];
  let log = "";
  let buffer = "";
  child.stdout.on("data", (data) => {
    buffer += data;
    for (let nl; (nl = buffer.indexOf("\n")) >= 0; buffer = buffer.slice(nl + 1)) {
      const event = JSON.parse(buffer.slice(0, nl)) as { event: string; report?: IndexReport };
      if (event.event === "sync") syncs.push({ at: performance.now(), changed: event.report!.sync.changed });
    }
  });
  child.stderr.on("data", (data) => (log += data));
  return {
    syncs,
    async waitFor(done: () => boolean, what: string) {
      const deadline = performance.now() + 60_000;
      while (!done()) {
        if (performance.now() > deadline || child.exitCode !== null) throw new Error(`${what}; watcher: ${log}`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/**
 * `seed` draws the invented words from a seeded generator instead of the system's, so that a run
 * (the smoke test's) searches for the same words every time.
 */
export async function runEditSearchable(
  count: number,
  saves: number,
  debounceMs = 200,
  seed?: number,
): Promise<EditFigures> {
  const random = seed === undefined ? (n: number) => randomInt(n) : rng(seed).int;
  const tree = generateCodeTree(join(tmpdir(), `sextant-bench-edit-${count}`), count);
  const edge = await startLocalEdge();
  let watcher: ReturnType<typeof startWatcher> | undefined;
  // The tree is reused between runs: each save is undone at the end, so every run starts from the same files.
  const originals = new Map<string, Buffer>();
  try {
    const env = {
      SEXTANT_CONFIG_DIR: edge.configDir,
      SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-bench-cache-")),
    };
    Object.assign(process.env, env);
    const indexed = cli(["--json", "index", tree.root], env);
    if (indexed.code !== 0) throw new Error(`sextant index: ${indexed.stderr}`);
    const report = JSON.parse(indexed.stdout) as IndexReport;
    watcher = startWatcher(tree.root, env, debounceMs);
    const { syncs } = watcher;
    await watcher.waitFor(() => syncs.length > 0, "the watcher never synced at start");

    const apiKey = (await readJsonFile(localEdgePath(), LocalEdgeFile))!.apiKey;
    const sextant = new Sextant({ apiKey, baseURL: edge.baseURL });
    const ws = await openWorkspace(sextant, tree.root);
    // The first search builds the object's hot index from R2: a one-time cost, not an edit's.
    await searchWorkspace(sextant, ws, tree.functions[0]!);

    const searchable: number[] = [];
    const synced: number[] = [];
    const searchTimes: number[] = [];
    for (let i = 0; i < saves; i++) {
      const path = tree.files[(i * 7919 + 3) % tree.files.length]!;
      const { name, text, query } = newFunction(path, random);
      if (!originals.has(path)) originals.set(path, readFileSync(join(tree.root, path)));
      const before = syncs.length;
      const savedAt = performance.now();
      appendFileSync(join(tree.root, path), text);
      for (;;) {
        const asked = performance.now();
        const { hits } = await searchWorkspace(sextant, ws, query, { topK: 3 });
        const answered = performance.now();
        searchTimes.push(answered - asked);
        const top = hits[0];
        if (top && top.path === path && !top.stale && top.snippet.includes(name)) {
          searchable.push(answered - savedAt);
          break;
        }
        if (answered - savedAt > 60_000) {
          const seen = hits.map((h) => `${h.path}:${h.startLine}-${h.endLine}${h.stale ? " stale" : ""}`);
          const after = syncs.slice(before).map((s) => s.changed);
          throw new Error(
            `save ${i} (${name} in ${path}) never became searchable; hits ${seen.join(", ")}; syncs since, files changed: ${after.join(", ")}`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const landed = () => syncs.slice(before).find((s) => s.changed > 0);
      await watcher.waitFor(() => landed() !== undefined, `save ${i} never synced`);
      synced.push(landed()!.at - savedAt);
      // A pause between saves, so each is a sync of its own rather than part of a burst.
      await new Promise((resolve) => setTimeout(resolve, debounceMs + 300));
    }
    return {
      files: report.files,
      chunks: report.sync.chunks,
      saves,
      debounceMs,
      synced: summary(synced),
      searchable: summary(searchable),
      searchMs: quantile(searchTimes, 0.5),
    };
  } finally {
    await watcher?.stop();
    for (const [path, content] of originals) writeFileSync(join(tree.root, path), content);
    await edge.stop();
  }
}

export function reportEditSearchable(f: EditFigures): string {
  const line = (s: { p50: number; p95: number; max: number }) =>
    `p50 ${fmt(s.p50)} ms, p95 ${fmt(s.p95)} ms, max ${fmt(s.max)} ms`;
  return [
    `edit to searchable under sextant watch (debounce ${f.debounceMs} ms), ${f.files.toLocaleString("en-US")}-file workspace (${f.chunks.toLocaleString("en-US")} chunks), ${f.saves} saves`,
    `  save to top search hit: ${line(f.searchable)} (one search: ${fmt(f.searchMs)} ms, median)`,
    `  save to edge (the watcher's sync): ${line(f.synced)}`,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const count = Number(process.env.BENCH_FILES ?? 2000);
  const saves = Number(process.env.BENCH_SAVES ?? 30);
  console.log(reportEditSearchable(await runEditSearchable(count, saves)));
}
