/**
 * Third-party notices for what a bundle ships: every npm package with code in it, with its version,
 * its licence and the full text of the licence file (and NOTICE file) the package ships, sorted and
 * with nothing that changes from run to run, so that a committed copy can be compared with a fresh one.
 *
 * `thirdPartyNotices` takes the files a bundle was built from (an esbuild metafile, or its input
 * paths, plus any package files shipped beside the bundle rather than in it) and reads each package's
 * licence the way the licence check does (scripts/licences.ts), held to the same policy.
 *
 * For the Worker, `THIRD-PARTY-NOTICES.md` at the root: what `wrangler deploy` uploads, built by
 * `wrangler deploy --dry-run` with its esbuild metafile. test/client/third-party-notices.test.ts
 * fails when the committed file differs from a fresh one.
 *
 *   npm run notices
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { format } from "prettier";
import {
  installedLicences,
  isAllowed,
  licenceFiles,
  POLICY,
  readLicence,
  ROOT,
  type LicencePolicy,
} from "./licences.js";

export const NOTICES_FILE = "THIRD-PARTY-NOTICES.md";

/** What esbuild's metafile says of a build's inputs, as much as is read here. */
export interface Metafile {
  inputs: Record<string, { imports?: { path: string; external?: boolean }[] }>;
}

export interface BundledPackage {
  name: string;
  version: string;
  /** The package's directory. */
  dir: string;
}

/**
 * The npm packages with a file among `inputs` (absolute, or relative to `root` as esbuild's metafile
 * writes them): each file's package is the directory after its last `node_modules/`.
 */
export function bundledPackages(inputs: Iterable<string>, root = ROOT): BundledPackage[] {
  const found = new Map<string, BundledPackage>();
  for (const input of inputs) {
    const path = isAbsolute(input) ? input : resolve(root, input);
    const parts = path.split(sep);
    const at = parts.lastIndexOf("node_modules");
    if (at < 0) continue;
    const name = parts[at + 1]?.startsWith("@") ? parts.slice(at + 1, at + 3) : parts.slice(at + 1, at + 2);
    const dir = parts.slice(0, at + 1 + name.length).join(sep);
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { name: string; version: string };
    found.set(`${pkg.name}@${pkg.version}`, { name: pkg.name, version: pkg.version, dir });
  }
  return [...found.values()].sort((a, b) => compare(a.name, b.name) || compare(a.version, b.version));
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** A fence longer than any run of backticks in `text`, so that the text cannot close it. */
function fenced(text: string): string {
  const longest = Math.max(2, ...[...text.matchAll(/`+/g)].map((m) => m[0].length));
  const fence = "`".repeat(longest + 1);
  return `${fence}text\n${text}\n${fence}`;
}

/** A licence or notice file's text as the notices hold it: line endings and trailing spaces evened out. */
const fileText = (path: string) =>
  readFileSync(path, "utf8")
    .replace(/\r\n?/g, "\n")
    .split("\n")
    .map((line) => line.trimEnd())
    .join("\n")
    .trim();

export interface NoticesOptions {
  /** The checkout the inputs' paths are relative to, whose node_modules holds the packages. */
  root?: string;
  /** The document's first heading. */
  title: string;
  /** Markdown after the title: what the notices cover and how they are made. */
  intro: string;
  policy?: LicencePolicy;
}

/**
 * Markdown notices for the npm packages with files among `inputs`. Throws for a package whose licence
 * the policy does not allow: a bundle ships only what the licence check would pass.
 */
export async function thirdPartyNotices(inputs: Iterable<string> | Metafile, options: NoticesOptions): Promise<string> {
  const root = options.root ?? ROOT;
  const policy = options.policy ?? POLICY;
  const paths = Symbol.iterator in inputs ? inputs : Object.keys(inputs.inputs);
  const packages = bundledPackages(paths, root);
  const installed = await installedLicences(root);
  const sections: string[] = [];
  const rows: string[] = [];
  const refused: string[] = [];
  for (const { name, version, dir } of packages) {
    const id = `${name}@${version}`;
    const info = installed[id];
    const { licence } = readLicence(id, info, policy);
    if (!isAllowed(licence, Object.keys(policy.allowed))) refused.push(`${id} (${licence})`);
    rows.push(`| ${name} | ${version} | ${licence} |`);
    const files = licenceFiles(info);
    const lines = [`## ${name} ${version}`, ""];
    if (info?.repository) lines.push(`Source: <${info.repository}>`, "");
    if (files.licenseFile) {
      lines.push(`Licence: ${licence}, from the package's \`${relative(dir, files.licenseFile)}\`:`, "");
      lines.push(fenced(fileText(files.licenseFile)));
    } else {
      // Apache-2.0 asks for the licence's text, which is Sextant's own LICENSE word for word.
      const apache = isAllowed(licence, ["Apache-2.0"])
        ? " The Apache License 2.0's full text is Sextant's LICENSE."
        : "";
      lines.push(`Licence: ${licence}. The package ships no licence file.${apache}`);
    }
    if (files.noticeFile) {
      lines.push("", `Its \`${relative(dir, files.noticeFile)}\`:`, "", fenced(fileText(files.noticeFile)));
    }
    sections.push(lines.join("\n"));
  }
  if (refused.length)
    throw new Error(`Bundled under licences scripts/licences.ts does not allow: ${refused.join(", ")}`);
  const markdown = [
    `# ${options.title}`,
    options.intro.trim(),
    ["| Package | Version | Licence |", "| --- | --- | --- |", ...rows].join("\n"),
    ...sections,
  ].join("\n\n");
  // Formatted as `npm run format` would leave it, so that formatting the checkout changes nothing.
  return format(markdown, { parser: "markdown", printWidth: 120 });
}

/**
 * The files the Worker's deployed bundle is built from: `wrangler deploy --dry-run`'s esbuild inputs,
 * and the files its module rules (wrangler.toml's `[[rules]]`) ship beside the script, which the
 * metafile names only by the copies wrangler writes (`<sha1 of the content>-<file name>`): each is
 * found among the import specifiers of the file that imports it, by name and content.
 */
export async function workerBundleInputs(root = ROOT): Promise<string[]> {
  const outdir = mkdtempSync(join(tmpdir(), "sextant-notices-"));
  try {
    const metafile = join(outdir, "meta.json");
    await promisify(execFile)("npx", ["wrangler", "deploy", "--dry-run", "--outdir", outdir, "--metafile", metafile], {
      cwd: root,
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", CI: "true", NO_COLOR: "1" },
      maxBuffer: 64 * 1024 * 1024,
    });
    const meta = JSON.parse(readFileSync(metafile, "utf8")) as Metafile;
    const inputs = new Set(Object.keys(meta.inputs));
    for (const [importer, { imports = [] }] of Object.entries(meta.inputs))
      for (const { path, external } of imports) {
        const copy = external ? /^\.\/([0-9a-f]{40})-(.+)$/.exec(path) : null;
        if (copy) inputs.add(relative(root, moduleSource(root, importer, copy[1]!, copy[2]!)));
      }
    return [...inputs].sort();
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

function moduleSource(root: string, importer: string, sha1: string, name: string): string {
  const from = resolve(root, importer);
  const source = readFileSync(from, "utf8");
  const require = createRequire(from);
  const candidates = [...source.matchAll(/(?:\bfrom|\bimport)\s*["']([^"']+)["']/g)]
    .map((m) => m[1]!)
    .filter((specifier) => basename(specifier) === name)
    .map((specifier) => (specifier.startsWith(".") ? resolve(dirname(from), specifier) : require.resolve(specifier)))
    .filter((path) => existsSync(path));
  // By content where the name alone is ambiguous; a file of Sextant's own may change under a running build.
  const match =
    candidates.length === 1
      ? candidates[0]
      : candidates.find((path) => createHash("sha1").update(readFileSync(path)).digest("hex") === sha1);
  if (!match)
    throw new Error(`${importer} imports a module wrangler wrote as ${sha1}-${name}, found in none of its imports`);
  return match;
}

export const WORKER_NOTICES_INTRO = `
The Worker that \`npm run deploy\` uploads (\`workers/index.ts\`, bundled by wrangler) contains code from the npm
packages below, each under its own licence, which is reproduced in full as the package ships it. Sextant itself is
licensed under the Apache License 2.0 (LICENSE, NOTICE).

\`npm run notices\` writes this file from \`wrangler deploy --dry-run\`'s build; \`npm test\` fails when it is out of
date.
`;

/** The notices for the Worker's deployed bundle, from its inputs if already built (`workerBundleInputs`). */
export async function workerNotices(inputs?: Iterable<string>, root = ROOT): Promise<string> {
  return thirdPartyNotices(inputs ?? (await workerBundleInputs(root)), {
    root,
    title: "Third-party notices",
    intro: WORKER_NOTICES_INTRO,
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  writeFileSync(join(ROOT, NOTICES_FILE), await workerNotices());
  console.log(`${NOTICES_FILE} written.`);
}
