/** The Harbor tasks of test/fixtures/harbor-tasks, read as an archive would carry them. */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const FIXTURES = join(import.meta.dirname, "../fixtures/harbor-tasks");

/** A fixture task's files, as an archive would carry them. */
export function taskFiles(name: string): { files: Map<string, Uint8Array>; executable: Set<string> } {
  const root = join(FIXTURES, name);
  const files = new Map<string, Uint8Array>();
  const executable = new Set<string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else {
        const rel = relative(root, path);
        files.set(rel, new Uint8Array(readFileSync(path)));
        if (statSync(path).mode & 0o111) executable.add(rel);
      }
    }
  };
  walk(root);
  return { files, executable };
}
