/**
 * `npx sextant` resolves this checkout's CLI only where the nearest package.json is the checkout's
 * own: anywhere else npm looks for `sextant` on the registry, where the name is someone else's. No
 * instruction in the docs may run it from such a place.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(".");

/** The docs' Markdown files: the README and every README or page under the checkout's own folders. */
function docs(): string[] {
  const found = ["README.md"];
  for (const dir of ["docs", "sandboxes", "gpu-backends", "client", "bench", "eval", "train"]) {
    if (!existsSync(dir)) continue;
    for (const entry of readdirSync(dir, { recursive: true, withFileTypes: true }))
      if (entry.isFile() && entry.name.endsWith(".md") && !entry.parentPath.includes("node_modules"))
        found.push(relative(ROOT, join(entry.parentPath, entry.name)));
  }
  return found;
}

/** The nearest package.json at or above `dir`, up to the checkout's root. */
function nearestPackage(dir: string): string | undefined {
  for (let d = dir; d.startsWith(ROOT); d = dirname(d)) {
    if (existsSync(join(d, "package.json"))) return d;
    if (d === ROOT) break;
  }
  return undefined;
}

/** Each `npx sextant` line of a shell block, with the directory a `cd` before it in the block left it in. */
function npxSextantRuns(markdown: string): { line: string; cwd: string }[] {
  const runs: { line: string; cwd: string }[] = [];
  let cwd: string | undefined;
  for (const line of markdown.split("\n")) {
    if (line.startsWith("```")) {
      cwd = cwd === undefined ? "." : undefined;
      continue;
    }
    if (cwd === undefined) continue;
    const text = line.replace(/^\$ /, "");
    const cd = /^cd\s+(\S+)/.exec(text);
    if (cd) cwd = join(cwd, cd[1]!);
    if (/(^|[;&|]\s*)npx sextant\b/.test(text) || /&&\s*npx sextant\b/.test(text)) runs.push({ line, cwd });
  }
  return runs;
}

describe("the docs' npx sextant instructions", () => {
  it("finds a cd into a folder of its own package.json", () => {
    const runs = npxSextantRuns("```sh\ncd test/fixtures/agent-tasks/sum/repo\nnpx sextant agent run x\n```\n");
    expect(runs).toEqual([{ line: "npx sextant agent run x", cwd: "test/fixtures/agent-tasks/sum/repo" }]);
    expect(nearestPackage(resolve(runs[0]!.cwd))).toBe(resolve("test/fixtures/agent-tasks/sum/repo"));
  });

  it("run it only where the checkout's own package.json is the nearest", () => {
    const wrong: string[] = [];
    for (const file of docs())
      for (const run of npxSextantRuns(readFileSync(file, "utf8"))) {
        const at = resolve(run.cwd);
        // A `cd` out of the checkout (to a project of the reader's) is the reader's business.
        if (!at.startsWith(ROOT)) continue;
        if (nearestPackage(at) !== ROOT) wrong.push(`${file}: ${run.line} (in ${run.cwd})`);
      }
    expect(wrong).toEqual([]);
  });
});
