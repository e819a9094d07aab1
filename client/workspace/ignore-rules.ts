import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import ignore, { type Ignore } from "ignore";

/**
 * Excluded unless a `.sextantignore` re-includes them: files that are noise for search or that
 * commonly hold credentials. They rank above `.gitignore`, so a `!` in a `.gitignore` cannot
 * re-include a secret by accident.
 */
export const DEFAULT_EXCLUDES = [
  // Dependencies and lock files
  "node_modules/",
  "package-lock.json",
  "npm-shrinkwrap.json",
  "yarn.lock",
  "pnpm-lock.yaml",
  "bun.lock",
  "bun.lockb",
  "Cargo.lock",
  "Gemfile.lock",
  "composer.lock",
  "poetry.lock",
  "Pipfile.lock",
  "uv.lock",
  "go.sum",
  "mix.lock",
  "pubspec.lock",
  "Podfile.lock",
  "flake.lock",
  // Environment files, keys and credentials
  ".env",
  ".env.*",
  "*.pem",
  "*.key",
  "*.p12",
  "*.pfx",
  "id_rsa*",
  "id_ecdsa*",
  "id_ed25519*",
  ".npmrc",
  ".pypirc",
  ".netrc",
] as const;

type Verdict = "ignored" | "included" | "none";

/** Rules from one file, anchored at the directory that holds it. */
export interface RuleLayer {
  /** Workspace-relative directory, "" for the root. */
  base: string;
  rules: Ignore;
}

// `ignore`'s public `test()` also consults parent directories within one rule set. The scanner
// never descends into an ignored directory, so that check is redundant for git's rules and wrong
// when a `.sextantignore` re-includes a directory that `.gitignore` excludes: its contents must
// then be judged on their own. The per-path matcher underneath is what git's per-path check is.
interface SelfMatcher {
  _rules: { test(path: string, mode: "regex"): { ignored: boolean; unignored: boolean } };
}

function verdict(layer: RuleLayer, relative: string, isDir: boolean): Verdict {
  const local = layer.base === "" ? relative : relative.slice(layer.base.length + 1);
  const result = (layer.rules as unknown as SelfMatcher)._rules.test(isDir ? `${local}/` : local, "regex");
  return result.ignored ? "ignored" : result.unignored ? "included" : "none";
}

export function parseRules(text: string): Ignore {
  return ignore({ ignorecase: false }).add(text);
}

/** Sees every rule file as it is read, so a scan can tell whether the rules changed since the last. */
export type RuleLog = (source: string, text: string) => void;

function readRules(path: string, log?: RuleLog): Ignore | undefined {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
  log?.(path, text);
  return parseRules(text);
}

/**
 * The rules in force in one directory, highest precedence first: `.sextantignore` files (deepest
 * first), Sextant's defaults, `.gitignore` files (deepest first), then `.git/info/exclude` and the
 * user's global git excludes. The first layer with a matching rule decides, and within a file the
 * last matching rule wins, as in git.
 */
export class IgnoreStack {
  private constructor(
    private readonly sextant: readonly RuleLayer[],
    private readonly git: readonly RuleLayer[],
    private readonly repo: readonly RuleLayer[],
    private readonly defaults: RuleLayer | undefined,
    private readonly log: RuleLog | undefined,
  ) {}

  static forRoot(
    root: string,
    options: { useDefaults?: boolean; globalExcludes?: string | null; log?: RuleLog } = {},
  ): IgnoreStack {
    const log = options.log;
    log?.("defaults", options.useDefaults === false ? "" : DEFAULT_EXCLUDES.join("\n"));
    const repo: RuleLayer[] = [];
    const exclude = readRules(join(root, ".git", "info", "exclude"), log);
    if (exclude) repo.push({ base: "", rules: exclude });
    const globalPath =
      options.globalExcludes === undefined
        ? join(process.env.XDG_CONFIG_HOME || join(homedir(), ".config"), "git", "ignore")
        : options.globalExcludes;
    const global = globalPath ? readRules(globalPath, log) : undefined;
    if (global) repo.push({ base: "", rules: global });
    const defaults =
      options.useDefaults === false ? undefined : { base: "", rules: parseRules(DEFAULT_EXCLUDES.join("\n")) };
    return new IgnoreStack([], [], repo, defaults, log);
  }

  /**
   * The stack for a directory: this one plus the directory's own ignore files. The caller says
   * which exist (it has just listed the directory), which spares two failing opens per directory.
   */
  enter(relative: string, absolute: string, has: { gitignore: boolean; sextantignore: boolean }): IgnoreStack {
    const sextant = has.sextantignore ? readRules(join(absolute, ".sextantignore"), this.log) : undefined;
    const git = has.gitignore ? readRules(join(absolute, ".gitignore"), this.log) : undefined;
    if (!sextant && !git) return this;
    return new IgnoreStack(
      sextant ? [{ base: relative, rules: sextant }, ...this.sextant] : this.sextant,
      git ? [{ base: relative, rules: git }, ...this.git] : this.git,
      this.repo,
      this.defaults,
      this.log,
    );
  }

  ignores(relative: string, isDir: boolean): boolean {
    for (const layer of this.sextant) {
      const v = verdict(layer, relative, isDir);
      if (v !== "none") return v === "ignored";
    }
    if (this.defaults) {
      const v = verdict(this.defaults, relative, isDir);
      if (v !== "none") return v === "ignored";
    }
    for (const layer of this.git) {
      const v = verdict(layer, relative, isDir);
      if (v !== "none") return v === "ignored";
    }
    for (const layer of this.repo) {
      const v = verdict(layer, relative, isDir);
      if (v !== "none") return v === "ignored";
    }
    return false;
  }
}
