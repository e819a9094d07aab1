/**
 * `npm run train:data`: the training pairs for the built-in embedder, reproducibly. Fetches the
 * pinned packages of `train/packages.json`, fingerprints the held-out packages (HELD-OUT.md's and
 * the dev eval's) so their copies can be dropped by content as well as by name, and mines one
 * (question, comment-free code) pair from each documented definition, exactly as the eval draws
 * its queries. Writes `pairs.jsonl` (deterministically shuffled) and `data-stats.json`.
 *
 *   npm run train:data -- [--workdir <dir>] [--limit-packages N] [--languages javascript,python,go,rust]
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import envPaths from "env-paths";
import { isExcludedFromTraining } from "./exclusions.js";
import { fetchPackages } from "./fetch.js";
import {
  deserializeFingerprints,
  FINGERPRINT_FORMAT,
  serializeFingerprints,
  type Fingerprints,
} from "./fingerprint.js";
import { heldOutFingerprints } from "./held-out.js";
import { LANGUAGE_GROUPS, loadPackageList, type LanguageGroup, type PackageList } from "./package-list.js";
import { mineInPool } from "./pool.js";
import { assemble, type DataStats } from "./stats.js";
import { MAX_PAIRS_PER_PACKAGE } from "./mine.js";

export interface PrepareDataOptions {
  /** Downloads, unpacked packages and outputs; default `<cache>/sextant/train`. */
  workdir?: string;
  /** A smoke run: this many packages, taken in turn from each language. */
  limitPackages?: number;
  languages?: readonly LanguageGroup[];
  /** Mining threads; default 2 (or 1 on a single core). */
  threads?: number;
  packages?: PackageList;
  log?: (line: string) => void;
}

export interface PreparedData {
  pairsPath: string;
  statsPath: string;
  stats: DataStats;
}

export const defaultWorkdir = () => join(envPaths("sextant", { suffix: "" }).cache, "train");

const registry = () => {
  const configured = process.env.npm_config_registry || "https://registry.npmjs.org/";
  return configured.endsWith("/") ? configured : `${configured}/`;
};

/** The pinned packages to use: excluded names out (again), the chosen languages, a smoke run's share. */
function choosePackages(list: PackageList, options: PrepareDataOptions) {
  const languages = new Set(options.languages ?? LANGUAGE_GROUPS);
  const excluded = [...list.npm, ...list.debian].filter((p) => isExcludedFromTraining(p.name)).map((p) => p.name);
  let npm = languages.has("javascript") ? list.npm.filter((p) => !isExcludedFromTraining(p.name)) : [];
  let debian = list.debian.filter((p) => languages.has(p.language) && !isExcludedFromTraining(p.name));
  if (options.limitPackages !== undefined) {
    const groups = [npm, ...(["python", "go", "rust"] as const).map((l) => debian.filter((p) => p.language === l))];
    const taken = new Set<object>();
    for (let i = 0; taken.size < options.limitPackages && groups.some((g) => i < g.length); i++)
      for (const g of groups) if (i < g.length && taken.size < options.limitPackages) taken.add(g[i]!);
    npm = npm.filter((p) => taken.has(p));
    debian = debian.filter((p) => taken.has(p));
  }
  return { chosen: { npm, debian }, excluded };
}

/** Digests of the held-out packages, computed once per workdir (they are hashes, never the text). */
async function loadFingerprints(workdir: string, log: (line: string) => void) {
  const file = join(workdir, "held-out-fingerprints.json");
  if (existsSync(file)) {
    const cached = JSON.parse(readFileSync(file, "utf8"));
    if (cached.format === FINGERPRINT_FORMAT)
      return { fingerprints: deserializeFingerprints(cached.digests), sources: cached.sources, failed: cached.failed };
  }
  const computed = await heldOutFingerprints(registry(), log);
  const { fingerprints, sources, failed } = computed;
  const digests = serializeFingerprints(fingerprints);
  writeFileSync(file, JSON.stringify({ format: FINGERPRINT_FORMAT, sources, failed, digests }) + "\n");
  return computed as { fingerprints: Fingerprints; sources: unknown[]; failed: string[] };
}

export async function prepareData(options: PrepareDataOptions = {}): Promise<PreparedData> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const workdir = resolve(options.workdir ?? defaultWorkdir());
  mkdirSync(workdir, { recursive: true });
  const started = Date.now();
  const { chosen, excluded } = choosePackages(options.packages ?? loadPackageList(), options);
  log(`${chosen.npm.length} npm and ${chosen.debian.length} Debian packages; ${excluded.length} excluded by name`);

  const fetched = await fetchPackages(chosen, {
    cacheDir: join(workdir, "downloads"),
    srcDir: join(workdir, "src"),
    concurrency: 8,
    log,
  });
  const fetchSeconds = (Date.now() - started) / 1000;
  log(`fetched ${fetched.fetched.length}, failed ${fetched.failed.length} in ${fetchSeconds.toFixed(0)} s`);

  const held = await loadFingerprints(workdir, log);
  const fingerprintSeconds = (Date.now() - started) / 1000 - fetchSeconds;

  const threads = options.threads ?? Math.min(2, availableParallelism());
  const tasks = fetched.fetched.map((p) => ({
    name: p.name,
    dir: p.dir,
    ...(p.roots ? { roots: p.roots } : {}),
    maxPairs: MAX_PAIRS_PER_PACKAGE,
  }));
  const mineStarted = Date.now();
  const mined = await mineInPool(tasks, held.fingerprints, threads, (done, result, task, error) => {
    if (error) log(`mine ${task.name}: failed (${error})`);
    if (done % 200 === 0 || done === tasks.length)
      log(`mined ${done}/${tasks.length} packages (${((Date.now() - mineStarted) / 1000).toFixed(0)} s)`);
  });

  const { lines, stats } = assemble({
    fetched: fetched.fetched,
    mined,
    failed: fetched.failed,
    excludedByName: excluded,
    heldOut: { sources: held.sources, failed: held.failed },
    seconds: {
      fetch: fetchSeconds,
      fingerprint: fingerprintSeconds,
      mine: (Date.now() - mineStarted) / 1000,
      total: (Date.now() - started) / 1000,
    },
  });
  const pairsPath = join(workdir, "pairs.jsonl");
  const statsPath = join(workdir, "data-stats.json");
  writeFileSync(pairsPath, lines.join(""));
  writeFileSync(statsPath, JSON.stringify(stats, null, 2) + "\n");
  return { pairsPath, statsPath, stats };
}

function main(): Promise<void> {
  const { values: args } = parseArgs({
    options: {
      workdir: { type: "string" },
      "limit-packages": { type: "string" },
      languages: { type: "string" },
      threads: { type: "string" },
    },
  });
  const limit = args["limit-packages"] === undefined ? undefined : Number(args["limit-packages"]);
  if (limit !== undefined && !(Number.isInteger(limit) && limit > 0))
    throw new Error("--limit-packages must be a positive integer.");
  const languages = args.languages?.split(",").map((l) => l.trim());
  const unknown = languages?.find((l) => !(LANGUAGE_GROUPS as readonly string[]).includes(l));
  if (unknown) throw new Error(`--languages: ${unknown} is not one of ${LANGUAGE_GROUPS.join(", ")}.`);
  return prepareData({
    ...(args.workdir ? { workdir: args.workdir } : {}),
    ...(limit !== undefined ? { limitPackages: limit } : {}),
    ...(languages ? { languages: languages as LanguageGroup[] } : {}),
    ...(args.threads ? { threads: Number(args.threads) } : {}),
  }).then(({ pairsPath, statsPath, stats }) => {
    const languages = Object.entries(stats.pairs.byLanguage).map(([l, n]) => `${n} ${l}`);
    process.stdout.write(
      `${stats.pairs.total} pairs (${languages.join(", ")}) from ${stats.packages.withPairs} packages ` +
        `in ${stats.seconds.total.toFixed(0)} s; ${stats.packages.failed.length} failed to fetch, ` +
        `${stats.droppedByContent.files} files and ${stats.droppedByContent.pairs} pairs dropped by content.\n` +
        `${pairsPath}\n${statsPath}\n`,
    );
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href)
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
