/**
 * npm tarballs for the task set: a task's source package, pinned by version and by the SHA-256 of
 * its tarball, and the packages placed in its tree's node_modules (a test runner and what it needs),
 * pinned by version. Each tarball is checked against the registry's sha512 integrity (eval/fetch.ts)
 * on download and when read from the cache.
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { extractTarball, fetchTarball } from "../../eval/fetch.js";

/** The lowercase hex SHA-256 of a file's bytes. */
export const fileSha256 = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");

/**
 * `pkg@version`'s tarball, unpacked (without its top folder) into a fresh folder under `cacheDir`,
 * after its bytes are checked against `sha256`. The folder is unpacked again on every call: the
 * caller copies from it and never writes to it, but a stale one is not trusted.
 */
export async function fetchNpmSource(pkg: string, version: string, sha256: string, cacheDir: string): Promise<string> {
  const file = await fetchTarball(pkg, version, join(cacheDir, "npm"));
  const digest = fileSha256(file);
  if (digest !== sha256)
    throw new Error(`${pkg}@${version}: the tarball's SHA-256 is ${digest}, not the pinned ${sha256}`);
  const dest = join(cacheDir, "src", "npm", `${pkg.replace("/", "+")}@${version}`);
  await extractTarball(file, dest);
  return dest;
}

/** Unpacks `name@version` into `<tree>/node_modules/<name>` (replacing what was there). */
export async function placeNpmPackage(name: string, version: string, tree: string, cacheDir: string): Promise<void> {
  const file = await fetchTarball(name, version, join(cacheDir, "npm"));
  const dest = join(tree, "node_modules", name);
  mkdirSync(join(dest, ".."), { recursive: true });
  await extractTarball(file, dest);
}
