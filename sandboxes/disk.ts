/**
 * A sandbox's disk: one directory holding its tree and its scratch space (HOME and /tmp of its
 * commands), capped as a whole. As root, the directory is a tmpfs of its own, mounted `nosuid,nodev`
 * with a size of the sandbox's `diskBytes` and an inode cap, so no command and no tool can write past
 * the cap, whatever the number of files or processes; its pages count against the memory group of
 * whoever wrote them. Without root (or where mounting is not allowed), the cap holds per file (the
 * file-size rlimit) and is checked on upload only: `enforced` says which.
 */
import { execFile } from "node:child_process";
import { mkdir, readFile, rm, statfs } from "node:fs/promises";
import { join } from "node:path";
import { pidAlive } from "./leftovers.js";

export interface SandboxDisk {
  dir: string;
  tree: string;
  scratch: string;
  /** `tmpfs` when the cap holds for the whole disk; `file-size` when it holds per file only. */
  enforced: "tmpfs" | "file-size";
  /** Bytes in use, where the disk is a mount of its own (undefined otherwise). */
  usedBytes(): Promise<number | undefined>;
  remove(): Promise<void>;
}

/**
 * The name each sandbox's tmpfs is mounted under: the host's pid, so a host that starts after one
 * was killed (its sandboxes never unmounted) can tell that host's mounts from a live one's.
 */
const MOUNT_SOURCE = `sextant-${process.pid}`;

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
    if (!(await run("mount", ["-t", "tmpfs", "-o", options, MOUNT_SOURCE, dir])))
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
    async usedBytes() {
      if (!tmpfs) return undefined;
      const s = await statfs(dir);
      return (s.blocks - s.bfree) * s.bsize;
    },
    async remove() {
      // Lazily: a process that still holds a file open there cannot keep the mount, only its pages, until it ends.
      if (tmpfs) await run("umount", ["-l", dir]);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Unmounts the sandbox disks of hosts that are gone (killed before they could unmount them), so
 * their pages go back to the machine. Returns how many it unmounted.
 */
export async function sweepStaleDisks(): Promise<number> {
  if (process.getuid?.() !== 0) return 0;
  const table = await readFile("/proc/self/mountinfo", "utf8").catch(() => "");
  const stale: string[] = [];
  for (const line of table.split("\n")) {
    const [left, right] = line.split(" - ");
    const [fstype, source] = (right ?? "").split(" ");
    const pid = /^sextant-(\d+)$/.exec(source ?? "")?.[1];
    if (fstype !== "tmpfs" || !pid || Number(pid) === process.pid || pidAlive(Number(pid))) continue;
    // The mount point, with the kernel's octal escapes for spaces and the like undone.
    const point = (left ?? "")
      .split(" ")[4]
      ?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (point) stale.push(point);
  }
  // Deepest first, so a mount inside another goes before it.
  stale.sort((a, b) => b.length - a.length);
  let swept = 0;
  for (const point of stale) if (await run("umount", ["-l", point])) swept++;
  return swept;
}
