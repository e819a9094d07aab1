/**
 * `npm run eval`: the code-search scoreboard. Real codebases from the npm registry and from Debian's
 * source-carrying packages (Python, Go, Rust), queries from their doc comments and docstrings, an
 * index without a single comment built through the real local edge, and Sextant's recall and MRR
 * printed next to BM25's over the same chunks in the same run.
 *
 *   npm run eval -- [--packages a@1.2.3,python3-dateutil@2.8.2-2] [--from <dir>]... [--limit N] [--json <file>]
 *                   [--workdir <dir>] [--check]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { startEdge } from "./edge.js";
import { evaluateCodebase, TOP_K, type CodebaseReport } from "./evaluate.js";
import { extractDeb, fetchDeb } from "./debian.js";
import { extractTarball, fetchTarball } from "./fetch.js";
import { score } from "./metrics.js";
import {
  DEBIAN_PACKAGES,
  EVAL_PACKAGES,
  guessLayout,
  isHeldOut,
  parseSpec,
  type DebianPackage,
  type EvalPackage,
} from "./packages.js";
import { formatTable, mrrRatio, splitRatio, type CodebaseResult } from "./report.js";
import { listFiles, type Layout } from "./select.js";

/**
 * The acceptance bars: Sextant's MRR@10 at least this multiple of the identifier-split BM25's over
 * the same chunks (the strongest baseline the run computes): 1.6x on the JavaScript and TypeScript
 * codebases, 1.3x on the Python, Go and Rust ones, whose doc comments share fewer words with the code.
 */
function requiredRatio(label: string): number {
  return DEBIAN_PACKAGES.some((p) => label.startsWith(`${p.name}@`)) ? 1.3 : 1.6;
}

const { values: args } = parseArgs({
  options: {
    packages: { type: "string" },
    from: { type: "string", multiple: true, default: [] },
    limit: { type: "string" },
    json: { type: "string" },
    workdir: { type: "string" },
    check: { type: "boolean", default: false },
  },
});

const limit = args.limit === undefined ? undefined : Number(args.limit);
if (limit !== undefined && !(Number.isInteger(limit) && limit > 0)) {
  console.error("--limit must be a positive integer.");
  process.exit(2);
}

/** What the run was given, as a person would type it again. */
function commandLine(): string {
  const rest = process.argv.slice(2).map((a) => (/^[\w@.,/=:-]+$/.test(a) ? a : JSON.stringify(a)));
  if (process.env.npm_lifecycle_event === "eval")
    return ["npm run eval", ...(rest.length ? ["--", ...rest] : [])].join(" ");
  return ["npx tsx eval/run.ts", ...rest].join(" ");
}

interface Codebase {
  label: string;
  /** Puts the codebase's files under `dest` (or names where they already are), with its layout. */
  load: (dest: string) => Promise<{ dir: string; layout: Layout }>;
}

function fromRegistry(pkg: Pick<EvalPackage, "name" | "version"> & Partial<Layout>): Codebase {
  return {
    label: `${pkg.name}@${pkg.version}`,
    load: async (dest) => {
      await extractTarball(await fetchTarball(pkg.name, pkg.version), dest);
      const layout =
        pkg.roots && pkg.exclude ? { roots: pkg.roots, exclude: pkg.exclude } : guessLayout(listFiles(dest));
      return { dir: dest, layout };
    },
  };
}

function fromDebian(pkg: DebianPackage): Codebase {
  return {
    label: `${pkg.name}@${pkg.version}`,
    load: async (dest) => {
      await extractDeb(await fetchDeb(pkg), dest);
      // A package may carry a copy of another's code: none of it may be held out.
      const heldOut = listFiles(dest).find(isHeldOut);
      if (heldOut) throw new Error(`${pkg.name}: ${heldOut} is held out for independent checks.`);
      return { dir: dest, layout: { roots: pkg.roots, exclude: pkg.exclude } };
    },
  };
}

function codebases(): Codebase[] {
  const local = args.from.map((dir) => ({
    label: basename(resolve(dir)),
    load: async () => ({ dir: resolve(dir), layout: guessLayout(listFiles(resolve(dir))) }),
  }));
  if (args.packages === undefined)
    return local.length > 0 ? local : [...EVAL_PACKAGES.map(fromRegistry), ...DEBIAN_PACKAGES.map(fromDebian)];
  const packages = args.packages.split(",").map((spec) => {
    const { name, version } = parseSpec(spec.trim());
    const debian = DEBIAN_PACKAGES.find((p) => p.name === name);
    if (debian) return fromDebian(debian);
    const pinned = EVAL_PACKAGES.find((p) => p.name === name && p.version === version);
    return fromRegistry(pinned ?? { name, version });
  });
  return [...packages, ...local];
}

function overall(reports: readonly CodebaseReport[]): CodebaseResult {
  const all = reports.flatMap((r) => r.queries);
  return {
    label: "all",
    files: reports.reduce((n, r) => n + r.files, 0),
    chunks: reports.reduce((n, r) => n + r.chunks, 0),
    sextant: score(all.map((q) => q.sextant.rank)),
    bm25: score(all.map((q) => q.bm25.rank)),
    bm25Path: score(all.map((q) => q.bm25Path.rank)),
    bm25Split: score(all.map((q) => q.bm25Split.rank)),
  };
}

async function main(): Promise<number> {
  const command = commandLine();
  const startedAt = new Date();
  const list = codebases();
  const workdir = args.workdir ? resolve(args.workdir) : mkdtempSync(join(tmpdir(), "sextant-eval-"));
  const log = (line: string) => process.stderr.write(`${line}\n`);
  // The edge takes a while to start: fetch and unpack meanwhile. Whatever happens next, it is
  // stopped (it runs in its own process group, so nothing else would stop it).
  const starting = startEdge();
  const stop = async () => (await starting.catch(() => undefined))?.stop();
  const onSignal = () => void stop().finally(() => process.exit(130));
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    const loaded = await Promise.all(
      list.map(async (c, i) => ({ ...c, ...(await c.load(join(workdir, `source-${i}`))) })),
    );
    const session = await starting;
    const reports: CodebaseReport[] = [];
    for (const [i, codebase] of loaded.entries()) {
      const indexedRoot = join(workdir, `indexed-${i}`, codebase.label.replace(/[^\w@.-]+/g, "_"));
      rmSync(indexedRoot, { recursive: true, force: true }); // a reused --workdir keeps nothing stale
      mkdirSync(indexedRoot, { recursive: true });
      reports.push(await evaluateCodebase(session, codebase, indexedRoot, { ...(limit ? { limit } : {}), log }));
    }
    const all = overall(reports);
    process.stdout.write(
      [
        `Sextant code-search eval, ${startedAt.toISOString().slice(0, 10)}: built-in embedder through the local ` +
          `edge, BM25 (k1 1.2, b 0.75) over the same chunks; top ${TOP_K}.`,
        `Command: ${command}`,
        "",
        formatTable(reports, all),
        "",
        ...reports.map(
          (r) =>
            `${r.label}: ${r.queries.length} queries asked of ${r.documented.queries} drawn from doc comments; ` +
            `${r.documented.verbatim} more dropped as verbatim in the stripped code, ${r.documented.notIndexed} ` +
            `not indexed; ${r.documented.tooShort} doc comments without a description of 4+ words.`,
        ),
      ].join("\n") + "\n",
    );
    if (args.json) {
      const codebases = reports.map((r) => ({ ...r, mrrRatio: mrrRatio(r), splitRatio: splitRatio(r) }));
      const doc = { date: startedAt.toISOString(), command, topK: TOP_K, codebases, overall: all };
      writeFileSync(args.json, JSON.stringify(doc, null, 2) + "\n");
    }
    const failing = reports.filter((r) => (splitRatio(r) ?? 0) < requiredRatio(r.label));
    if (args.check && failing.length > 0) {
      const why = failing.map(
        (r) => `${r.label} (${(splitRatio(r) ?? 0).toFixed(2)}x, needs ${requiredRatio(r.label)}x)`,
      );
      log(`--check: MRR@10 against the identifier-split BM25 below its bar on ${why.join(", ")}`);
      return 1;
    }
    return 0;
  } catch (err) {
    // An edge error reaches the client as a request id: the edge's own log says what happened.
    const session = await starting.catch(() => undefined);
    if (session) log(`The local edge's last output:\n${session.edge.output().split("\n").slice(-40).join("\n")}`);
    throw err;
  } finally {
    await stop();
    if (!args.workdir) rmSync(workdir, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  },
);
