import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface GeneratedTree {
  root: string;
  files: string[];
}

/**
 * A deterministic source tree of `count` files: 100 packages of nested modules, 100 files per
 * leaf directory, 100 to 2,000 bytes each. Reused across runs when it already exists.
 */
export function generateTree(root: string, count: number): GeneratedTree {
  const files: string[] = [];
  let seed = 42;
  const random = () => (seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff;
  for (let i = 0; i < count; i++) {
    const pkg = i % 100;
    const mod = Math.floor(i / 100) % 10;
    const sub = Math.floor(i / 1000) % 10;
    files.push(`packages/pkg-${pkg}/src/module-${mod}/part-${sub}/file-${i}.ts`);
  }
  const marker = join(root, ".generated");
  if (existsSync(marker) && readFileSync(marker, "utf8") === String(count)) return { root, files };
  const made = new Set<string>();
  for (const [i, path] of files.entries()) {
    const dir = join(root, path, "..");
    if (!made.has(dir)) {
      mkdirSync(dir, { recursive: true });
      made.add(dir);
    }
    const lines = 3 + Math.floor(random() * 60);
    let text = `// file ${i}\n`;
    for (let l = 0; l < lines; l++) text += `export const value${l}_${i} = ${Math.floor(random() * 1e6)};\n`;
    writeFileSync(join(root, path), text);
  }
  writeFileSync(join(root, ".gitignore"), ".generated\n");
  writeFileSync(marker, String(count));
  return { root, files };
}
