import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { DebianPackage } from "./packages.js";
import { tarballCacheDir } from "./fetch.js";

const run = promisify(execFile);

const sha256 = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");

/** `name_version_arch.deb`, as apt names it (an epoch's colon written `%3a`). */
const debPrefix = (pkg: Pick<DebianPackage, "name" | "version">) => `${pkg.name}_${pkg.version.replace(/:/g, "%3a")}_`;

const findDeb = (dir: string, pkg: DebianPackage) =>
  readdirSync(dir).find((f) => f.startsWith(debPrefix(pkg)) && f.endsWith(".deb"));

/**
 * The .deb of a pinned Debian package, from the cache or `apt-get download name=version` (which
 * needs no root), checked against its pinned SHA-256 either way: a changed download is refused.
 */
export async function fetchDeb(pkg: DebianPackage, cacheDir = tarballCacheDir()): Promise<string> {
  mkdirSync(cacheDir, { recursive: true });
  const cached = findDeb(cacheDir, pkg);
  if (cached && sha256(join(cacheDir, cached)) === pkg.sha256) return join(cacheDir, cached);
  const partial = mkdtempSync(join(cacheDir, `${pkg.name}.partial-`));
  try {
    await run("apt-get", ["download", `${pkg.name}=${pkg.version}`], { cwd: partial, timeout: 300_000 });
    const file = findDeb(partial, pkg);
    if (!file) throw new Error(`apt-get download ${pkg.name}=${pkg.version} wrote no ${debPrefix(pkg)}*.deb`);
    const digest = sha256(join(partial, file));
    if (digest !== pkg.sha256)
      throw new Error(`${pkg.name}=${pkg.version}: the .deb's SHA-256 is ${digest}, not the pinned ${pkg.sha256}`);
    renameSync(join(partial, file), join(cacheDir, file));
    return join(cacheDir, file);
  } finally {
    rmSync(partial, { recursive: true, force: true });
  }
}

/** Unpacks a .deb's files into `dest` (`dpkg-deb -x`: no maintainer scripts run, nothing installed). */
export async function extractDeb(file: string, dest: string): Promise<void> {
  rmSync(dest, { recursive: true, force: true });
  mkdirSync(dest, { recursive: true });
  await run("dpkg-deb", ["-x", file, dest], { timeout: 120_000 });
}
