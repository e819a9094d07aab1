/**
 * How often the device's secret redaction removes something that is not a secret, over the sources
 * of popular npm packages: `npm run eval:secrets`. A redaction is false when its rule is not one of
 * secretlint's recommended preset (the definition of a secret here), or when the preset's own rule
 * no longer flags the lines it was found on (the range was widened or clipped into something else).
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { lintSource } from "@secretlint/core";
import { creator as recommended } from "@secretlint/secretlint-rule-preset-recommend";
import { findSecrets, type Redaction } from "../client/index/secrets.js";
import { extractTarball, fetchTarball } from "./fetch.js";
import { isHeldOut } from "./packages.js";

export interface PinnedPackage {
  name: string;
  version: string;
}

/**
 * Twenty widely installed packages, pinned (the versions in this repository's lockfile). None is
 * reserved by HELD-OUT.md, and none bundles a copy of one: bundlers' outputs (wrangler, vite,
 * prettier) were left out for that reason.
 */
export const SECRET_CORPUS: readonly PinnedPackage[] = [
  { name: "zod", version: "4.6.7" },
  { name: "express", version: "5.3.0" },
  { name: "commander", version: "14.0.3" },
  { name: "debug", version: "4.4.3" },
  { name: "semver", version: "7.8.6" },
  { name: "ws", version: "8.18.0" },
  { name: "hono", version: "4.13.19" },
  { name: "drizzle-orm", version: "0.45.4" },
  { name: "openai", version: "6.49.0" },
  { name: "@anthropic-ai/sdk", version: "1.12.0" },
  { name: "undici", version: "7.24.8" },
  { name: "ajv", version: "8.20.0" },
  { name: "fast-check", version: "4.10.2" },
  { name: "tar", version: "7.5.23" },
  { name: "chokidar", version: "5.0.0" },
  { name: "postcss", version: "8.5.33" },
  { name: "qs", version: "6.17.1" },
  { name: "@modelcontextprotocol/sdk", version: "1.32.2" },
  { name: "zod-to-json-schema", version: "3.25.2" },
  { name: "@types/node", version: "20.19.43" },
];

/** What the client indexes as text in a package: code, declarations, docs and data; not source maps. */
const SOURCE = /\.(m|c)?(j|t)sx?$|\.(json|md|ya?ml)$/;

export function secretCorpusCacheDir(): string {
  return join(homedir(), ".cache", "sextant", "secret-corpus");
}

export interface Finding extends Redaction {
  file: string;
  excerpt: string;
  /** Not a secret by the preset's definitions. */
  false: boolean;
}

export interface Precision {
  files: number;
  findings: Finding[];
}

const PRESET = "@secretlint/secretlint-rule-preset-recommend";
const PRESET_RULE = /^@secretlint\/secretlint-rule-/;

/** The preset's rule ids that flag `text` (the lines a redaction was found on), over ranges. */
async function presetFlags(ext: string, text: string): Promise<{ rule: string; start: number; end: number }[]> {
  const result = await lintSource({
    source: { filePath: `file${ext}`, content: text, ext, contentType: "text" },
    options: { config: { rules: [{ id: PRESET, rule: recommended }] }, noPhysicFilePath: true },
  });
  return result.messages.map((m) => ({ rule: m.ruleId, start: m.range[0], end: m.range[1] }));
}

/**
 * Whether a redaction in `file` removed a secret: its rule is one of the preset's, and that rule
 * flags the lines it was found on, over the redacted range.
 */
export async function judge(file: string, text: string, found: Redaction): Promise<Finding> {
  const lineStart = text.lastIndexOf("\n", found.start - 1) + 1;
  const nextBreak = text.indexOf("\n", found.end);
  const lines = text.slice(lineStart, nextBreak < 0 ? text.length : nextBreak);
  const excerpt = text.slice(found.start, found.end).replace(/\s+/g, " ");
  const base = { ...found, file, excerpt: excerpt.length > 60 ? `${excerpt.slice(0, 57)}...` : excerpt };
  if (!PRESET_RULE.test(found.rule)) return { ...base, false: true };
  const ext = file.slice(file.lastIndexOf("."));
  const [start, end] = [found.start - lineStart, found.end - lineStart];
  const again = (await presetFlags(ext, lines)).some((m) => m.rule === found.rule && m.start < end && start < m.end);
  return { ...base, false: !again };
}

function walk(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? walk(path) : entry.isFile() ? [path] : [];
  });
}

const refuseHeldOut = (name: string) => {
  if (isHeldOut(name)) throw new Error(`${name} is held out (HELD-OUT.md): it may not be a fixture.`);
};

/**
 * Runs the device's redaction over every source file of package `name` as unpacked in `dir`, and
 * judges each redaction; adds to `into`.
 */
export async function measurePackage(
  name: string,
  dir: string,
  into: Precision = { files: 0, findings: [] },
): Promise<Precision> {
  refuseHeldOut(name);
  for (const path of walk(dir)) {
    const file = `${name}/${relative(dir, path)}`;
    if (!SOURCE.test(file) || isHeldOut(relative(dir, path)) || statSync(path).size > 1 << 20) continue;
    const text = readFileSync(path, "utf8");
    into.files++;
    for (const found of await findSecrets(file, text)) into.findings.push(await judge(file, text, found));
  }
  return into;
}

/** Downloads `packages` (or takes them from the cache) and measures each with `measurePackage`. */
export async function measurePrecision(
  packages: readonly PinnedPackage[],
  cacheDir = secretCorpusCacheDir(),
): Promise<Precision> {
  const out: Precision = { files: 0, findings: [] };
  const work = await mkdtemp(join(tmpdir(), "sextant-secret-corpus-"));
  try {
    for (const pkg of packages) {
      refuseHeldOut(pkg.name);
      const dest = join(work, pkg.name.replace("/", "+"));
      await extractTarball(await fetchTarball(pkg.name, pkg.version, cacheDir), dest);
      await measurePackage(pkg.name, dest, out);
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return out;
}

export const falsePerThousandFiles = (p: Precision) => (p.findings.filter((f) => f.false).length * 1000) / p.files;

async function main(): Promise<void> {
  const result = await measurePrecision(SECRET_CORPUS);
  for (const f of result.findings) console.log(`${f.false ? "FALSE" : "true "}  ${f.rule}  ${f.file}  ${f.excerpt}`);
  const falseOnes = result.findings.filter((f) => f.false).length;
  console.log(
    `${SECRET_CORPUS.length} packages, ${result.files} files: ${result.findings.length} redactions, ` +
      `${falseOnes} not secrets by the preset's rules (${falsePerThousandFiles(result).toFixed(2)} per 1,000 files)`,
  );
  if (falsePerThousandFiles(result) > 1) process.exitCode = 1;
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) await main();
