/**
 * The `environment/Dockerfile` of a Harbor task, read rather than built: a sandbox runs on the
 * host's read-only system with the task's files as its tree, so what a Dockerfile can give it is the
 * files it COPYs (into the tree mounted at its WORKDIR) and the variables it sets. Every instruction
 * that would need an image built, a process started or something fetched is refused with its line,
 * because running the task without it would test something other than what its author meant; the
 * instructions that only describe the image are noted, so a task's reader sees what was not applied.
 *
 * This is the lowest layer of reading a task, so the refusal it shares with `harbor.ts` lives here.
 * Pure (no Node APIs), as the client and the host both read tasks with it.
 */
import { TreePath } from "../agents/tools.js";

/** A task the sandboxes cannot run as its author meant: which file, which line (1-based), and why. */
export class TaskRefused extends Error {
  override readonly name = "TaskRefused";
  constructor(
    readonly file: string,
    readonly line: number | undefined,
    readonly reason: string,
  ) {
    super(`${file}${line === undefined ? "" : `:${line}`}: ${reason}`);
  }
}

export interface TaskFile {
  bytes: Uint8Array;
  executable: boolean;
}

/** Where a workdir may not be: the read-only system the sandbox sees, or the verifier's own paths. */
const RESERVED_ROOTS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/proc", "/dev", "/sys"];
const RESERVED_ROOTS_EXACT = ["/", "/tmp", "/tests", "/logs", "/solution", "/oracle"];
/** Variables the sandbox itself sets: a task's value would break its commands' HOME or temporary files. */
export const SANDBOX_ENV = new Set(["HOME", "TMPDIR"]);
const DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin";
export const NO_BUILD = "Sextant sandboxes do not build images";

interface Instruction {
  line: number;
  keyword: string;
  args: string;
}

/** The Dockerfile's instructions: comments dropped, `\` continuations joined, each with its first line. */
function instructions(source: string): Instruction[] {
  const lines = source.split(/\r?\n/);
  const out: Instruction[] = [];
  let escape = "\\";
  let pending: Instruction | undefined;
  let directives = true;
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!;
    const trimmed = raw.trim();
    if (directives) {
      const directive = /^#\s*escape\s*=\s*(\S)\s*$/i.exec(trimmed);
      if (directive) {
        escape = directive[1]!;
        continue;
      }
      if (!/^#\s*\w+\s*=/.test(trimmed)) directives = false;
    }
    if (trimmed.startsWith("#") || (trimmed === "" && !pending)) continue;
    let body = raw;
    const continued = trimmed.endsWith(escape);
    if (continued) body = body.slice(0, body.lastIndexOf(escape));
    if (pending) pending.args += ` ${body.trim()}`;
    else {
      const m = /^\s*(\S+)\s*(.*)$/.exec(body);
      if (!m) continue;
      pending = { line: i + 1, keyword: m[1]!.toUpperCase(), args: m[2]!.trim() };
    }
    if (!continued) {
      out.push(pending);
      pending = undefined;
    }
  }
  if (pending) out.push(pending);
  return out;
}

/** `["a", "b"]` or `a b`: an instruction's arguments, with its `--flag=value` options apart. */
function splitArgs(args: string): { flags: Map<string, string>; words: string[] } {
  const flags = new Map<string, string>();
  let rest = args;
  for (;;) {
    const m = /^--([a-z-]+)(?:=(\S*))?\s*/.exec(rest);
    if (!m) break;
    flags.set(m[1]!, m[2] ?? "");
    rest = rest.slice(m[0].length);
  }
  if (rest.startsWith("[")) {
    try {
      const parsed: unknown = JSON.parse(rest);
      if (Array.isArray(parsed) && parsed.every((w) => typeof w === "string")) return { flags, words: parsed };
    } catch {
      // Not JSON: Docker reads it as the shell form too.
    }
  }
  return { flags, words: rest.split(/\s+/).filter(Boolean) };
}

/** `/a/b/../c` → `/a/c`; relative paths resolved against `from`. */
function absolute(path: string, from: string): string {
  const parts: string[] = [];
  for (const part of (path.startsWith("/") ? path : `${from}/${path}`).split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") parts.pop();
    else parts.push(part);
  }
  return `/${parts.join("/")}`;
}

/** A COPY source's glob (`*`, `?`) as a regular expression over one path segment. */
function segmentPattern(segment: string): RegExp {
  const escaped = segment
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replace(/\*/g, "[^/]*")
    .replace(/\?/g, "[^/]");
  return new RegExp(`^${escaped}$`);
}

function substitute(value: string, vars: Record<string, string>): string {
  return value.replace(
    /\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))/g,
    (_, a: string | undefined, b: string | undefined) => vars[(a ?? b)!] ?? "",
  );
}

/** `ENV a=b c="d e"` or the old `ENV a b c`. */
function envPairs(args: string): [string, string][] {
  if (!/^[A-Za-z_][A-Za-z0-9_]*=/.test(args)) {
    const m = /^(\S+)\s+(.*)$/.exec(args);
    return m ? [[m[1]!, m[2]!]] : [];
  }
  const out: [string, string][] = [];
  const re = /([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|\S*)\s*/gy;
  let m: RegExpExecArray | null;
  while ((m = re.exec(args))) {
    let v = m[2]!;
    if (v.startsWith('"')) v = v.slice(1, -1).replace(/\\(.)/g, "$1");
    else if (v.startsWith("'")) v = v.slice(1, -1);
    out.push([m[1]!, v]);
    if (re.lastIndex >= args.length) break;
  }
  return out;
}
/**
 * What a Dockerfile gives a sandbox: the files it places under its WORKDIR (by tree path), that
 * WORKDIR, its ENV, and what it says that is not applied. Throws TaskRefused for what would need a build.
 */
export function readDockerfile(
  source: string,
  context: Map<string, TaskFile>,
): { tree: Map<string, TaskFile>; workdir: string | null; env: Record<string, string>; noted: string[] } {
  const FILE = "environment/Dockerfile";
  const refuse = (line: number, reason: string): never => {
    throw new TaskRefused(FILE, line, reason);
  };
  const placed = new Map<string, TaskFile & { line: number }>();
  const env: Record<string, string> = {};
  const noted: string[] = [];
  let workdir = "/";
  let workdirSet = false;
  let froms = 0;
  for (const { line, keyword, args } of instructions(source)) {
    switch (keyword) {
      case "FROM":
        if (++froms > 1) refuse(line, `a second FROM (a multi-stage build): ${NO_BUILD}`);
        noted.push(`FROM ${args} (the sandbox runs on the host's system)`);
        break;
      case "WORKDIR": {
        workdir = absolute(substitute(args, env), workdir);
        workdirSet = true;
        break;
      }
      case "ENV":
        for (const [k, v] of envPairs(args)) {
          if (SANDBOX_ENV.has(k)) refuse(line, `ENV ${k}: ${k} is set by the sandbox`);
          env[k] = substitute(v, { PATH: DEFAULT_PATH, ...env });
        }
        break;
      case "ARG":
      case "LABEL":
      case "MAINTAINER":
      case "STOPSIGNAL":
      case "SHELL":
      case "VOLUME":
      case "HEALTHCHECK":
        noted.push(`${keyword} (line ${line})`);
        break;
      case "CMD":
      case "ENTRYPOINT":
        // `ENTRYPOINT []` clears the base image's, which the sandbox never had.
        if (args.replace(/\s+/g, "") !== "[]")
          refuse(line, `${keyword}: ${NO_BUILD} and start nothing beside the agent`);
        break;
      case "COPY":
      case "ADD": {
        const { flags, words } = splitArgs(args);
        if (flags.has("from")) refuse(line, `${keyword} --from: ${NO_BUILD}`);
        if (words.length < 2) refuse(line, `${keyword} needs a source and a destination`);
        const sources = words.slice(0, -1);
        const dest = substitute(words[words.length - 1]!, env);
        const chmod = flags.get("chmod");
        const mode = chmod !== undefined && /^[0-7]{3,4}$/.test(chmod) ? parseInt(chmod, 8) : undefined;
        // Docker copies into a directory named `dest/`, `.`, or (with several sources) any `dest`.
        const intoDir = dest.endsWith("/") || /(^|\/)\.\.?$/.test(dest) || sources.length > 1;
        for (const src of sources) {
          if (keyword === "ADD" && /^[a-z][a-z0-9+.-]*:\/\//i.test(src))
            refuse(line, `ADD of a URL: ${NO_BUILD} and fetch nothing`);
          if (keyword === "ADD" && /\.(tar|tgz|tar\.(gz|bz2|xz|zst))$/i.test(src))
            refuse(line, `ADD of an archive (which Docker would unpack): give its files instead`);
          const matched = matchContext(context, src);
          if (matched.length === 0) refuse(line, `${keyword} ${src}: no such file in environment/`);
          const whole = matched.length === 1 && matched[0]![0] === normalise(src) && !intoDir;
          for (const [rel, file] of matched) {
            const target = whole ? absolute(dest, workdir) : absolute(`${dest}/${stripBase(src, rel)}`, workdir);
            const executable = mode !== undefined ? (mode & 0o111) !== 0 : file.executable;
            placed.set(target, { bytes: file.bytes, executable, line });
          }
        }
        break;
      }
      default:
        // RUN, USER, EXPOSE, ONBUILD and anything unknown.
        refuse(line, `${keyword}: ${NO_BUILD}`);
    }
  }
  if (froms === 0) refuse(1, "has no FROM");
  if (workdirSet) {
    if (
      RESERVED_ROOTS_EXACT.includes(workdir) ||
      RESERVED_ROOTS.some((r) => workdir === r || workdir.startsWith(`${r}/`)) ||
      /^\/(tests|logs|solution|tmp)\//.test(workdir)
    )
      throw new TaskRefused(
        FILE,
        lastLine(source, "WORKDIR"),
        `WORKDIR ${workdir}: the tree cannot be mounted there (the sandbox's system or the verifier's paths)`,
      );
  }
  const root = workdirSet ? workdir : "/";
  const tree = new Map<string, TaskFile>();
  for (const [target, file] of placed) {
    const prefix = root === "/" ? "/" : `${root}/`;
    if (!target.startsWith(prefix) || target === root)
      refuse(file.line, `copies into ${target}, outside WORKDIR ${root}: only the workdir's files are the sandbox's`);
    const path = target.slice(prefix.length);
    if (!TreePath.safeParse(path).success) refuse(file.line, `copies into ${target}, not a path the tree can hold`);
    tree.set(path, { bytes: file.bytes, executable: file.executable });
  }
  return { tree, workdir: workdirSet ? workdir : null, env, noted };
}

function lastLine(source: string, keyword: string): number | undefined {
  let found: number | undefined;
  for (const i of instructions(source)) if (i.keyword === keyword) found = i.line;
  return found;
}

const normalise = (src: string) => absolute(src, "/").slice(1);

/** What a COPY source names in the build context (`environment/`): a file, a directory's files, or a glob's. */
function matchContext(context: Map<string, TaskFile>, src: string): [string, TaskFile][] {
  const path = normalise(src);
  if (path === "") return [...context];
  const exact = context.get(path);
  if (exact) return [[path, exact]];
  const dir = [...context].filter(([p]) => p.startsWith(`${path}/`));
  if (dir.length > 0) return dir;
  if (!/[*?]/.test(path)) return [];
  const patterns = path.split("/").map(segmentPattern);
  const out: [string, TaskFile][] = [];
  for (const [p, f] of context) {
    const parts = p.split("/");
    if (parts.length < patterns.length) continue;
    if (!patterns.every((re, i) => re.test(parts[i]!))) continue;
    out.push([p, f]);
  }
  return out;
}

/** The part of a matched file's path that goes under the destination: a directory source's contents go in, not the directory. */
function stripBase(src: string, rel: string): string {
  const path = normalise(src);
  if (path === "") return rel;
  if (rel === path) return rel.split("/").pop()!;
  if (rel.startsWith(`${path}/`)) return rel.slice(path.length + 1);
  // A glob: what matched the pattern's segments keeps its last one (Docker copies a matched directory's contents).
  const depth = path.split("/").length;
  const parts = rel.split("/");
  return parts.length === depth ? parts[depth - 1]! : parts.slice(depth).join("/");
}
