/**
 * A sandbox's disk: one directory holding its tree and its scratch space (HOME and /tmp of its
 * commands), capped as a whole. As root, the directory is a tmpfs of its own, mounted `nosuid,nodev`
 * with a size of the sandbox's `diskBytes` and an inode cap, so no command and no tool can write past
 * the cap, whatever the number of files or processes; its pages count against the memory group of
 * whoever wrote them. Without root (or where mounting is not allowed), the cap holds per file (the
 * file-size rlimit) and is checked on upload only: `enforced` says which.
 */
import { execFile } from "node:child_process";
import { mkdir, rm, statfs } from "node:fs/promises";
import { join } from "node:path";

export interface SandboxDisk {
  dir: string;
  tree: string;
  scratch: string;
  /** `tmpfs` when the cap holds for the whole disk; `file-size` when it holds per file only. */
  enforced: "tmpfs" | "file-size";
  /** Bytes and files in use, where the disk is a mount of its own (undefined otherwise). */
  usage(): Promise<{ bytes: number; files: number } | undefined>;
  remove(): Promise<void>;
}

/** A tmpfs inode costs the kernel about a kilobyte: one per 8 KiB of the cap, and never fewer than 4,096. */
const inodes = (bytes: number) => Math.max(4096, Math.floor(bytes / 8192));

const run = (file: string, args: string[]) =>
  new Promise<boolean>((resolve) => execFile(file, args, { timeout: 10_000 }, (err) => resolve(!err)));

/** Whether this host can mount a tmpfs per sandbox (root, and mounting allowed): tried once, in `root`. */
export async function tmpfsWorks(root: string): Promise<boolean> {
  if (process.getuid?.() !== 0) return false;
  const probe = join(root, `.mount-probe-${process.pid}`);
  await mkdir(probe, { recursive: true });
  const mounted = await run("mount", ["-t", "tmpfs", "-o", "size=1m,nosuid,nodev", "tmpfs", probe]);
  if (mounted) await run("umount", [probe]);
  await rm(probe, { recursive: true, force: true });
  return mounted;
}

export async function makeDisk(dir: string, bytes: number, tmpfs: boolean): Promise<SandboxDisk> {
  await mkdir(dir, { mode: 0o711 });
  if (tmpfs) {
    const options = `size=${bytes},nr_inodes=${inodes(bytes)},mode=0711,nosuid,nodev`;
    if (!(await run("mount", ["-t", "tmpfs", "-o", options, "tmpfs", dir])))
      throw new Error(`Could not mount the sandbox's disk at ${dir}.`);
  }
  const tree = join(dir, "tree");
  const scratch = join(dir, "scratch");
  await mkdir(tree, { mode: 0o700 });
  await mkdir(scratch, { mode: 0o700 });
  return {
    dir,
    tree,
    scratch,
    enforced: tmpfs ? "tmpfs" : "file-size",
    async usage() {
      if (!tmpfs) return undefined;
      const s = await statfs(dir);
      // The tree and scratch directories themselves are not the task's files.
      return { bytes: (s.blocks - s.bfree) * s.bsize, files: Math.max(0, s.files - s.ffree - 3) };
    },
    async remove() {
      // Lazily: a process that still holds a file open there cannot keep the mount, only its pages, until it ends.
      if (tmpfs) await run("umount", ["-l", dir]);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
