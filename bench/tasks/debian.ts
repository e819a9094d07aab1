/**
 * Debian source packages for the task set: a task's source is the upstream `.orig.tar.*` of one
 * Debian source package version, pinned by that version and by the tarball's SHA-256.
 *
 * apt does the fetching, from the mirror this machine's own apt sources name for bookworm, through a
 * private configuration (its own sources list, index lists and download cache under the cache folder)
 * so that nothing of the host's apt state is read or changed: `apt-get update` checks the suite's
 * signed Release against Debian's keyring and the source index against it, and `apt-get source
 * --tar-only` checks the tarball against the index. The pin is checked on top of that, on download
 * and on every read from the cache, so a tarball that changed in the archive is refused.
 *
 * The tree is the orig tarball alone, without Debian's patches: the def pins that tarball and nothing
 * else, so the tree is exactly what the pin names (and what upstream released).
 */
import { execFile } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { fileSha256 } from "./npm.js";

const run = promisify(execFile);

/** The release the tasks' sources come from: the sandboxes' own system is bookworm. */
export const SUITE = "bookworm";

/** Where Debian's source packages are fetched from: one `deb-src` line's worth. */
export interface DebianArchive {
  uri: string;
  suite: string;
  /** The keyring the suite's Release must be signed with. */
  signedBy?: string;
  /** An unsigned archive (a local one a test makes): apt's `trusted=yes`. */
  trusted?: boolean;
}

/** One entry of an apt sources file, in either format. */
interface SourceEntry {
  types: string[];
  uris: string[];
  suites: string[];
  components: string[];
  signedBy?: string;
}

/** The entries of a deb822 `.sources` file (stanzas of `Field: value`; `#` lines are comments). */
function deb822Entries(text: string): SourceEntry[] {
  const entries: SourceEntry[] = [];
  for (const stanza of text.split(/\n\s*\n/)) {
    const fields = new Map<string, string>();
    let last: string | undefined;
    for (const line of stanza.split("\n")) {
      if (line.startsWith("#") || !line.trim()) continue;
      if (/^\s/.test(line) && last) fields.set(last, `${fields.get(last)} ${line.trim()}`);
      else {
        const m = /^([A-Za-z-]+):\s*(.*)$/.exec(line);
        if (!m) continue;
        last = m[1]!.toLowerCase();
        fields.set(last, m[2]!.trim());
      }
    }
    if (fields.get("enabled")?.toLowerCase() === "no") continue;
    const words = (name: string) => (fields.get(name) ?? "").split(/\s+/).filter(Boolean);
    const signedBy = fields.get("signed-by");
    entries.push({
      types: words("types"),
      uris: words("uris"),
      suites: words("suites"),
      components: words("components"),
      // An inline key block is not a path apt could be pointed at again.
      ...(signedBy && !signedBy.includes("BEGIN PGP") ? { signedBy } : {}),
    });
  }
  return entries;
}

/** The entries of a one-line `sources.list` (`deb [options] uri suite components…`). */
function oneLineEntries(text: string): SourceEntry[] {
  const entries: SourceEntry[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.replace(/#.*$/, "").trim();
    const m = /^(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)$/.exec(line);
    if (!m) continue;
    const signedBy = /(?:^|\s)signed-by=(\S+)/.exec(m[2] ?? "")?.[1];
    entries.push({
      types: [m[1]!],
      uris: [m[3]!],
      suites: [m[4]!],
      components: m[5]!.split(/\s+/).filter(Boolean),
      ...(signedBy ? { signedBy } : {}),
    });
  }
  return entries;
}

/**
 * The archive of the first entry, among apt sources files' texts (`name` ends in `.sources` for
 * deb822, else one-line), that serves `suite`'s main component: the mirror this machine already uses.
 */
export function archiveFromSources(
  files: readonly { name: string; text: string }[],
  suite = SUITE,
): DebianArchive | undefined {
  for (const file of files) {
    const entries = file.name.endsWith(".sources") ? deb822Entries(file.text) : oneLineEntries(file.text);
    for (const entry of entries) {
      const serves =
        entry.types.some((t) => t === "deb" || t === "deb-src") &&
        entry.suites.includes(suite) &&
        entry.components.includes("main");
      const uri = entry.uris[0];
      if (serves && uri) return { uri, suite, ...(entry.signedBy ? { signedBy: entry.signedBy } : {}) };
    }
  }
  return undefined;
}

/** The host's own apt sources (`/etc/apt/sources.list` and `sources.list.d/`), in apt's order. */
export function hostArchive(etc = "/etc/apt"): DebianArchive {
  const files: { name: string; text: string }[] = [];
  const read = (path: string, name: string) => {
    try {
      files.push({ name, text: readFileSync(path, "utf8") });
    } catch {
      // Not there: the other files may still name a mirror.
    }
  };
  read(join(etc, "sources.list"), "sources.list");
  let parts: string[] = [];
  try {
    parts = readdirSync(join(etc, "sources.list.d")).sort();
  } catch {
    parts = [];
  }
  for (const name of parts)
    if (name.endsWith(".list") || name.endsWith(".sources")) read(join(etc, "sources.list.d", name), name);
  const archive = archiveFromSources(files);
  if (!archive)
    throw new Error(`No apt source under ${etc} serves Debian ${SUITE} main: the Debian tasks' sources come from it`);
  return archive;
}

/** A package name and version as a file name (an epoch's colon written `%3a`, as apt writes it). */
function fileStem(pkg: string, version: string): string {
  if (!/^[a-z0-9][a-z0-9+.-]+$/.test(pkg)) throw new Error(`${pkg} is not a Debian source package name`);
  if (!/^(?:\d+:)?[0-9][A-Za-z0-9.+~-]*$/.test(version)) throw new Error(`${version} is not a Debian version`);
  return `${pkg}_${version.replace(/:/g, "%3a")}`;
}

/** The upstream tarball among a source package's files: `<pkg>_<upstream>.orig.tar.<ext>` (not a component's). */
const isOrig = (name: string) => /^[^_]+_[^_]+\.orig\.tar\.[a-z0-9]+$/.test(name);

/** apt's settings for the private configuration under `root`. */
function aptOptions(root: string): string[] {
  const options = {
    "Dir::Etc::SourceList": join(root, "sources.list"),
    "Dir::Etc::SourceParts": join(root, "sources.list.d"),
    "Dir::State::Lists": join(root, "lists"),
    "Dir::Cache": join(root, "cache"),
    // Downloads go into folders this process owns, so apt's own download user would be refused them.
    "APT::Sandbox::User": userInfo().username,
  };
  return Object.entries(options).flatMap(([k, v]) => ["-o", `${k}=${v}`]);
}

function writeAptConfig(root: string, archive: DebianArchive): void {
  for (const dir of ["sources.list.d", "lists/partial", "cache/archives/partial"])
    mkdirSync(join(root, dir), { recursive: true });
  const options = archive.trusted ? "trusted=yes" : archive.signedBy ? `signed-by=${archive.signedBy}` : "";
  writeFileSync(
    join(root, "sources.list"),
    `deb-src ${options ? `[${options}] ` : ""}${archive.uri} ${archive.suite} main\n`,
  );
}

/** One `apt-get update` per private configuration and process: the index is needed only on a cache miss. */
const updated = new Map<string, Promise<void>>();

async function apt(args: string[], cwd: string, timeout: number): Promise<void> {
  try {
    await run("apt-get", args, { cwd, timeout, maxBuffer: 16 * 2 ** 20 });
  } catch (err) {
    const e = err as { code?: string; stderr?: string; message: string };
    if (e.code === "ENOENT")
      throw new Error("apt-get is not on this machine: the Debian tasks' sources are fetched with it");
    const said = (e.stderr ?? "").split("\n").filter((l) => l.startsWith("E: "));
    throw new Error(
      `apt-get ${args.filter((a) => !a.includes("=") && a !== "-o").join(" ")}: ${said.join(" ") || e.message}`,
    );
  }
}

/** Downloads `pkg=version`'s orig tarball into `dir` with apt and returns its path there. */
async function download(
  pkg: string,
  version: string,
  dir: string,
  cacheDir: string,
  archive: DebianArchive,
): Promise<string> {
  const root = join(cacheDir, "apt");
  const key = `${root}\n${JSON.stringify(archive)}`;
  if (!updated.has(key)) {
    writeAptConfig(root, archive);
    const update = apt([...aptOptions(root), "update"], root, 300_000);
    update.catch(() => updated.delete(key));
    updated.set(key, update);
  }
  await updated.get(key);
  const partial = mkdtempSync(join(dir, ".partial-"));
  try {
    await apt(
      [...aptOptions(root), "source", "--download-only", "--tar-only", "--only-source", `${pkg}=${version}`],
      partial,
      600_000,
    );
    const origs = readdirSync(partial).filter(isOrig);
    if (origs.length !== 1)
      throw new Error(
        `${pkg}=${version}: apt-get source fetched ${origs.length} upstream tarballs (${readdirSync(partial).join(", ")}), not one`,
      );
    // A copy, not a move: from a `file:` archive apt leaves a link to the archive's own file.
    copyFileSync(join(partial, origs[0]!), join(dir, origs[0]!));
    return join(dir, origs[0]!);
  } finally {
    rmSync(partial, { recursive: true, force: true });
  }
}

/**
 * Leaves only folders and regular files under `dir`, each writable by its owner: a link has no
 * place in a task (its archive leaves links out), and the build writes the mutation into a copy.
 */
function keepPlainFiles(dir: string): void {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const stat = lstatSync(path);
    if (stat.isDirectory()) {
      chmodSync(path, stat.mode | 0o700);
      keepPlainFiles(path);
    } else if (stat.isFile()) chmodSync(path, stat.mode | 0o600);
    else rmSync(path, { force: true });
  }
}

/** Unpacks a source tarball into `dest`, without its top folder when it has exactly one (as orig tarballs do). */
async function unpack(file: string, dest: string): Promise<void> {
  rmSync(dest, { recursive: true, force: true });
  const staging = `${dest}.partial`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  try {
    // GNU tar reads each compression Debian uses (gz, xz, bz2) by itself.
    await run("tar", ["-xf", file, "-C", staging, "--no-same-owner"], { timeout: 300_000 });
    keepPlainFiles(staging);
    const top = readdirSync(staging);
    const root = top.length === 1 && lstatSync(join(staging, top[0]!)).isDirectory() ? join(staging, top[0]!) : staging;
    renameSync(root, dest);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/**
 * The upstream source of Debian source package `pkg` at `version`, unpacked (without its top folder)
 * into a fresh folder under `cacheDir`, after the orig tarball's bytes are checked against `sha256`.
 * The tarball is kept in `cacheDir` and read from there while it still matches the pin; the folder is
 * unpacked again on every call (the caller copies from it and never writes to it).
 */
export async function fetchDebianSource(
  pkg: string,
  version: string,
  sha256: string,
  cacheDir: string,
  archive?: DebianArchive,
): Promise<string> {
  const stem = fileStem(pkg, version);
  const dir = join(cacheDir, stem);
  mkdirSync(dir, { recursive: true });
  let orig = readdirSync(dir)
    .filter(isOrig)
    .map((name) => join(dir, name))
    .find((file) => fileSha256(file) === sha256);
  if (!orig) {
    for (const name of readdirSync(dir).filter(isOrig)) rmSync(join(dir, name), { force: true });
    const file = await download(pkg, version, dir, cacheDir, archive ?? hostArchive());
    const digest = fileSha256(file);
    if (digest !== sha256) {
      rmSync(file, { force: true });
      throw new Error(`${pkg}=${version}: the orig tarball's SHA-256 is ${digest}, not the pinned ${sha256}`);
    }
    orig = file;
  }
  const dest = join(cacheDir, "src", stem);
  mkdirSync(join(cacheDir, "src"), { recursive: true });
  await unpack(orig, dest);
  return dest;
}
