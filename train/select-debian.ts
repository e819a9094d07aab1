import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { isExcludedFromTraining } from "./exclusions.js";
import { DEBIAN_ROOTS, type DebianEntry } from "./package-list.js";

const run = promisify(execFile);

/** One `apt-cache dumpavail` stanza, by field. */
type Stanza = Record<string, string>;

export function parseStanzas(text: string): Stanza[] {
  return text
    .split(/\n\s*\n/)
    .filter((block) => block.trim())
    .map((block) => {
      const stanza: Stanza = {};
      let key = "";
      for (const line of block.split("\n")) {
        if (/^\s/.test(line) && key) stanza[key] += `\n${line.trim()}`;
        else {
          const colon = line.indexOf(":");
          key = line.slice(0, colon);
          stanza[key] = line.slice(colon + 1).trim();
        }
      }
      return stanza;
    });
}

/** Which packages each language draws from, and how big one may be (Installed-Size, KiB). */
const LANGUAGE_RULES: Record<DebianEntry["language"], { name: RegExp; architectures: string[]; maxKib: number }> = {
  // Architecture `all` only: a compiled extension module is not the pure Python the docstrings describe.
  python: { name: /^python3-(?!.*-(dbg|doc|dev)$)[a-z0-9.-]+$/, architectures: ["all"], maxKib: 4_000 },
  go: { name: /^golang-[a-z0-9.-]+-dev$/, architectures: ["all", "amd64"], maxKib: 6_000 },
  // Feature packages (`librust-serde+derive-dev`) are empty: only the crate's own package carries source.
  rust: { name: /^librust-[a-z0-9.-]+-dev$/, architectures: ["all", "amd64"], maxKib: 6_000 },
};
/** Below this a package is a transitional or metadata-only one. */
const MIN_KIB = 16;

const dependencyNames = (field: string | undefined) =>
  (field ?? "")
    .split(/[,|]/)
    .map((d) => d.trim().split(/[\s:(]/)[0]!)
    .filter(Boolean);

/**
 * The most depended-upon source-carrying packages of each language, as a stand-in for "well known":
 * a package counts once for every other package that depends on it, or on a feature or version it
 * provides.
 */
export function rankDebian(stanzas: readonly Stanza[], perLanguage: number): DebianEntry[] {
  const owner = new Map<string, string>();
  for (const s of stanzas) {
    owner.set(s.Package!, s.Package!);
    for (const provided of dependencyNames(s.Provides)) owner.set(provided, s.Package!);
  }
  const dependents = new Map<string, Set<string>>();
  for (const s of stanzas)
    for (const dep of [...dependencyNames(s.Depends), ...dependencyNames(s["Pre-Depends"])]) {
      const target = owner.get(dep);
      if (target && target !== s.Package) dependents.set(target, (dependents.get(target) ?? new Set()).add(s.Package!));
    }
  const entries: DebianEntry[] = [];
  for (const language of ["python", "go", "rust"] as const) {
    const rule = LANGUAGE_RULES[language];
    const candidates = stanzas.filter((s) => {
      const kib = Number(s["Installed-Size"]);
      return (
        rule.name.test(s.Package!) &&
        rule.architectures.includes(s.Architecture!) &&
        kib >= MIN_KIB &&
        kib <= rule.maxKib &&
        /^[0-9a-f]{64}$/.test(s.SHA256 ?? "") &&
        !isExcludedFromTraining(s.Package!)
      );
    });
    const score = (s: Stanza) => dependents.get(s.Package!)?.size ?? 0;
    candidates.sort((a, b) => score(b) - score(a) || a.Package!.localeCompare(b.Package!));
    for (const s of candidates.slice(0, perLanguage))
      entries.push({
        name: s.Package!,
        version: s.Version!,
        sha256: s.SHA256!,
        language,
        roots: [...DEBIAN_ROOTS[language]],
      });
  }
  return entries;
}

/** Every package apt knows here (bookworm), one candidate version each, amd64 where built per architecture. */
export async function selectDebian(perLanguage: number): Promise<DebianEntry[]> {
  const { stdout } = await run("apt-cache", ["dumpavail"], { maxBuffer: 1 << 30 });
  return rankDebian(parseStanzas(stdout), perLanguage);
}
