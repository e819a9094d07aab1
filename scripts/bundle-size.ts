/**
 * The deployable bundle's size, as `npm run check` reports and enforces it: `wrangler deploy
 * --dry-run` writes exactly what a deployment uploads (the script and its Data and Text modules,
 * the built-in embedder's model among them), and Cloudflare's free plan refuses a Worker over 3 MB
 * compressed: the refusal reads "Your Worker exceeded the size limit of 3 MiB", so 3 MiB it is.
 * The model's int8 table is close to incompressible (gzip saves about 6% of a 20k × 128 table), so
 * nearly all of its bytes count: docs/configuration.md, "Embedders", has the budget.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { gzipSync } from "node:zlib";

export const MAX_GZIP_BYTES = 3 * 1024 * 1024;

export interface BundleModule {
  name: string;
  bytes: number;
  gzipBytes: number;
}

export interface Bundle {
  modules: BundleModule[];
  bytes: number;
  /** Each module compressed on its own and summed: within a few KB of wrangler's own figure. */
  gzipBytes: number;
  /** wrangler's `Total Upload: … / gzip: …` line. */
  wranglerSummary: string | undefined;
}

/** Builds the bundle into `outdir` with `wrangler deploy --dry-run` and measures what it would upload. */
export function buildBundle(outdir: string): Bundle {
  const result = spawnSync("npx", ["wrangler", "deploy", "--dry-run", "--outdir", outdir], {
    encoding: "utf8",
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", NO_COLOR: "1" },
  });
  if (result.status !== 0) throw new Error(`wrangler deploy --dry-run failed:\n${result.stderr}${result.stdout}`);
  const modules = readdirSync(outdir)
    // The source map and wrangler's note about the folder are not uploaded.
    .filter((name) => !name.endsWith(".map") && name !== "README.md")
    .map((name) => {
      const bytes = readFileSync(join(outdir, name));
      return { name, bytes: bytes.length, gzipBytes: gzipSync(bytes, { level: 9 }).length };
    })
    .sort((a, b) => b.bytes - a.bytes);
  return {
    modules,
    bytes: modules.reduce((s, m) => s + m.bytes, 0),
    gzipBytes: modules.reduce((s, m) => s + m.gzipBytes, 0),
    wranglerSummary: result.stdout.match(/Total Upload: [^\n]*/)?.[0],
  };
}

const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const outdir = mkdtempSync(join(tmpdir(), "sextant-bundle-"));
  try {
    const bundle = buildBundle(outdir);
    for (const m of bundle.modules)
      console.log(`${m.name.padEnd(58)} ${kib(m.bytes).padStart(12)}  gzip ${kib(m.gzipBytes)}`);
    console.log(
      `bundle: ${kib(bundle.bytes)}, gzip ${kib(bundle.gzipBytes)} of ${kib(MAX_GZIP_BYTES)} allowed (${kib(MAX_GZIP_BYTES - bundle.gzipBytes)} left)`,
    );
    if (bundle.wranglerSummary) console.log(`wrangler: ${bundle.wranglerSummary}`);
    if (bundle.gzipBytes > MAX_GZIP_BYTES) {
      console.error(`The bundle is over Cloudflare's free-plan limit of 3 MiB compressed.`);
      process.exitCode = 1;
    }
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}
