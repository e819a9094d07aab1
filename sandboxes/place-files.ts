/**
 * Writing files into a sandbox's tree and its base (the diff's "before"): an upload's, or a task's
 * starting tree. Every path is checked, and the growth summed against the sandbox's disk, before
 * anything is written.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { SandboxDisk } from "./disk.js";
import { HttpError } from "./http.js";
import { TreeError, type TreeFs } from "./tree-fs.js";

export interface PlacedFile {
  path: string;
  content: Uint8Array;
  executable: boolean;
}

export interface PlaceTarget {
  fs: TreeFs;
  base: string;
  disk: SandboxDisk;
  limits: { diskBytes: number };
}

const roundUp = (n: number) => Math.ceil(n / 4096) * 4096;

export async function placeFiles(s: PlaceTarget, files: readonly PlacedFile[]): Promise<number> {
  let growth = 0;
  for (const f of files) {
    let replaced;
    try {
      replaced = await s.fs.lstat(f.path);
    } catch (err) {
      throw new HttpError(400, "invalid_request", (err as Error).message);
    }
    if (replaced?.isDirectory()) throw new HttpError(400, "invalid_request", `${f.path} is a directory in the tree.`);
    // On a tmpfs a file takes whole pages.
    growth += roundUp(f.content.length) - (replaced?.isFile() ? roundUp(replaced.size) : 0);
  }
  const used = (await s.disk.usedBytes()) ?? (await s.fs.usage()).bytes;
  if (used + growth > s.limits.diskBytes)
    throw new HttpError(507, "disk_full", `The files would take the tree past ${s.limits.diskBytes} bytes.`);
  let written = 0;
  for (const { path, content, executable } of files) {
    const mode = executable ? 0o755 : 0o644;
    try {
      await s.fs.write(path, Buffer.from(content.buffer, content.byteOffset, content.byteLength), { mode });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOSPC")
        throw new HttpError(507, "disk_full", `The tree is full (${s.limits.diskBytes} bytes).`);
      if (err instanceof TreeError) throw new HttpError(400, "invalid_request", err.message);
      throw err;
    }
    // The base is the host's own directory, out of every task's reach: plain writes are safe there.
    const copy = join(s.base, path);
    await mkdir(dirname(copy), { recursive: true });
    await writeFile(copy, content, { mode });
    written += content.length;
  }
  return written;
}
