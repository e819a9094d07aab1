/**
 * How a sandbox's commands are isolated. Both drivers cap each command with rlimits (processes, CPU
 * seconds, file size, and address space where no control group caps the sandbox's memory) and, when
 * the host runs as root, run it in its sandbox's control groups (`cgroups.ts`) as the sandbox's own
 * unprivileged uid, so that the caps count the whole sandbox and one sandbox cannot read another's
 * tree. Commands see none of the host's environment: only PATH, HOME, LANG (and TMPDIR) are set.
 *
 * - `bubblewrap`: a fresh mount, pid, network, IPC and UTS namespace per command. The command sees
 *   /usr and a few files of /etc read-only, its tree read-write at /workspace, its sandbox's own /tmp
 *   (on the sandbox's disk, so under its disk cap), and no network at all; every process it started
 *   dies with it (its pid namespace ends).
 * - `direct`: control groups, rlimits and the uid only, no namespaces. Meant for a Cloudflare
 *   Container, where the container is the isolation and holds one host's sandboxes; never chosen for
 *   lack of bubblewrap. Commands can see the container's filesystem (read-only where permissions say
 *   so) and its network.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import type { SandboxLimits } from "../protocol/agents/sandbox.js";
import { runCapped, type RunResult, type SpawnSpec } from "./process.js";

export type { RunResult } from "./process.js";

export interface RunOptions {
  tree: string;
  command: string;
  timeoutMs: number;
  limits: SandboxLimits;
  env?: Record<string, string>;
  /** The sandbox's uid: commands drop to it when the host runs as root. */
  uid?: number;
  /** A writable directory outside the tree: HOME and TMPDIR (`direct`), /tmp (`bubblewrap`). */
  scratch?: string;
  /**
   * The argv, run first as root, that puts the command in its sandbox's control groups and then runs
   * the rest. With it the group caps memory, and no address-space rlimit is set.
   */
  cgroupJoin?: string[];
  signal?: AbortSignal;
  /**
   * Host directories the command sees at fixed paths (a task's `/tests`, `/logs/verifier`,
   * `/solution`): bubblewrap binds them in its namespace; `direct` binds them in a mount namespace of
   * the command's own (`unshare`, as root only), so no other process of the machine sees them.
   */
  binds?: Bind[];
  /** Another path the tree is mounted at (a task's WORKDIR), besides /workspace: bubblewrap only. */
  alsoAt?: string;
}

export interface Bind {
  source: string;
  dest: string;
  readOnly: boolean;
}

export interface SandboxDriver {
  name: string;
  /** The tree's path as its commands see it (compilers print paths under it). */
  workdir(tree: string): string;
  run(opts: RunOptions): Promise<RunResult>;
}

export const DRIVER_NAMES = ["bubblewrap", "direct"] as const;
export type DriverName = (typeof DRIVER_NAMES)[number];

const PATH = "/usr/local/bin:/usr/bin:/bin";
const isRoot = () => process.getuid?.() === 0;

/**
 * Where a control group caps memory, no address-space limit is set: V8's WebAssembly (undici's HTTP
 * parser, so Node's `fetch`) reserves far more address space than it uses, and fails under one.
 */
function rlimits(opts: RunOptions): string[] {
  const { limits } = opts;
  return [
    ...(opts.cgroupJoin ? [] : [`--as=${limits.memoryBytes}`]),
    `--nproc=${limits.pids}`,
    `--cpu=${limits.cpuSeconds}`,
    `--fsize=${limits.diskBytes}`,
  ];
}

function dropTo(uid: number | undefined): string[] {
  if (!isRoot() || uid === undefined) return [];
  return ["setpriv", `--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "--no-new-privs", "--"];
}

const shell = (command: string) => ["sh", "-c", command];

/** What of /etc a command needs: users, name resolution's config, the alternatives /usr/bin links into, TLS roots. */
const ETC = [
  "passwd",
  "group",
  "hosts",
  "nsswitch.conf",
  "localtime",
  "alternatives",
  "ssl",
  "ca-certificates",
  "ld.so.cache",
  "ld.so.conf",
  "ld.so.conf.d",
];

function bubblewrapArgs(opts: RunOptions): string[] {
  const binds: string[] = ["--ro-bind", "/usr", "/usr"];
  for (const dir of ["bin", "lib", "lib64", "lib32", "sbin"]) {
    const path = `/${dir}`;
    if (!existsSync(path)) continue;
    binds.push("--ro-bind", path, path);
  }
  // Made by bubblewrap (as root, 0700 unless told): the command's uid must be able to enter it.
  binds.push("--perms", "0755", "--dir", "/etc");
  for (const name of ETC) binds.push("--ro-bind-try", `/etc/${name}`, `/etc/${name}`);
  const env = { PATH, HOME: "/tmp", LANG: "C.UTF-8", ...opts.env };
  // As root, bubblewrap needs no user namespace; the command then drops to the sandbox's uid itself,
  // after the tree is mounted (so the tree's parents need not be searchable by that uid).
  const namespaces = isRoot()
    ? ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    : ["--unshare-all"];
  const tmp = opts.scratch ? ["--bind", opts.scratch, "/tmp"] : ["--perms", "1777", "--tmpfs", "/tmp"];
  // The directories above a bind are made by bubblewrap too: 0755, so the command's uid can pass.
  const above = new Set<string>();
  for (const dest of [opts.alsoAt, ...(opts.binds ?? []).map((b) => b.dest)])
    for (let dir = dest && dirname(dest); dir && dir !== "/"; dir = dirname(dir)) above.add(dir);
  const extra = [
    ...[...above].sort().flatMap((dir) => ["--perms", "0755", "--dir", dir]),
    ...(opts.alsoAt ? ["--bind", opts.tree, opts.alsoAt] : []),
    ...(opts.binds ?? []).flatMap((b) => [b.readOnly ? "--ro-bind" : "--bind", b.source, b.dest]),
  ];
  return [
    ...rlimits(opts),
    "--",
    "bwrap",
    ...namespaces,
    "--die-with-parent",
    "--new-session",
    ...binds,
    "--bind",
    opts.tree,
    "/workspace",
    ...extra,
    ...tmp,
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--chdir",
    "/workspace",
    "--clearenv",
    ...Object.entries(env).flatMap(([k, v]) => ["--setenv", k, v]),
    "--",
    ...dropTo(opts.uid),
    ...shell(opts.command),
  ];
}

export const bubblewrapDriver: SandboxDriver = {
  name: "bubblewrap",
  workdir: () => "/workspace",
  run(opts) {
    const argv = [...(opts.cgroupJoin ?? []), "prlimit", ...bubblewrapArgs(opts)];
    const spec: SpawnSpec = { file: argv[0]!, args: argv.slice(1), cwd: opts.tree, env: { PATH } };
    return runCapped(spec, { timeoutMs: opts.timeoutMs, outputBytes: opts.limits.outputBytes, signal: opts.signal });
  },
};

export const directDriver: SandboxDriver = {
  name: "direct",
  workdir: (tree) => tree,
  run(opts) {
    const scratch = opts.scratch ?? join(opts.tree, "..", "scratch");
    if (opts.binds?.length && !isRoot())
      return Promise.reject(new Error("The direct driver binds paths for a command only as root."));
    const argv = [
      ...(opts.cgroupJoin ?? []),
      ...(opts.binds?.length ? privateMounts(opts.binds) : []),
      ...dropTo(opts.uid),
      "prlimit",
      ...rlimits(opts),
      "--",
      ...shell(opts.command),
    ];
    const spec: SpawnSpec = {
      file: argv[0]!,
      args: argv.slice(1),
      cwd: opts.tree,
      env: { PATH, HOME: scratch, TMPDIR: scratch, LANG: "C.UTF-8", ...opts.env },
    };
    return runCapped(spec, { timeoutMs: opts.timeoutMs, outputBytes: opts.limits.outputBytes, signal: opts.signal });
  },
};

/**
 * Runs the rest of the argv (as root) in a mount namespace of its own where each bind is mounted:
 * the mount points are made on the machine's filesystem, empty, and what is mounted on them is seen
 * only inside the namespace.
 */
const MOUNT = `while [ "$1" != -- ]; do mkdir -p "$3" && mount --bind "$2" "$3" || exit 125; if [ "$1" = ro ]; then mount -o remount,bind,ro "$3" || exit 125; fi; shift 3; done; shift; exec "$@"`;
function privateMounts(binds: Bind[]): string[] {
  return [
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "--",
    "sh",
    "-c",
    MOUNT,
    "sh",
    ...binds.flatMap((b) => [b.readOnly ? "ro" : "rw", b.source, b.dest]),
    "--",
  ];
}

export const DRIVERS: Record<DriverName, SandboxDriver> = { bubblewrap: bubblewrapDriver, direct: directDriver };

/** Whether bubblewrap can make a sandbox on this machine (installed, and namespaces allowed). */
export function bubblewrapWorks(): boolean {
  return spawnSync("bwrap", ["--unshare-all", "--ro-bind", "/", "/", "--", "true"], { stdio: "ignore" }).status === 0;
}
