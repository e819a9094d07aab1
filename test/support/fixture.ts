import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

/** A throwaway directory tree; files are given as path -> content. */
export function makeTree(files: Record<string, string | Buffer>, prefix = "sextant-tree-"): string {
  const root = mkdtempSync(join(tmpdir(), prefix));
  writeTree(root, files);
  return root;
}

export function writeTree(root: string, files: Record<string, string | Buffer>): void {
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), content);
  }
}

/** Backdates every given file, so a following scan does not treat it as racily clean. */
export function backdate(root: string, paths: string[], seconds = 60): void {
  const past = new Date(Date.now() - seconds * 1000);
  for (const path of paths) utimesSync(join(root, path), past, past);
}

/** git with no user or system configuration, so only the fixture's own ignore files count. */
export function git(root: string, args: string[]): string {
  const home = mkdtempSync(join(tmpdir(), "sextant-home-"));
  const result = spawnSync("git", args, {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, HOME: home, XDG_CONFIG_HOME: home, GIT_CONFIG_NOSYSTEM: "1" },
  });
  if (result.status !== 0) throw new Error(`git ${args.join(" ")} failed: ${result.stderr}`);
  return result.stdout;
}

/** The files git would add: untracked and not ignored, as a sorted list. */
export function gitVisibleFiles(root: string): string[] {
  return git(root, ["ls-files", "--others", "--exclude-standard", "-z"]).split("\0").filter(Boolean).sort();
}

/** A small function the search tests look for, copied into several places of a tree. */
export const PARSE_DURATION = `function parseDuration(text, options) {
  const units = { h: 3600000, m: 60000, s: 1000 };
  let total = 0;
  for (const [, amount, unit] of text.matchAll(/(\\d+)\\s*([hms])/g)) total += Number(amount) * units[unit];
  if (options && options.strict && total === 0) throw new RangeError("no duration in " + text);
  return total;
}
`;
