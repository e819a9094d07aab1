import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

/**
 * Every file under `dir` (the local edge's D1, R2 and Durable Object storage, WAL files included)
 * that contains any needle as UTF-8, UTF-16LE or base64, returned as "file: needle".
 */
export function scanDirectoryFor(dir: string, needles: string[]): string[] {
  const forms = needles.flatMap((needle) => [
    [needle, Buffer.from(needle, "utf8")],
    [needle, Buffer.from(needle, "utf16le")],
    [needle, Buffer.from(Buffer.from(needle).toString("base64").slice(0, -4))],
  ]) as [string, Buffer][];
  const hits: string[] = [];
  const walk = (path: string) => {
    for (const name of readdirSync(path)) {
      const child = join(path, name);
      if (statSync(child).isDirectory()) walk(child);
      else {
        const bytes = readFileSync(child);
        for (const [needle, form] of forms) if (bytes.includes(form)) hits.push(`${child}: ${needle}`);
      }
    }
  };
  walk(dir);
  return hits;
}
