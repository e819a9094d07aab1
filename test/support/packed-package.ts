import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import { lstatSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const ROOT = new URL("../../", import.meta.url).pathname;

interface LockEntry {
  version?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  [field: string]: unknown;
}

export interface Manifest extends LockEntry {
  name: string;
  version: string;
}

/**
 * npm's environment without what a parent npm (`npm test`) passes its children, which would
 * otherwise apply to the user's project: its workspace, its prefix, its scripts' settings. The cache
 * and registry stay the user's.
 */
export function npmEnv(): NodeJS.ProcessEnv {
  const keep = new Set(["npm_config_cache", "npm_config_registry", "npm_config_userconfig"]);
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => k !== "NODE_OPTIONS" && (!k.startsWith("npm_") || keep.has(k))),
  );
}

export function run(command: string, args: string[], cwd: string, timeout = 120_000): SpawnSyncReturns<string> {
  const result = spawnSync(command, args, { cwd, env: npmEnv(), encoding: "utf8", timeout, maxBuffer: 64 * 2 ** 20 });
  if (result.error) throw result.error;
  return result;
}

/** `npm pack` of a package into `dest`, as a publisher packs it (its `prepack` included); the tarball's path. */
export function pack(args: string[], cwd: string, dest: string): string {
  mkdirSync(dest, { recursive: true });
  const packed = run("npm", ["pack", ...args, "--pack-destination", dest], cwd, 300_000);
  if (packed.status !== 0) throw new Error(`npm pack ${args.join(" ")} failed:\n${packed.stdout}${packed.stderr}`);
  const tarballs = readdirSync(dest).filter((name) => name.endsWith(".tgz"));
  if (tarballs.length !== 1) throw new Error(`npm pack left ${tarballs.length} tarballs in ${dest}`);
  return join(dest, tarballs[0]!);
}

/** The folder holding a lockfile path's node_modules: `node_modules/a/node_modules/b` → `node_modules/a`. */
const parentOf = (path: string) => {
  const at = path.lastIndexOf("/node_modules/");
  return at < 0 ? "" : path.slice(0, at);
};

/**
 * The lockfile entries a package's dependencies resolve to in `lock`, found as Node finds them (the
 * nearest node_modules up from the dependent) and followed to their own dependencies and required
 * peers.
 */
export function dependencyClosure(lock: Record<string, LockEntry>, manifest: LockEntry): Record<string, LockEntry> {
  const found: Record<string, LockEntry> = {};
  const needs = (entry: LockEntry) => [
    ...Object.keys(entry.dependencies ?? {}),
    ...Object.keys(entry.optionalDependencies ?? {}),
    ...Object.keys(entry.peerDependencies ?? {}).filter((p) => !entry.peerDependenciesMeta?.[p]?.optional),
  ];
  const visit = (from: string, name: string) => {
    for (let dir = from; ; dir = parentOf(dir)) {
      const path = `${dir ? `${dir}/` : ""}node_modules/${name}`;
      const entry = lock[path];
      if (entry) {
        if (found[path]) return;
        // The user's project has no development side: every entry is one of its production packages.
        const { dev: _dev, devOptional: _devOptional, peer: _peer, ...rest } = entry;
        found[path] = rest;
        for (const dep of needs(entry)) visit(path, dep);
        return;
      }
      if (!dir) throw new Error(`${name} is not in the lockfile`);
    }
  };
  for (const dep of needs(manifest)) visit("", dep);
  return found;
}

/**
 * A new project in `dir` that depends on `tarball` alone, installed with `npm ci --offline`: a
 * lockfile pins the package's dependencies to the versions of `lockfile`'s tree, whose tarballs the
 * npm cache holds since that tree was installed. (Resolving the package's ranges would need the
 * registry's metadata, which installing from a lockfile never fetched.)
 */
export function installOffline(tarball: string, manifest: Manifest, lockfile: string, dir: string): void {
  mkdirSync(dir, { recursive: true });
  const lock = (JSON.parse(readFileSync(lockfile, "utf8")) as { packages: Record<string, LockEntry> }).packages;
  const spec = `file:${tarball}`;
  const dependencies = { [manifest.name]: spec };
  const own: LockEntry = { version: manifest.version, resolved: spec };
  for (const field of [
    "license",
    "dependencies",
    "optionalDependencies",
    "peerDependencies",
    "peerDependenciesMeta",
    "bin",
    "engines",
  ])
    if (manifest[field] !== undefined) own[field] = manifest[field];
  const packages: Record<string, LockEntry> = {
    "": { name: "user-project", dependencies },
    [`node_modules/${manifest.name}`]: own,
  };
  Object.assign(packages, dependencyClosure(lock, manifest));
  writeFileSync(
    join(dir, "package.json"),
    JSON.stringify({ name: "user-project", private: true, type: "module", dependencies }, null, 2),
  );
  writeFileSync(
    join(dir, "package-lock.json"),
    JSON.stringify({ name: "user-project", lockfileVersion: 3, requires: true, packages }, null, 2),
  );
  const installed = run("npm", ["ci", "--offline", "--ignore-scripts", "--no-audit", "--no-fund"], dir, 300_000);
  if (installed.status !== 0) throw new Error(`npm ci --offline failed:\n${installed.stdout}${installed.stderr}`);
}

/** The bytes of every file under `dir`, links not followed. */
export function bytesUnder(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true }))
    if (entry.isFile()) total += lstatSync(join(entry.parentPath, entry.name)).size;
  return total;
}

/** Every package installed under `dir/node_modules`, at any depth, by name. */
export function installedPackages(dir: string): string[] {
  const names = new Set<string>();
  for (const entry of readdirSync(join(dir, "node_modules"), { recursive: true, withFileTypes: true }))
    if (entry.isFile() && entry.name === "package.json") {
      const rel = join(entry.parentPath, entry.name)
        .slice(dir.length + 1)
        .split("/");
      const at = rel.lastIndexOf("node_modules");
      // A package's own package.json sits right below node_modules (or its @scope); deeper ones are its files.
      const scoped = rel[at + 1]?.startsWith("@");
      if (rel.length === at + (scoped ? 4 : 3)) names.add(scoped ? `${rel[at + 1]}/${rel[at + 2]}` : rel[at + 1]!);
    }
  return [...names].sort();
}
