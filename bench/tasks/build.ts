/**
 * `npm run bench:tasks`: builds the eval task set from bench/tasks/defs/*.json. Each def names a
 * pinned source package (npm tarball or Debian source, by version and SHA-256), a mutation of one of
 * its functions, an issue-style statement and the package's own test command; each is fetched,
 * mutated and written as a Harbor task directory under `<out>/<split>/<id>` (write.ts), then checked
 * on the host: the reference solution passes the package's tests and the mutated tree fails them.
 * A def that cannot be built is skipped with its reason; the rest still build.
 *
 *   npm run bench:tasks -- [--out bench/tasks/out] [--only id1,id2] [--sample N] [--no-check] [--cache dir]
 *
 * Held-out split: in each ecosystem (npm, debian), the HELD_OUT_PER_ECOSYSTEM defs whose id has the
 * smallest SHA-256 (lowercase hex, compared as text), among every def in the defs folder that
 * parses. The rule reads ids alone (not packages, difficulty or any result), so the split was fixed
 * before any model ran on a task. A def's own `split` must agree with the rule, and the build skips
 * one that does not: a new def that would move the split is seen, not silently taken.
 */
import { createHash } from "node:crypto";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { isHeldOut } from "../../eval/packages.js";
import { tarballCacheDir } from "../../eval/fetch.js";
import { DEFS_DIR, DefRefused, readDefs, type TaskDef } from "./def.js";
import { fetchNpmSource, placeNpmPackage } from "./npm.js";
import { writeTask } from "./write.js";

export const HELD_OUT_PER_ECOSYSTEM = 5;

const idHash = (id: string) => createHash("sha256").update(id).digest("hex");

/** The split of each def by the held-out rule (this file's header). */
export function splitOf(defs: readonly TaskDef[]): Map<string, "train" | "heldout"> {
  const out = new Map<string, "train" | "heldout">();
  for (const ecosystem of ["npm", "debian"] as const) {
    const ids = defs
      .filter((d) => d.source.ecosystem === ecosystem)
      .map((d) => d.id)
      .sort((a, b) => (idHash(a) < idHash(b) ? -1 : idHash(a) > idHash(b) ? 1 : 0));
    ids.forEach((id, i) => out.set(id, i < HELD_OUT_PER_ECOSYSTEM ? "heldout" : "train"));
  }
  return out;
}

type DebianFetcher = (pkg: string, version: string, sha256: string, cacheDir: string) => Promise<string>;

/** debian.ts's fetcher, or undefined where that file is not there. */
async function debianFetcher(): Promise<DebianFetcher | undefined> {
  // A specifier in a variable: the build runs whether or not debian.ts is in the tree.
  const specifier = "./debian.js";
  try {
    const mod = (await import(specifier)) as { fetchDebianSource?: DebianFetcher };
    return mod.fetchDebianSource;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ERR_MODULE_NOT_FOUND") return undefined;
    throw err;
  }
}

export interface BuildArgs {
  out: string;
  defsDir: string;
  only?: string[];
  sample?: number;
  check: boolean;
  cacheDir: string;
  log?: (line: string) => void;
}

export async function buildTasks(args: BuildArgs): Promise<{ built: string[]; skipped: string[] }> {
  const log = args.log ?? console.log;
  const loaded = readDefs(args.defsDir);
  const splits = splitOf(loaded.flatMap((l) => (l.def ? [l.def] : [])));
  let chosen = loaded;
  const built: string[] = [];
  const skipped: string[] = [];
  const skip = (id: string, why: string) => {
    skipped.push(id);
    log(`skipped ${id}: ${why}`);
  };
  if (args.only) {
    const only = new Set(args.only);
    for (const id of only) if (!loaded.some((l) => l.id === id)) skip(id, "no such def");
    chosen = chosen.filter((l) => only.has(l.id));
  }
  if (args.sample !== undefined) chosen = chosen.slice(0, args.sample);

  const sources = new Map<string, Promise<string>>();
  const sourceOf = (def: TaskDef, fetch: DebianFetcher | typeof fetchNpmSource) => {
    const { ecosystem, package: pkg, version, sha256 } = def.source;
    const key = `${ecosystem}:${pkg}@${version}:${sha256}`;
    if (!sources.has(key))
      sources.set(key, fetch(pkg, version, sha256, join(args.cacheDir, ecosystem === "npm" ? "" : "debian")));
    return sources.get(key)!;
  };
  let debian: DebianFetcher | undefined | null = null;

  for (const l of chosen) {
    const started = performance.now();
    if (!l.def) {
      skip(l.id, l.error ?? "not a def");
      continue;
    }
    const def = l.def;
    const split = splits.get(def.id)!;
    if (isHeldOut(def.source.package)) {
      skip(def.id, `${def.source.package} is reserved (HELD-OUT.md) and never made into a task`);
      continue;
    }
    if (def.split !== split) {
      skip(def.id, `its split is ${def.split}, and the held-out rule (build.ts) makes it ${split}`);
      continue;
    }
    let fetch: DebianFetcher | typeof fetchNpmSource = fetchNpmSource;
    if (def.source.ecosystem === "debian") {
      if (debian === null) debian = await debianFetcher();
      if (!debian) {
        skip(def.id, "debian fetcher missing");
        continue;
      }
      fetch = debian;
    }
    try {
      const source = await sourceOf(def, fetch);
      const task = await writeTask(def, source, {
        out: args.out,
        split,
        check: args.check,
        placeRunner: (name, version, tree) => placeNpmPackage(name, version, tree, args.cacheDir),
      });
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      const checked = args.check ? `${task.expected} passing solved; mutated: ${task.mutated}` : "not checked";
      log(
        `built   ${def.id} [${split}] ${def.source.package}@${def.source.version}, ${task.files} files: ${checked} (${seconds} s)`,
      );
      built.push(def.id);
    } catch (err) {
      skip(def.id, err instanceof DefRefused ? err.message : `${(err as Error).message.split("\n")[0]}`);
    }
  }
  return { built, skipped };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      out: { type: "string", default: join(import.meta.dirname, "out") },
      defs: { type: "string", default: DEFS_DIR },
      only: { type: "string" },
      sample: { type: "string" },
      "no-check": { type: "boolean", default: false },
      cache: { type: "string", default: join(dirname(tarballCacheDir()), "tasks") },
    },
  });
  const sample = values.sample === undefined ? undefined : Number(values.sample);
  if (sample !== undefined && !(Number.isInteger(sample) && sample > 0)) {
    console.error("--sample must be a positive integer.");
    process.exit(2);
  }
  const started = performance.now();
  const { built, skipped } = await buildTasks({
    out: resolve(values.out),
    defsDir: resolve(values.defs),
    ...(values.only
      ? {
          only: values.only
            .split(",")
            .map((s) => s.trim())
            .filter(Boolean),
        }
      : {}),
    ...(sample !== undefined ? { sample } : {}),
    check: !values["no-check"],
    cacheDir: resolve(values.cache),
  });
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(`built ${built.length}, skipped ${skipped.length} (${seconds} s, into ${resolve(values.out)})`);
  process.exit(built.length > 0 ? 0 : 1);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
