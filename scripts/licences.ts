/**
 * The licence policy for what Sextant ships, and its check. Every production dependency (the root
 * package's `dependencies`, each workspace package's, and everything they pull in) must carry a
 * licence that lets it be redistributed inside an Apache-2.0 project: `npm test` fails otherwise
 * (test/client/licences.test.ts), and `npm run licences` prints the tree's licences and what fails.
 *
 * Which packages are production is npm's own answer (`npm query .prod`, which follows workspaces);
 * each package's licence is license-checker-rseidelsohn's reading of it (package.json's `license`,
 * the old `licenses` list, or a guess from its licence file, which counts as unknown here). The
 * comparison is exact: license-checker's own `--onlyAllow`/`--excludeLicenses` "correct" the ids
 * first, and turn `UNLICENSED` (no licence granted at all) into `Unlicense` (public domain).
 *
 * Adding a licence to `ALLOWED`, or a package to `CLARIFIED`, is a decision: each says why.
 *
 *   npm run licences
 */
import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { init, type ModuleInfo } from "license-checker-rseidelsohn";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";

export const ROOT = new URL("../", import.meta.url).pathname;

export interface LicencePolicy {
  /** SPDX licence ids a production dependency may be licensed under, each with why. */
  allowed: Record<string, string>;
  /**
   * Licences stated here for packages (`name@version`) whose own metadata gives none that can be read,
   * each with where it was read instead. Pinned to a version, so that an upgrade is read again.
   */
  clarified: Record<string, { licence: string; why: string }>;
}

export const POLICY: LicencePolicy = {
  allowed: {
    "Apache-2.0": "Sextant's own licence.",
    MIT: "Permissive; asks only that the copyright and licence text travel with the code.",
    ISC: "MIT's terms in fewer words.",
    "BSD-2-Clause": "Permissive; the copyright and licence text travel with the code.",
    "BSD-3-Clause": "BSD-2-Clause and no use of the authors' names to endorse: nothing Sextant does.",
    // pako (zlib ported to JavaScript, in the Worker's Parquet writer) is "MIT AND Zlib".
    Zlib: "Permissive; asks that altered versions say so and the notice stays, both kept.",
    // tree-sitter-wasms (the CLI's prebuilt grammars): a dedication to the public domain.
    Unlicense: "Public-domain dedication: no conditions at all. Not to be confused with UNLICENSED.",
  },
  clarified: {},
};

/** A production package and the licence it is checked under. */
export interface PackageLicence {
  /** `name@version`. */
  id: string;
  name: string;
  version: string;
  /** An SPDX expression, or what the package says where it is not one. */
  licence: string;
  /** Where the licence came from: license-checker, package.json (Sextant's own packages), or `clarified`. */
  source: "license-checker" | "own package.json" | "clarified";
  /** The package's directory. */
  path: string;
  /** Its licence file, if license-checker found one that is not a README. */
  licenseFile?: string;
  /** Its NOTICE file, if any (Apache-2.0 asks that it travel with the code). */
  noticeFile?: string;
}

interface NpmNode {
  name?: string;
  version?: string;
  location: string;
  path: string;
  license?: unknown;
}

/** npm's production packages under `root`: the root and workspace packages and all they depend on. */
export async function npmProductionPackages(root: string): Promise<NpmNode[]> {
  const { stdout } = await promisify(execFile)("npm", ["query", ".prod", "--offline"], {
    cwd: root,
    maxBuffer: 64 * 1024 * 1024,
  });
  return JSON.parse(stdout) as NpmNode[];
}

/** license-checker's reading of every package installed under `root`, by `name@version`. */
export function installedLicences(root: string): Promise<Record<string, ModuleInfo>> {
  return new Promise((resolve, reject) =>
    init(
      // `unknown`: a licence guessed from a licence file's or README's text reads as UNKNOWN, not as
      // the guess, so that it needs a line in `clarified`.
      { start: root, unknown: true, color: false, direct: Infinity },
      (err, found) => (err ? reject(err) : resolve(found)),
    ),
  );
}

/**
 * A package's licence as license-checker read it, unless `clarified` states it. An old-style list of
 * licences is held to all of them. One npm lists but license-checker did not read is UNREAD, which no
 * policy allows, so that nothing goes unchecked.
 */
export function readLicence(
  id: string,
  info: ModuleInfo | undefined,
  policy: LicencePolicy,
): { licence: string; source: PackageLicence["source"] } {
  const clarified = policy.clarified[id];
  if (clarified) return { licence: clarified.licence, source: "clarified" };
  const list = info?.licenses === undefined ? [] : Array.isArray(info.licenses) ? info.licenses : [info.licenses];
  const licence = list.length === 0 ? "UNREAD" : list.length === 1 ? list[0]! : list.map((l) => `(${l})`).join(" AND ");
  return { licence, source: "license-checker" };
}

/** A package's licence and NOTICE files as license-checker found them; a README it fell back on is no licence file. */
export function licenceFiles(info: ModuleInfo | undefined): { licenseFile?: string; noticeFile?: string } {
  const isReadme = (file: string) => /^readme/i.test(file.split(/[\\/]/).pop() ?? "");
  return {
    ...(info?.licenseFile && !isReadme(info.licenseFile) ? { licenseFile: info.licenseFile } : {}),
    ...(info?.noticeFile ? { noticeFile: info.noticeFile } : {}),
  };
}

/** Every production package under `root` with its licence, sorted by id. */
export async function productionLicences(root = ROOT, policy = POLICY): Promise<PackageLicence[]> {
  const [nodes, installed] = await Promise.all([npmProductionPackages(root), installedLicences(root)]);
  const byId = new Map<string, PackageLicence>();
  for (const node of nodes) {
    if (!node.name || !node.version) throw new Error(`npm lists a package without a name or version at ${node.path}`);
    const id = `${node.name}@${node.version}`;
    if (byId.has(id)) continue;
    const own = !node.location.split("/").includes("node_modules");
    const info = installed[id];
    // license-checker reads a private package as UNLICENSED whatever it says; Sextant's own say Apache-2.0.
    const { licence, source } = own
      ? { licence: typeof node.license === "string" ? node.license : "UNKNOWN", source: "own package.json" as const }
      : readLicence(id, info, policy);
    byId.set(id, {
      id,
      name: node.name,
      version: node.version,
      licence,
      source,
      path: node.path,
      ...licenceFiles(info),
    });
  }
  return [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** An SPDX expression as spdx-expression-parse reads it. */
type SpdxNode =
  | { license: string; plus?: true; exception?: string }
  | { left: SpdxNode; conjunction: "and" | "or"; right: SpdxNode };
const parseSpdx = createRequire(import.meta.url)("spdx-expression-parse") as (expression: string) => SpdxNode;

/**
 * Whether an SPDX expression is allowed: each id in `allowed` (compared without regard to case, as
 * SPDX says), `A OR B` if either is, `A AND B` if both are, and `A WITH exception` only if spelled
 * out in `allowed` as a whole. spdx-expression-parse reads the expression, after the allowed ids and
 * the operators are given their canonical case (it takes ids only as SPDX spells them); anything it
 * does not parse (`UNLICENSED`, `UNKNOWN`, `SEE LICENSE IN …`) is not allowed.
 */
export function isAllowed(expression: string, allowed: Iterable<string>): boolean {
  const entries = [...allowed];
  const spelling = new Map(entries.flatMap((entry) => entry.split(/\s+WITH\s+/i)).map((id) => [id.toLowerCase(), id]));
  const canonical = expression.replace(/[^\s()]+/g, (token) =>
    /^(AND|OR|WITH)$/i.test(token) ? token.toUpperCase() : (spelling.get(token.toLowerCase()) ?? token),
  );
  let tree: SpdxNode;
  try {
    tree = parseSpdx(canonical);
  } catch {
    return false;
  }
  const ids = new Set(entries.map((id) => id.toLowerCase()));
  const holds = (node: SpdxNode): boolean =>
    "conjunction" in node
      ? node.conjunction === "and"
        ? holds(node.left) && holds(node.right)
        : holds(node.left) || holds(node.right)
      : ids.has(
          `${node.license}${node.plus ? "+" : ""}${node.exception ? ` WITH ${node.exception}` : ""}`.toLowerCase(),
        );
  return holds(tree);
}

/** The packages whose licence the policy does not allow. */
export function violations(packages: PackageLicence[], policy = POLICY): PackageLicence[] {
  return packages.filter((p) => !isAllowed(p.licence, Object.keys(policy.allowed)));
}

/** How many packages carry each licence, most first, then by name. */
export function summary(packages: PackageLicence[]): [licence: string, count: number][] {
  const counts = new Map<string, number>();
  for (const p of packages) counts.set(p.licence, (counts.get(p.licence) ?? 0) + 1);
  return [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const packages = await productionLicences();
  console.log(`${packages.length} production packages (npm query .prod), by licence:`);
  for (const [licence, count] of summary(packages)) console.log(`  ${String(count).padStart(4)}  ${licence}`);
  for (const [id, { licence, why }] of Object.entries(POLICY.clarified))
    console.log(`clarified: ${id} as ${licence}: ${why}`);
  const bad = violations(packages);
  for (const p of bad) console.error(`not allowed: ${p.id} (${p.licence}) at ${p.path}`);
  console.log(
    bad.length
      ? `${bad.length} packages under licences the policy (scripts/licences.ts) does not allow.`
      : `Every licence is allowed by scripts/licences.ts: ${Object.keys(POLICY.allowed).join(", ")}.`,
  );
  if (bad.length) process.exitCode = 1;
}
