/**
 * The diff from the tree as uploaded to the tree now, as `git apply` reads it: `a/` and `b/`
 * prefixes, `/dev/null` for created and deleted files, hunks with three lines of context (jsdiff's
 * `structuredPatch`). `.git` and `node_modules` are left out (what a build or an install wrote there
 * is not the task's change), and so are binary files, which are listed instead.
 */
import { readdir, readFile } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import { structuredPatch } from "diff";
import { looksBinary } from "../protocol/binary.js";
import type { DiffResponse } from "../protocol/agents/sandbox.js";

const SKIPPED = new Set([".git", "node_modules"]);

async function files(root: string): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  const walk = async (dir: string) => {
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (!SKIPPED.has(entry.name)) await walk(path);
      } else if (entry.isFile()) out.set(relative(root, path).split(sep).join("/"), await readFile(path));
    }
  };
  await walk(root);
  return out;
}

const isBinary = (b: Buffer | undefined) => !!b && looksBinary(b);

export async function treeDiff(base: string, tree: string): Promise<DiffResponse & { binary: string[] }> {
  const [before, after] = await Promise.all([files(base), files(tree)]);
  const paths = [...new Set([...before.keys(), ...after.keys()])].sort();
  const parts: string[] = [];
  const binary: string[] = [];
  let filesChanged = 0;
  let insertions = 0;
  let deletions = 0;
  for (const path of paths) {
    const a = before.get(path);
    const b = after.get(path);
    if (a && b && a.equals(b)) continue;
    if (isBinary(a) || isBinary(b)) {
      binary.push(path);
      continue;
    }
    const patch = structuredPatch(
      `a/${path}`,
      `b/${path}`,
      a?.toString("utf8") ?? "",
      b?.toString("utf8") ?? "",
      "",
      "",
      {
        context: 3,
      },
    );
    if (patch.hunks.length === 0 && a && b) continue;
    filesChanged++;
    const header = [`diff --git a/${path} b/${path}`];
    if (!a) header.push("new file mode 100644", "--- /dev/null", `+++ b/${path}`);
    else if (!b) header.push("deleted file mode 100644", `--- a/${path}`, "+++ /dev/null");
    else header.push(`--- a/${path}`, `+++ b/${path}`);
    const hunks = patch.hunks.map((h) => {
      for (const line of h.lines) {
        if (line.startsWith("+")) insertions++;
        else if (line.startsWith("-")) deletions++;
      }
      // An empty side starts at line 0, as diff and git write it.
      const range = (start: number, count: number) => `${count === 0 ? start - (start > 0 ? 1 : 0) : start},${count}`;
      return [`@@ -${range(h.oldStart, h.oldLines)} +${range(h.newStart, h.newLines)} @@`, ...h.lines].join("\n");
    });
    parts.push([...header, ...hunks].join("\n") + "\n");
  }
  return { diff: parts.join(""), filesChanged, insertions, deletions, binary };
}
