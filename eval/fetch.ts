import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import envPaths from "env-paths";
import { x as extractTar } from "tar";
import { z } from "zod";

/** The part of a registry version document the eval relies on. */
const VersionDocument = z.object({
  name: z.string(),
  version: z.string(),
  dist: z.object({ tarball: z.url(), integrity: z.string() }),
});

/** Where tarballs are kept between runs: the registry is asked only for what is not there yet. */
export function tarballCacheDir(): string {
  return join(envPaths("sextant", { suffix: "" }).cache, "eval");
}

/** The registry npm itself uses (`npm run` exports it), else the public one. */
function registryBase(): string {
  const configured = process.env.npm_config_registry || "https://registry.npmjs.org/";
  return configured.endsWith("/") ? configured : `${configured}/`;
}

/** Whether `bytes` match an SRI string's sha512 entry; a document without one is refused. */
export function matchesIntegrity(bytes: Buffer, integrity: string): boolean {
  const expected = integrity
    .split(/\s+/)
    .filter((entry) => entry.startsWith("sha512-"))
    .map((entry) => entry.slice("sha512-".length).split("?")[0]);
  if (expected.length === 0) throw new Error(`No sha512 integrity to check the tarball against: ${integrity}`);
  return expected.includes(createHash("sha512").update(bytes).digest("base64"));
}

async function fetchOk(url: string): Promise<Response> {
  const response = await fetch(url, { signal: AbortSignal.timeout(120_000) });
  if (!response.ok) throw new Error(`GET ${url}: ${response.status} ${response.statusText}`);
  return response;
}

/**
 * The tarball of `name@version`, from the cache or the registry, checked against the registry's
 * sha512 integrity either way (a cached file is not trusted more than a download).
 */
export async function fetchTarball(name: string, version: string, cacheDir = tarballCacheDir()): Promise<string> {
  const url = `${registryBase()}${name.replace("/", "%2f")}/${encodeURIComponent(version)}`;
  const doc = VersionDocument.parse(await (await fetchOk(url)).json());
  const file = join(cacheDir, `${name.replace("/", "+")}-${version}.tgz`);
  try {
    if (matchesIntegrity(readFileSync(file), doc.dist.integrity)) return file;
  } catch {
    // Not cached yet.
  }
  const bytes = Buffer.from(await (await fetchOk(doc.dist.tarball)).arrayBuffer());
  if (!matchesIntegrity(bytes, doc.dist.integrity))
    throw new Error(`${name}@${version}: the tarball does not match the registry's integrity ${doc.dist.integrity}`);
  mkdirSync(cacheDir, { recursive: true });
  const partial = `${file}.${process.pid}.partial`;
  writeFileSync(partial, bytes);
  renameSync(partial, file);
  return file;
}

/**
 * Unpacks a package tarball into `dest`, without its top folder (usually `package/`, but not
 * always). Only regular files: a link in a tarball has nothing to say to a code search.
 */
export async function extractTarball(file: string, dest: string): Promise<void> {
  rmSync(dest, { recursive: true, force: true });
  mkdirSync(dest, { recursive: true });
  await extractTar({ file, cwd: dest, strip: 1, filter: (_path, entry) => "type" in entry && entry.type === "File" });
}
