/**
 * A Harbor task (the Terminal-Bench 2 layout) read from its files: `instruction.md`, `task.toml`,
 * `environment/` (a Dockerfile and what it COPYs), `tests/test.sh` (+ what it reads) and optionally
 * `solution/solve.sh`. Sextant sandboxes do not build images: a sandbox runs on the host's read-only
 * system with the task's files as its tree, so a Dockerfile is read (`dockerfile.ts`) for the files it
 * places and the environment it sets, and anything that would need a build is refused with the file,
 * line and why, rather than run differently from what its author meant.
 *
 * Pure (no Node APIs): the client checks a task set before pushing it, and the host parses an
 * archive it is sent, with the same rules.
 */
import { parse as parseToml, TomlError } from "smol-toml";
import { z } from "zod";
import { TreePath } from "../agents/tools.js";
import { NO_BUILD, readDockerfile, SANDBOX_ENV, TaskRefused, type TaskFile } from "./dockerfile.js";

export { TaskRefused, type TaskFile } from "./dockerfile.js";

/** How far a task's settings may take a sandbox: a task asking for more gets these. */
export const SETTING_CAPS = {
  verifierTimeoutSec: 3600,
  agentTimeoutSec: 86_400,
  memoryMb: 16_384,
  storageMb: 8192,
  cpus: 16,
} as const;

/** Harbor's own defaults (its `TaskConfig`), where task.toml says nothing. */
export const HARBOR_DEFAULTS = {
  verifierTimeoutSec: 600,
  cpus: 1,
  memoryMb: 2048,
  storageMb: 10_240,
} as const;

/** The settings of a task that the sandbox honours, after caps. */
export const TaskSettings = z.object({
  /** `[verifier].timeout_sec`: how long `tests/test.sh` may run. */
  verifierTimeoutSec: z.number().positive(),
  /** `[agent].timeout_sec`: the agent's time on the task (null: Harbor sets none). */
  agentTimeoutSec: z.number().positive().nullable(),
  /** `[environment].cpus` (recorded; the host shares CPU fairly between tenants rather than pinning cores). */
  cpus: z.number().int().positive(),
  /** `[environment].memory_mb`: the sandbox's memory. */
  memoryMb: z.number().int().positive(),
  /** `[environment].storage_mb`: the sandbox's disk (tree and scratch together). */
  storageMb: z.number().int().positive(),
  /**
   * The Dockerfile's last `WORKDIR` (absolute): where the tree is mounted for every command, so a
   * test that `cd`s there finds it. Null: the tree is at the sandbox's default place.
   */
  workdir: z.string().nullable(),
  /** The Dockerfile's `ENV` and `[environment].env`, set for every command of the sandbox. */
  env: z.record(z.string(), z.string()),
  /** `[verifier].env`: set for the verifier's run only. */
  verifierEnv: z.record(z.string(), z.string()),
  /** `[solution].env`: set for the reference solution's run only. */
  solutionEnv: z.record(z.string(), z.string()),
  /** What the task says that the sandbox reads and does not apply (a `FROM` image, a build timeout…). */
  noted: z.array(z.string()),
});
export type TaskSettings = z.infer<typeof TaskSettings>;

export interface HarborTask {
  /** `instruction.md`, the agent's task. */
  instruction: string;
  settings: TaskSettings;
  /** The agent's tree at the start, by tree path. */
  startingTree: Map<string, TaskFile>;
  /** `tests/`'s files, by path under `tests/` (`test.sh` among them). */
  tests: Map<string, TaskFile>;
  /** `solution/`'s files, by path under `solution/` (`solve.sh` among them), when the task has one. */
  solution?: Map<string, TaskFile>;
}

export interface ReadOptions {
  /** Paths (relative to the task root) whose executable bit is set. */
  executable?: ReadonlySet<string>;
}

const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });
function text(file: string, bytes: Uint8Array): string {
  try {
    return decoder.decode(bytes);
  } catch {
    throw new TaskRefused(file, undefined, "is not UTF-8 text");
  }
}

/**
 * Reads a task from its files (paths relative to the task root). Throws TaskRefused for a task the
 * sandboxes cannot run as written.
 */
export function readHarborTask(files: ReadonlyMap<string, Uint8Array>, options: ReadOptions = {}): HarborTask {
  const executable = options.executable ?? new Set<string>();
  for (const path of files.keys())
    if (!TreePath.safeParse(path).success) throw new TaskRefused(path, undefined, "is not a path inside the task");
  const instructionBytes = files.get("instruction.md");
  if (!instructionBytes) throw new TaskRefused("instruction.md", undefined, "is missing");
  const instruction = text("instruction.md", instructionBytes);
  if (!instruction.trim()) throw new TaskRefused("instruction.md", undefined, "is empty");
  const tomlBytes = files.get("task.toml");
  if (!tomlBytes) throw new TaskRefused("task.toml", undefined, "is missing");
  const config = readTaskToml(text("task.toml", tomlBytes));
  if (!files.has("tests/test.sh")) throw new TaskRefused("tests/test.sh", undefined, "is missing");

  const under = (dir: string) => {
    const out = new Map<string, TaskFile>();
    for (const [path, bytes] of files)
      if (path.startsWith(`${dir}/`)) out.set(path.slice(dir.length + 1), { bytes, executable: executable.has(path) });
    return out;
  };
  const environment = under("environment");
  const dockerfile = environment.get("Dockerfile");
  let startingTree: Map<string, TaskFile>;
  let workdir: string | null = null;
  const env: Record<string, string> = {};
  const noted = [...config.noted];
  if (dockerfile) {
    const built = readDockerfile(text("environment/Dockerfile", dockerfile.bytes), environment);
    startingTree = built.tree;
    workdir = built.workdir;
    Object.assign(env, built.env);
    noted.push(...built.noted);
  } else {
    if (config.dockerImage !== undefined)
      throw new TaskRefused(
        "task.toml",
        config.dockerImageLine,
        `[environment].docker_image names a prebuilt image and environment/ has no Dockerfile: ${NO_BUILD}, and the image's files cannot be known`,
      );
    startingTree = environment;
  }
  for (const [key, value] of Object.entries(config.env)) env[key] = value;
  const solution = under("solution");
  const hasSolution = solution.has("solve.sh");
  return {
    instruction,
    settings: {
      verifierTimeoutSec: config.verifierTimeoutSec,
      agentTimeoutSec: config.agentTimeoutSec,
      cpus: config.cpus,
      memoryMb: config.memoryMb,
      storageMb: config.storageMb,
      workdir,
      env,
      verifierEnv: config.verifierEnv,
      solutionEnv: config.solutionEnv,
      noted,
    },
    startingTree,
    tests: under("tests"),
    ...(hasSolution ? { solution } : {}),
  };
}

interface TaskToml {
  verifierTimeoutSec: number;
  agentTimeoutSec: number | null;
  cpus: number;
  memoryMb: number;
  storageMb: number;
  env: Record<string, string>;
  verifierEnv: Record<string, string>;
  solutionEnv: Record<string, string>;
  dockerImage: string | undefined;
  dockerImageLine: number | undefined;
  noted: string[];
}

/** The line of `key` in `[section]` (or of the section itself), for errors; undefined if not found. */
function lineOf(source: string, section: string, key?: string): number | undefined {
  const lines = source.split(/\r?\n/);
  let current = "";
  let sectionLine: number | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    const header = /^\[\[?\s*([^\]]+?)\s*\]\]?/.exec(line);
    if (header) {
      current = header[1]!.replace(/\s+/g, "");
      if (current === section) sectionLine ??= i + 1;
      if (key !== undefined && current === `${section}.${key}`) return i + 1;
      continue;
    }
    if (key === undefined) continue;
    const assigned = /^([A-Za-z0-9_."'-]+)\s*=/.exec(line)?.[1]?.replace(/["']/g, "");
    if (!assigned) continue;
    const full = current ? `${current}.${assigned}` : assigned;
    if (full === `${section}.${key}`) return i + 1;
  }
  return sectionLine;
}

function readTaskToml(source: string): TaskToml {
  let doc: Record<string, unknown>;
  try {
    doc = parseToml(source) as Record<string, unknown>;
  } catch (err) {
    if (err instanceof TomlError)
      throw new TaskRefused("task.toml", err.line, `is not valid TOML (${err.message.split("\n")[0]})`);
    throw new TaskRefused("task.toml", undefined, "is not valid TOML");
  }
  const refuse = (section: string, key: string | undefined, reason: string): never => {
    throw new TaskRefused("task.toml", lineOf(source, section, key), reason);
  };
  const table = (name: string): Record<string, unknown> => {
    const t = doc[name];
    if (t === undefined) return {};
    if (typeof t !== "object" || t === null || Array.isArray(t))
      return refuse(name, undefined, `[${name}] is not a table`);
    return t as Record<string, unknown>;
  };
  const number = (section: string, t: Record<string, unknown>, key: string): number | undefined => {
    const v = t[key];
    if (v === undefined) return undefined;
    const n = typeof v === "bigint" ? Number(v) : v;
    if (typeof n !== "number" || !Number.isFinite(n) || n <= 0)
      return refuse(section, key, `[${section}].${key} must be a positive number`);
    return n;
  };
  const envTable = (section: string, t: Record<string, unknown>): Record<string, string> => {
    const e = t.env;
    if (e === undefined) return {};
    if (typeof e !== "object" || e === null || Array.isArray(e))
      return refuse(section, "env", `[${section}].env must be a table of strings`);
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(e)) {
      if (typeof v !== "string") return refuse(`${section}.env`, k, `[${section}.env].${k} must be a string`);
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) return refuse(`${section}.env`, k, `${k} is not a variable name`);
      // Harbor fills `${VAR}` from the machine that runs the trial; a sandbox host has no such values to give.
      if (/\$\{?[A-Za-z_]/.test(v))
        return refuse(
          `${section}.env`,
          k,
          `[${section}.env].${k} takes a value from the host's environment (${v}); give the value itself`,
        );
      if (SANDBOX_ENV.has(k)) return refuse(`${section}.env`, k, `${k} is set by the sandbox`);
      out[k] = v;
    }
    return out;
  };

  const noted: string[] = [];
  const verifier = table("verifier");
  const agent = table("agent");
  const environment = table("environment");
  const solution = table("solution");
  for (const [section, t] of [
    ["verifier", verifier],
    ["agent", agent],
  ] as const) {
    if (t.network_mode !== undefined && t.network_mode !== "no-network")
      refuse(
        section,
        "network_mode",
        `[${section}].network_mode = "${String(t.network_mode)}": sandboxes have no network`,
      );
    if (Array.isArray(t.allowed_hosts) && t.allowed_hosts.length > 0)
      refuse(section, "allowed_hosts", `[${section}].allowed_hosts: sandboxes have no network`);
    if (t.user !== undefined) noted.push(`[${section}].user (commands run as the sandbox's own user)`);
  }
  if (environment.allow_internet === true)
    refuse("environment", "allow_internet", "[environment].allow_internet = true: sandboxes have no network");
  if (environment.network_mode !== undefined && environment.network_mode !== "no-network")
    refuse(
      "environment",
      "network_mode",
      `[environment].network_mode = "${String(environment.network_mode)}": sandboxes have no network`,
    );
  if (Array.isArray(environment.allowed_hosts) && environment.allowed_hosts.length > 0)
    refuse("environment", "allowed_hosts", "[environment].allowed_hosts: sandboxes have no network");
  const gpus = number("environment", environment, "gpus");
  if (gpus !== undefined && gpus > 0) refuse("environment", "gpus", "[environment].gpus: sandboxes have no GPU");
  if (Array.isArray(environment.mcp_servers) && environment.mcp_servers.length > 0)
    refuse("environment", "mcp_servers", "[environment].mcp_servers: sandboxes run no services beside the agent");
  if (environment.healthcheck !== undefined)
    refuse("environment", "healthcheck", "[environment].healthcheck: sandboxes run no services to check");
  if (environment.memory !== undefined || environment.storage !== undefined)
    refuse(
      "environment",
      environment.memory !== undefined ? "memory" : "storage",
      "[environment].memory and .storage are Harbor's old fields; give memory_mb and storage_mb",
    );
  if (environment.build_timeout_sec !== undefined) noted.push("[environment].build_timeout_sec (nothing is built)");
  if (environment.skills_dir !== undefined) noted.push("[environment].skills_dir");
  let dockerImage: string | undefined;
  if (environment.docker_image !== undefined) {
    if (typeof environment.docker_image !== "string")
      refuse("environment", "docker_image", "[environment].docker_image must be a string");
    dockerImage = environment.docker_image as string;
    noted.push(`[environment].docker_image ${dockerImage} (the sandbox runs on the host's system)`);
  }
  const capped = (n: number, cap: number) => Math.min(n, cap);
  const agentTimeout = number("agent", agent, "timeout_sec");
  return {
    verifierTimeoutSec: capped(
      number("verifier", verifier, "timeout_sec") ?? HARBOR_DEFAULTS.verifierTimeoutSec,
      SETTING_CAPS.verifierTimeoutSec,
    ),
    agentTimeoutSec: agentTimeout === undefined ? null : capped(agentTimeout, SETTING_CAPS.agentTimeoutSec),
    cpus: Math.ceil(capped(number("environment", environment, "cpus") ?? HARBOR_DEFAULTS.cpus, SETTING_CAPS.cpus)),
    memoryMb: Math.ceil(
      capped(number("environment", environment, "memory_mb") ?? HARBOR_DEFAULTS.memoryMb, SETTING_CAPS.memoryMb),
    ),
    storageMb: Math.ceil(
      capped(number("environment", environment, "storage_mb") ?? HARBOR_DEFAULTS.storageMb, SETTING_CAPS.storageMb),
    ),
    env: envTable("environment", environment),
    verifierEnv: envTable("verifier", verifier),
    solutionEnv: envTable("solution", solution),
    dockerImage,
    dockerImageLine: lineOf(source, "environment", "docker_image"),
    noted,
  };
}

/** The sandbox limits a task's settings ask for (the host and edge cap them further by their own limits). */
export function sandboxLimitsFor(settings: TaskSettings): { memoryBytes: number; diskBytes: number } {
  return { memoryBytes: settings.memoryMb * 2 ** 20, diskBytes: settings.storageMb * 2 ** 20 };
}
