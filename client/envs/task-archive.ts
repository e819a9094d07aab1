/**
 * A Harbor task directory as the archive `sextant envs push` sends: a gzip'd tar of its files, paths
 * relative to the task root, named by its SHA-256. The same files make the same bytes on any machine
 * and at any time (entries sorted by path, mtime 0, mode 0644 or 0755 from the executable bit alone,
 * uid and gid 0, no owner names, no directory entries, a gzip header with no time or OS), so a task
 * pushed twice is one archive and the host's copy is found by its hash.
 *
 * What a task directory may hold that an archive must not (symlinks, FIFOs, sockets, devices,
 * unreadable or oversized files, names that are not UTF-8 or that a tree cannot hold) is skipped,
 * counted and named, never fatal: the task is then checked as it will arrive, so a skip that takes
 * a file the task needs refuses that task with its reason and the rest of the set still goes.
 */
import { constants, type Dirent } from "node:fs";
import { open, readdir } from "node:fs/promises";
import { gzipSync } from "node:zlib";
import { packTar, type TarEntry } from "modern-tar";
import { TreePath } from "../../protocol/agents/tools.js";
import { readHarborTask, TaskRefused, type HarborTask } from "../../protocol/envs/harbor.js";
import { sha256Hex, TASK_ARCHIVE_LIMITS, unpackTaskArchive } from "../../protocol/envs/task-archive.js";

/** `sextant envs push`'s map of a set's task names, written at the set's root: never part of a task. */
export const TASKSET_FILE = ".sextant-taskset.json";

export type ArchiveSkipReason = "symlink" | "special" | "unreadable" | "tooLarge" | "overCap" | "badName";

export const ARCHIVE_SKIP_REASONS: Record<ArchiveSkipReason, string> = {
  symlink: "symlink",
  special: "not a regular file",
  unreadable: "unreadable",
  tooLarge: `over ${TASK_ARCHIVE_LIMITS.fileBytes} bytes`,
  overCap: "past the archive's cap on files or bytes",
  badName: "name a task's tree cannot hold",
};

export interface SkippedEntry {
  /** The path relative to the task root, as far as it could be read (an undecodable name has U+FFFD). */
  path: string;
  reason: ArchiveSkipReason;
}

export interface TaskFiles {
  /** Regular files by path relative to the task root. */
  files: Map<string, Uint8Array>;
  executable: Set<string>;
  skipped: SkippedEntry[];
}

export interface TaskArchive extends TaskFiles {
  archive: Uint8Array;
  sha256: string;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
/** C0 and C1 controls and backslashes: a name holding one would print as something else, or break a tool. */
const HOSTILE_NAME = /[\u0000-\u001f\u007f-\u009f\\]/;
/** Byte order, not locale order: the same on every machine. */
const byPath = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * Reads a task directory's regular files. Directories are walked with names as bytes, so a name that
 * is not UTF-8 is skipped rather than read under a replacement character's name; a file is opened
 * without following links and without blocking (a FIFO swapped in after the listing is refused by
 * its open, not waited on).
 */
export async function readTaskFiles(dir: string, limits = TASK_ARCHIVE_LIMITS): Promise<TaskFiles> {
  const out: TaskFiles = { files: new Map(), executable: new Set(), skipped: [] };
  const skip = (path: string, reason: ArchiveSkipReason) => out.skipped.push({ path, reason });
  let total = 0;
  const walk = async (absolute: Buffer, relative: string): Promise<void> => {
    let entries: Dirent<Buffer>[];
    try {
      entries = await readdir(absolute, { withFileTypes: true, encoding: "buffer" });
    } catch {
      skip(relative || ".", "unreadable");
      return;
    }
    const named = entries.map((entry) => {
      let name: string | undefined;
      try {
        name = utf8.decode(entry.name);
      } catch {
        name = undefined;
      }
      return { entry, name, shown: name ?? entry.name.toString("utf8") };
    });
    named.sort((a, b) => byPath(a.shown, b.shown));
    for (const { entry, name, shown } of named) {
      if (!relative && shown === TASKSET_FILE) continue;
      const path = relative ? `${relative}/${shown}` : shown;
      const child = Buffer.concat([absolute, Buffer.from("/"), entry.name]);
      if (name === undefined || HOSTILE_NAME.test(name) || !TreePath.safeParse(path).success) {
        skip(path, "badName");
      } else if (entry.isSymbolicLink()) {
        skip(path, "symlink");
      } else if (entry.isDirectory()) {
        await walk(child, path);
      } else if (!entry.isFile()) {
        skip(path, "special");
      } else {
        const read = await readRegular(child, limits.fileBytes);
        if (typeof read === "string") skip(path, read);
        else if (out.files.size >= limits.files || total + read.bytes.byteLength > limits.unpackedBytes)
          skip(path, "overCap");
        else {
          total += read.bytes.byteLength;
          out.files.set(path, read.bytes);
          if (read.executable) out.executable.add(path);
        }
      }
    }
  };
  await walk(Buffer.from(dir), "");
  return out;
}

async function readRegular(
  path: Buffer,
  maxBytes: number,
): Promise<{ bytes: Uint8Array; executable: boolean } | ArchiveSkipReason> {
  let handle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ELOOP" ? "symlink" : "unreadable";
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) return "special";
    if (stats.size > maxBytes) return "tooLarge";
    const bytes = await handle.readFile();
    // Grown past the cap since the stat: the archive must not hold more than it says.
    if (bytes.byteLength > maxBytes) return "tooLarge";
    return {
      bytes: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength),
      executable: (stats.mode & 0o111) !== 0,
    };
  } catch {
    return "unreadable";
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * The archive of these files: the same files (and executable bits) give the same bytes. zlib's
 * output is fixed for a level and a zlib; the header's OS byte, the one field that varies by
 * platform, is set to 255 ("unknown").
 */
export async function packTaskFiles(
  files: ReadonlyMap<string, Uint8Array>,
  executable: ReadonlySet<string>,
): Promise<Uint8Array> {
  const entries: TarEntry[] = [...files.keys()].sort(byPath).map((name) => ({
    header: {
      name,
      size: files.get(name)!.byteLength,
      type: "file",
      mode: executable.has(name) ? 0o755 : 0o644,
      mtime: new Date(0),
      uid: 0,
      gid: 0,
      uname: "",
      gname: "",
    },
    body: files.get(name)!,
  }));
  const tar = await packTar(entries);
  const gz = gzipSync(tar, { level: 9 });
  gz[9] = 255;
  return new Uint8Array(gz.buffer, gz.byteOffset, gz.byteLength);
}

/** Reads and packs a task directory; the skipped entries are named in the answer. */
export async function packTaskDir(dir: string): Promise<TaskArchive> {
  const read = await readTaskFiles(dir);
  const archive = await packTaskFiles(read.files, read.executable);
  return { ...read, archive, sha256: await sha256Hex(archive) };
}

export interface CheckedTask extends TaskArchive {
  task: HarborTask;
}

/**
 * Packs a task directory and checks the archive as the host will: unpacked under the host's caps,
 * then read as a Harbor task. Throws TaskRefused (naming the file, line and why) for a task the
 * sandboxes would refuse, after its skipped entries are known (they are on the error as `skipped`).
 */
export async function checkTaskDir(dir: string): Promise<CheckedTask> {
  const packed = await packTaskDir(dir);
  try {
    if (packed.archive.byteLength > TASK_ARCHIVE_LIMITS.archiveBytes)
      throw new TaskRefused("the archive", undefined, `is over ${TASK_ARCHIVE_LIMITS.archiveBytes} bytes`);
    const unpacked = await unpackTaskArchive(packed.archive);
    return { ...packed, task: readHarborTask(unpacked.files, { executable: unpacked.executable }) };
  } catch (err) {
    if (err instanceof TaskRefused) Object.assign(err, { skipped: packed.skipped });
    throw err;
  }
}
