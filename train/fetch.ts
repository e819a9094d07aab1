import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { extractDeb, fetchDeb } from "../eval/debian.js";
import { extractTarball, fetchTarball, matchesIntegrity } from "../eval/fetch.js";
import type { LanguageGroup, PackageList } from "./package-list.js";

/** A pinned package unpacked on disk, with where its source is. */
export interface FetchedPackage {
  name: string;
  version: string;
  language: LanguageGroup;
  dir: string;
  /** Folders inside `dir` holding its source; undefined: guess it from the files (npm). */
  roots?: readonly string[];
}

export interface FetchOptions {
  /** Downloads, kept between runs. */
  cacheDir: string;
  /** Unpacked packages, kept between runs. */
  srcDir: string;
  concurrency: number;
  log: (line: string) => void;
}

export interface FetchResult {
  fetched: FetchedPackage[];
  failed: { name: string; reason: string }[];
}

const folderName = (name: string, version: string) => `${name.replace("/", "+")}@${version.replace(/:/g, "%3a")}`;

/**
 * Unpacks `archive` into `dir` unless a marker beside it says this exact archive (by its pinned
 * digest) is already there: a rerun unpacks nothing.
 */
async function unpackOnce(dir: string, pin: string, unpack: () => Promise<void>): Promise<void> {
  const marker = `${dir}.done`;
  if (existsSync(marker) && readFileSync(marker, "utf8") === pin) return;
  await unpack();
  writeFileSync(marker, pin);
}

/**
 * Every pinned package, downloaded (or found in the cache) and checked against its pinned digest,
 * then unpacked; several at a time. A package that fails (gone from the registry, a changed
 * archive) is named and skipped, so one bad pin never costs the whole run.
 */
export async function fetchPackages(list: PackageList, options: FetchOptions): Promise<FetchResult> {
  const jobs: (() => Promise<FetchedPackage>)[] = [
    ...list.npm.map((p) => async () => {
      const dir = join(options.srcDir, "npm", folderName(p.name, p.version));
      await unpackOnce(dir, p.integrity, async () => {
        const cached = join(options.cacheDir, `${p.name.replace("/", "+")}-${p.version}.tgz`);
        const file =
          existsSync(cached) && matchesIntegrity(readFileSync(cached), p.integrity)
            ? cached
            : await fetchTarball(p.name, p.version, options.cacheDir);
        // The registry's own integrity was checked; the pin must match it too, or the package changed.
        if (!matchesIntegrity(readFileSync(file), p.integrity)) throw new Error("does not match the pinned integrity");
        await extractTarball(file, dir);
      });
      return { name: p.name, version: p.version, language: "javascript" as const, dir };
    }),
    ...list.debian.map((p) => async () => {
      const dir = join(options.srcDir, "debian", folderName(p.name, p.version));
      await unpackOnce(dir, p.sha256, async () => {
        const file = await fetchDeb({ ...p, exclude: [] }, options.cacheDir);
        await extractDeb(file, dir);
      });
      return { name: p.name, version: p.version, language: p.language, dir, roots: p.roots };
    }),
  ];
  const names = [...list.npm, ...list.debian].map((p) => `${p.name}@${p.version}`);
  const results: (FetchedPackage | undefined)[] = new Array(jobs.length);
  const failed: FetchResult["failed"] = [];
  let next = 0;
  let done = 0;
  const worker = async () => {
    for (let i = next++; i < jobs.length; i = next++) {
      try {
        results[i] = await jobs[i]!();
      } catch (err) {
        failed.push({ name: names[i]!, reason: err instanceof Error ? err.message.split("\n")[0]! : String(err) });
        options.log(`fetch ${names[i]}: skipped (${failed.at(-1)!.reason})`);
      }
      if (++done % 250 === 0) options.log(`fetched ${done}/${jobs.length} packages`);
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  failed.sort((a, b) => a.name.localeCompare(b.name));
  return { fetched: results.filter((r): r is FetchedPackage => r !== undefined), failed };
}
