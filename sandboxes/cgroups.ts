/**
 * Limits per sandbox rather than per process: a control group per sandbox caps the memory (its
 * processes' and the tmpfs pages they write) and the processes of all its commands together; a group
 * per tenant caps its sandboxes' memory together and shares the CPU equally between the orgs with
 * work, however many processes each runs; and the host's group caps all sandboxes' memory together. cgroup v2 is used where the host mounts it with the `memory`, `pids` and `cpu`
 * controllers; otherwise v1's `memory`, `pids` and `cpu` hierarchies (as on these machines). Groups
 * are made under the host's own, so the sandboxes stay inside whatever limits the host itself has.
 *
 * A command joins its sandbox's groups before anything else runs (`joinArgv`): a process, and every
 * process it starts, is then counted from its first instruction.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, readdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pidAlive } from "./leftovers.js";

export interface SandboxCgroup {
  /** The argv prefix that puts a command in the sandbox's groups, then runs the rest (as root). */
  joinArgv: string[];
  /** SIGKILLs every process in the sandbox's groups, waiting until none is left. */
  kill(): Promise<void>;
  /** Kills what is left and removes the groups. */
  remove(): Promise<void>;
}

/** Memory of all sandboxes together, and of one tenant's (the rest stays the host's own). */
export interface SharedMemory {
  totalBytes: number;
  tenantBytes: number;
}

export interface Cgroups {
  version: 1 | 2;
  create(sandboxId: string, tenant: string, limits: { memoryBytes: number; pids: number }): Promise<SandboxCgroup>;
  /** Removes the host's own groups (at its stop). */
  close(): Promise<void>;
}

const ROOT = "/sys/fs/cgroup";

/** The script that writes its own pid into each file before `--`, then becomes the command. */
const JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"';

/**
 * The weight of all sandboxes together against the host's own processes (1,024 each by default):
 * under contention the host, whose event loop answers every org, keeps two thirds of the CPU; idle
 * CPU goes to sandboxes all the same.
 */
const SANDBOXES_CPU_SHARES = 512;

const slug = (s: string) => createHash("sha256").update(s).digest("hex").slice(0, 16);

/** This process's group in each hierarchy (`/proc/self/cgroup`): v1 controller name, or "" for v2. */
function ownGroups(): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of readFileSync("/proc/self/cgroup", "utf8").trim().split("\n")) {
    const [, controllers, path] = line.split(":");
    for (const c of (controllers ?? "").split(",")) out.set(c, path ?? "/");
  }
  return out;
}

async function tryWrite(path: string, value: string): Promise<boolean> {
  return writeFile(path, value).then(
    () => true,
    () => false,
  );
}

async function pidsIn(dir: string): Promise<number[]> {
  const text = await readFile(join(dir, "cgroup.procs"), "utf8").catch(() => "");
  return text
    .split("\n")
    .filter(Boolean)
    .map(Number)
    .filter((p) => p !== process.pid);
}

async function killAll(dirs: string[]): Promise<void> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const pids = (await Promise.all(dirs.map(pidsIn))).flat();
    if (pids.length === 0 || Date.now() > deadline) return;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Gone already.
      }
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * Removes the groups of hosts that are gone (killed before they could remove theirs), beside this
 * host's own: their processes killed, their groups removed, children first.
 */
async function sweepStale(parent: string): Promise<void> {
  const names = await readdir(parent).catch(() => [] as string[]);
  for (const name of names) {
    const pid = Number(/^sextant-host-(\d+)$/.exec(name)?.[1]);
    if (!pid || pid === process.pid || pidAlive(pid)) continue;
    const dirs: string[] = [];
    const walk = async (dir: string): Promise<void> => {
      for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => []))
        if (entry.isDirectory()) await walk(join(dir, entry.name));
      dirs.push(dir);
    };
    await walk(join(parent, name));
    await removeDirs(dirs);
  }
}

async function removeDirs(dirs: string[]): Promise<void> {
  await killAll(dirs);
  for (const dir of dirs) {
    // A group empties a moment after its last process is reaped.
    for (let i = 0; i < 100 && existsSync(dir); i++) {
      if (
        await rmdir(dir).then(
          () => true,
          () => false,
        )
      )
        break;
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

async function v1(shared: SharedMemory): Promise<Cgroups | undefined> {
  const own = ownGroups();
  const base = (controller: string) =>
    join(ROOT, controller, own.get(controller) ?? "/", `sextant-host-${process.pid}`);
  const bases = { memory: base("memory"), pids: base("pids"), cpu: base("cpu") };
  for (const dir of Object.values(bases)) {
    if (!existsSync(join(dir, ".."))) return undefined;
    await sweepStale(join(dir, ".."));
    if (
      !(await mkdir(dir, { recursive: true }).then(
        () => true,
        () => false,
      ))
    )
      return undefined;
  }
  // A probe: the limit files must take a value (a read-only or delegated-away hierarchy will not).
  if (!(await tryWrite(join(bases.pids, "pids.max"), "max"))) return undefined;
  await tryWrite(join(bases.cpu, "cpu.shares"), String(SANDBOXES_CPU_SHARES));
  await writeFile(join(bases.memory, "memory.limit_in_bytes"), String(shared.totalBytes));
  const tenants = new Set<string>();
  return {
    version: 1,
    async create(sandboxId, tenant, limits) {
      const tenantMemory = join(bases.memory, `t-${slug(tenant)}`);
      const memory = join(tenantMemory, `s-${slug(sandboxId)}`);
      const pids = join(bases.pids, `s-${slug(sandboxId)}`);
      const cpu = join(bases.cpu, `t-${slug(tenant)}`);
      if (!tenants.has(cpu)) {
        await Promise.all([mkdir(cpu, { recursive: true }), mkdir(tenantMemory, { recursive: true })]);
        await writeFile(join(tenantMemory, "memory.limit_in_bytes"), String(shared.tenantBytes));
        tenants.add(cpu);
        tenants.add(tenantMemory);
      }
      await Promise.all([mkdir(memory), mkdir(pids)]);
      await writeFile(join(memory, "memory.limit_in_bytes"), String(limits.memoryBytes));
      // Where swap is accounted, it counts against the same limit.
      await tryWrite(join(memory, "memory.memsw.limit_in_bytes"), String(limits.memoryBytes));
      await writeFile(join(pids, "pids.max"), String(limits.pids));
      const dirs = [memory, pids];
      return {
        joinArgv: ["sh", "-c", JOIN, "sh", ...[memory, pids, cpu].map((d) => join(d, "cgroup.procs")), "--"],
        kill: () => killAll(dirs),
        remove: () => removeDirs(dirs),
      };
    },
    async close() {
      await removeDirs([...tenants]);
      await removeDirs(Object.values(bases));
    },
  };
}

async function v2(shared: SharedMemory): Promise<Cgroups | undefined> {
  if (!existsSync(join(ROOT, "cgroup.controllers"))) return undefined;
  const own = join(ROOT, ownGroups().get("") ?? "/");
  // No process may sit in a group that hands controllers down: the host's groups go beside its own
  // when its own has processes (the host's), which needs its parent to delegate them.
  const candidates = [own, join(own, "..")];
  for (const parent of candidates) {
    await sweepStale(parent);
    const base = join(parent, `sextant-host-${process.pid}`);
    if (
      !(await mkdir(base).then(
        () => true,
        () => false,
      ))
    )
      continue;
    const controllers = (await readFile(join(parent, "cgroup.subtree_control"), "utf8").catch(() => "")).split(/\s+/);
    const ok =
      ["memory", "pids", "cpu"].every((c) => controllers.includes(c)) &&
      (await tryWrite(join(base, "cgroup.subtree_control"), "+memory +pids +cpu"));
    if (!ok) {
      await rmdir(base).catch(() => undefined);
      continue;
    }
    await tryWrite(join(base, "cpu.weight"), String(SANDBOXES_CPU_SHARES / 10.24));
    await writeFile(join(base, "memory.max"), String(shared.totalBytes));
    const tenants = new Set<string>();
    return {
      version: 2,
      async create(sandboxId, tenant, limits) {
        const group = join(base, `t-${slug(tenant)}`);
        if (!tenants.has(group)) {
          await mkdir(group, { recursive: true });
          await writeFile(join(group, "cgroup.subtree_control"), "+memory +pids");
          await writeFile(join(group, "memory.max"), String(shared.tenantBytes));
          tenants.add(group);
        }
        const dir = join(group, `s-${slug(sandboxId)}`);
        await mkdir(dir);
        await writeFile(join(dir, "memory.max"), String(limits.memoryBytes));
        await tryWrite(join(dir, "memory.swap.max"), "0");
        await writeFile(join(dir, "pids.max"), String(limits.pids));
        return {
          joinArgv: ["sh", "-c", JOIN, "sh", join(dir, "cgroup.procs"), "--"],
          kill: async () => {
            if (!(await tryWrite(join(dir, "cgroup.kill"), "1"))) await killAll([dir]);
            await killAll([dir]);
          },
          remove: () => removeDirs([dir]),
        };
      },
      async close() {
        await removeDirs([...tenants]);
        await removeDirs([base]);
      },
    };
  }
  return undefined;
}

/**
 * The host's control groups, or undefined where it cannot make them (not root, no controllers). All
 * sandboxes' memory together is capped at `shared.totalBytes`, so no mix of them can take the host's
 * own, and one tenant's at `shared.tenantBytes`, so one org's cannot take the others'.
 */
export async function openCgroups(shared: SharedMemory): Promise<Cgroups | undefined> {
  if (process.getuid?.() !== 0 || !existsSync("/proc/self/cgroup")) return undefined;
  return (await v2(shared)) ?? (await v1(shared));
}
