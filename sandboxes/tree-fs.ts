/**
 * A sandbox's tree as the host touches it: every path is walked one component at a time from a
 * handle on the tree's root (`/proc/self/fd/N/name`, Node's stand-in for `openat(2)`), each component
 * opened with `O_NOFOLLOW`, so a symlink swapped in between a check and a use cannot redirect the
 * host: there is no check apart from the use. A symlink met on the way is followed by this code, not
 * the kernel, and only while it stays inside the tree. Files open with `O_NONBLOCK` and are refused
 * unless they are regular files, so a FIFO or a device never holds one of the host's threads; files
 * are replaced by rename, never written through, so a hard link cannot carry a write out of the tree;
 * and as root, a file the sandbox's user does not own is not read (a hard link to a host file).
 */
import { constants as C } from "node:fs";
import { lstat, mkdir, open, readdir, readlink, rename, rm, type FileHandle } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import type { Stats } from "node:fs";

export class TreeError extends Error {
  constructor(
    readonly code:
      | "not_found"
      | "is_directory"
      | "not_directory"
      | "outside_tree"
      | "not_regular"
      | "too_large"
      | "exists",
    message: string,
  ) {
    super(message);
  }
}

/** Symlinks followed in one path at most, as the kernel's own limit (ELOOP past it). */
const MAX_HOPS = 40;
const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
const READ_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK;
const at = (dir: FileHandle, name: string) => `/proc/self/fd/${dir.fd}/${name}`;

export interface TreeFsOptions {
  /** The tree's own path on the host (a directory no task can replace: the host made its parent). */
  root: string;
  /** The sandbox's uid, as root: what the host writes is given to it, and only what it owns is read. */
  owner?: number | undefined;
  /** Where the tree appears inside the sandbox: an absolute symlink under it points into the tree. */
  mountedAt?: string;
}

interface Located {
  /** The directory holding the entry, open. */
  dir: FileHandle;
  name: string;
  /** The entry's path from the tree's root, symlinks resolved. */
  path: string[];
}

export class TreeFs {
  readonly #root: string;
  readonly #owner: number | undefined;
  readonly #mountedAt: string;

  constructor(options: TreeFsOptions) {
    this.#root = options.root.replace(/\/+$/, "");
    this.#owner = options.owner;
    this.#mountedAt = options.mountedAt ?? "/workspace";
  }

  /**
   * Opens the directory that holds `path`'s last component, following in-tree symlinks on the way;
   * with `create`, missing directories are made (and given to the sandbox's user).
   */
  async #locate(path: string, create: boolean, hops = { left: MAX_HOPS }, whole = false): Promise<Located> {
    const pending = split(path);
    let name = whole ? undefined : pending.pop();
    if (name === "..") {
      pending.push(name);
      name = undefined;
    }
    const stack: FileHandle[] = [await open(this.#root, DIR_FLAGS)];
    const names: string[] = [];
    const close = () => Promise.all(stack.map((h) => h.close().catch(() => undefined)));
    try {
      while (pending.length > 0) {
        const part = pending.shift()!;
        if (part === "..") {
          if (stack.length === 1) throw new TreeError("outside_tree", `${path} leads outside the tree.`);
          await stack.pop()!.close();
          names.pop();
          continue;
        }
        const parent = stack[stack.length - 1]!;
        let child: FileHandle | undefined;
        try {
          child = await open(at(parent, part), DIR_FLAGS);
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === "ENOENT" && create) {
            await mkdir(at(parent, part), { mode: 0o755 }).catch((e: NodeJS.ErrnoException) => {
              if (e.code !== "EEXIST") throw e;
            });
            child = await open(at(parent, part), DIR_FLAGS).catch(() => undefined);
            if (child) await this.#give(child);
          } else if (code === "ELOOP" || code === "ENOTDIR") {
            const target = await this.#link(parent, part, path, hops);
            if (target) {
              // The link's target replaces it: absolute ones restart from the root.
              if (target.absolute) {
                await Promise.all(stack.splice(1).map((h) => h.close()));
                names.length = 0;
              }
              pending.unshift(...target.parts);
              continue;
            }
            throw new TreeError("not_directory", `${[...names, part].join("/")} is not a directory.`);
          } else if (code === "ENOENT") {
            throw new TreeError("not_found", `${path} does not exist.`);
          } else throw err;
          if (!child) throw new TreeError("not_found", `${path} does not exist.`);
        }
        stack.push(child);
        names.push(part);
      }
    } catch (err) {
      await close();
      throw err;
    }
    const dir = stack.pop()!;
    await close();
    return { dir, name: name ?? ".", path: name && name !== "." ? [...names, name] : names };
  }

  /** Where a symlink points, as tree components, or undefined when the entry is no symlink. */
  async #link(
    dir: FileHandle,
    name: string,
    path: string,
    hops: { left: number },
  ): Promise<{ absolute: boolean; parts: string[] } | undefined> {
    const info = await lstat(at(dir, name)).catch(() => undefined);
    if (!info?.isSymbolicLink()) return undefined;
    if (--hops.left < 0) throw new TreeError("outside_tree", `${path} goes through too many symlinks.`);
    const target = await readlink(at(dir, name));
    if (!target.startsWith("/")) return { absolute: false, parts: split(target) };
    for (const prefix of [this.#mountedAt, this.#root])
      if (target === prefix || target.startsWith(`${prefix}/`))
        return { absolute: true, parts: split(target.slice(prefix.length)) };
    throw new TreeError("outside_tree", `${path} leads outside the tree through a symlink.`);
  }

  async #give(handle: FileHandle): Promise<void> {
    if (this.#owner !== undefined) await handle.chown(this.#owner, this.#owner);
  }

  /** Opens `path` for reading, following in-tree symlinks; refused unless a regular file (or a directory, with `dirs`). */
  async #openRead(path: string, hops = { left: MAX_HOPS }): Promise<{ handle: FileHandle; info: Stats }> {
    const { dir, name } = await this.#locate(path, false, hops);
    try {
      if (name === ".") throw new TreeError("is_directory", `${path} is a directory.`);
      let handle: FileHandle;
      try {
        handle = await open(at(dir, name), READ_FLAGS);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "ENOENT") throw new TreeError("not_found", `${path} does not exist.`);
        if (code !== "ELOOP") throw err;
        const target = await this.#link(dir, name, path, hops);
        if (!target) throw err;
        const prefix = target.absolute ? [] : await this.#pathOf(dir);
        return this.#openRead(join([...prefix, ...target.parts]), hops);
      }
      const info = await handle.stat();
      let refused: TreeError | undefined;
      if (info.isDirectory()) refused = new TreeError("is_directory", `${path} is a directory.`);
      else if (!info.isFile())
        refused = new TreeError("not_regular", `${path} is not a regular file (a FIFO, socket or device).`);
      else if (this.#owner !== undefined && info.uid !== this.#owner)
        refused = new TreeError("outside_tree", `${path} belongs to another user (a link to a file outside the tree).`);
      if (!refused) return { handle, info };
      await handle.close();
      throw refused;
    } finally {
      await dir.close();
    }
  }

  /** The tree path of an open directory (the host's real path, less the root's). */
  async #pathOf(dir: FileHandle): Promise<string[]> {
    const real = await readlink(`/proc/self/fd/${dir.fd}`);
    const root = await this.#realRoot();
    if (real !== root && !real.startsWith(`${root}/`))
      throw new TreeError("outside_tree", "A directory left the tree.");
    return split(real.slice(root.length));
  }

  #realRootCache: string | undefined;
  async #realRoot(): Promise<string> {
    if (this.#realRootCache) return this.#realRootCache;
    const handle = await open(this.#root, DIR_FLAGS);
    try {
      this.#realRootCache = await readlink(`/proc/self/fd/${handle.fd}`);
      return this.#realRootCache;
    } finally {
      await handle.close();
    }
  }

  /** A regular file's bytes, refused past `maxBytes`. */
  async read(path: string, maxBytes: number): Promise<Buffer> {
    const { handle, info } = await this.#openRead(path);
    try {
      if (info.size > maxBytes)
        throw new TreeError("too_large", `${path} is ${info.size} bytes, over the ${maxBytes} this tool reads.`);
      const bytes = await handle.readFile();
      if (bytes.length > maxBytes) throw new TreeError("too_large", `${path} grew past ${maxBytes} bytes while read.`);
      return bytes;
    } finally {
      await handle.close();
    }
  }

  /** The entry at `path`, its last symlink not followed; undefined when there is none. */
  async lstat(path: string): Promise<Stats | undefined> {
    try {
      const { dir, name } = await this.#locate(path, false);
      try {
        return name === "." ? await dir.stat() : await lstat(at(dir, name));
      } finally {
        await dir.close();
      }
    } catch (err) {
      if (err instanceof TreeError && err.code !== "outside_tree") return undefined;
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }

  /** Whether `path` is a directory of the tree (symlinks inside the tree followed). */
  async isDirectory(path: string): Promise<boolean> {
    try {
      const dir = await this.openDir(path);
      await dir.close();
      return true;
    } catch (err) {
      if (err instanceof TreeError && err.code === "outside_tree") throw err;
      return false;
    }
  }

  /** A directory's path from the tree's root, its symlinks resolved (for work done elsewhere, with no links followed). */
  async resolveDir(path: string): Promise<string[]> {
    const { dir, path: parts } = await this.#locate(path, false, { left: MAX_HOPS }, true);
    await dir.close();
    return parts;
  }

  /** An open handle on a directory of the tree (the caller closes it). */
  async openDir(path: string): Promise<FileHandle> {
    return (await this.#locate(path, false, { left: MAX_HOPS }, true)).dir;
  }

  /**
   * Writes `content` to `path`, through a file made beside it and renamed over it: a reader sees the
   * old bytes or the new, and a hard link at `path` is replaced, not written through.
   */
  async write(path: string, content: string | Buffer, options: { exclusive?: boolean; mode?: number } = {}) {
    const hops = { left: MAX_HOPS };
    let { dir, name } = await this.#locate(path, true, hops);
    try {
      if (name === ".") throw new TreeError("is_directory", `${path} is a directory.`);
      // A final symlink inside the tree is written through to what it names, as an editor would.
      for (let existing = await lstat(at(dir, name)).catch(() => undefined); existing?.isSymbolicLink(); ) {
        if (options.exclusive) throw new TreeError("exists", `${path} already exists.`);
        const target = await this.#link(dir, name, path, hops);
        const prefix = target!.absolute ? [] : await this.#pathOf(dir);
        await dir.close();
        ({ dir, name } = await this.#locate(join([...prefix, ...target!.parts]), true, hops));
        existing = await lstat(at(dir, name)).catch(() => undefined);
      }
      const existing = await lstat(at(dir, name)).catch(() => undefined);
      if (existing && options.exclusive) throw new TreeError("exists", `${path} already exists.`);
      if (existing?.isDirectory()) throw new TreeError("is_directory", `${path} is a directory.`);
      const temp = `.sextant-${randomBytes(6).toString("hex")}.tmp`;
      const mode = options.mode ?? (existing ? existing.mode & 0o777 : 0o644);
      const handle = await open(at(dir, temp), C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, mode);
      try {
        await this.#give(handle);
        await handle.chmod(mode);
        await handle.writeFile(content);
      } catch (err) {
        await handle.close();
        await rm(at(dir, temp), { force: true });
        throw err;
      }
      await handle.close();
      await rename(at(dir, temp), at(dir, name));
    } finally {
      await dir.close();
    }
  }

  /** Removes the entry at `path` (a symlink itself, not what it names); directories are refused. */
  async remove(path: string): Promise<void> {
    const { dir, name } = await this.#locate(path, false);
    try {
      const info = name === "." ? undefined : await lstat(at(dir, name)).catch(() => undefined);
      if (name === "." || info?.isDirectory()) throw new TreeError("is_directory", `${path} is a directory.`);
      if (!info) throw new TreeError("not_found", `${path} does not exist.`);
      await rm(at(dir, name));
    } finally {
      await dir.close();
    }
  }

  /** Files and bytes of the tree (symlinks not followed), counted to 100,000 files. */
  async usage(): Promise<{ files: number; bytes: number }> {
    const paths: string[] = [];
    await this.walk(".", 4096, new Set(), (rel, isDir) => {
      if (!isDir) paths.push(rel);
      return paths.length < 100_000;
    });
    let files = 0;
    let bytes = 0;
    for (const path of paths) {
      const info = await this.lstat(path).catch(() => undefined);
      if (!info?.isFile()) continue;
      files++;
      bytes += info.size;
    }
    return { files, bytes };
  }

  /**
   * Visits the entries below the directory `path` in name order, depth first, to `depth` levels;
   * symlinks are visited as entries and never followed. `visit` returns false to stop.
   */
  async walk(path: string, depth: number, skip: Set<string>, visit: (rel: string, isDir: boolean) => boolean) {
    const start = await this.openDir(path);
    const base = split(path);
    const go = async (dir: FileHandle, rel: string[], level: number): Promise<boolean> => {
      const entries = await readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true }).catch(() => []);
      entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
      for (const entry of entries) {
        const isDir = entry.isDirectory();
        if (!visit([...rel, entry.name].join("/"), isDir)) return false;
        if (!isDir || level >= depth || skip.has(entry.name)) continue;
        const child = await open(at(dir, entry.name), DIR_FLAGS).catch(() => undefined);
        if (!child) continue;
        try {
          if (!(await go(child, [...rel, entry.name], level + 1))) return false;
        } finally {
          await child.close();
        }
      }
      return true;
    };
    try {
      return await go(start, base, 1);
    } finally {
      await start.close();
    }
  }
}

function split(path: string): string[] {
  return path.split("/").filter((p) => p !== "" && p !== ".");
}

const join = (parts: string[]) => parts.join("/") || ".";
