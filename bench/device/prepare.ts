/**
 * A self-contained copy of the agent benchmark (`bench/agents.ts`) for a machine that has cores to
 * spare but no Node toolchain and no registry: Node and workerd themselves (xz), the Worker's deploy
 * bundle with wrangler's Miniflare options for it, D1 state with the migrations applied, and esbuild
 * bundles of `scripts/start.ts` and the benchmark. Written to `.devbench/` (ignored by git):
 *
 *   npx tsx bench/device/prepare.ts
 *   # there, from the repository's root:
 *   sh bench/device/run.sh [BENCH_AGENT_FLOOD=32 …]
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { prebuildEdge } from "../../scripts/prebuilt-edge.js";

const ROOT = new URL("../../", import.meta.url).pathname;
const OUT = join(ROOT, ".devbench");
const EDGE = join(OUT, "edge");

const sh = (cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env) => {
  const r = spawnSync(cmd, args, { cwd: ROOT, stdio: ["ignore", "pipe", "inherit"], env, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} exited ${r.status}`);
  return r.stdout;
};

rmSync(OUT, { recursive: true, force: true });
mkdirSync(EDGE, { recursive: true });
await prebuildEdge(EDGE, ROOT);
// Miniflare reads its own Workers from `${__dirname}/workers`: they travel beside the bundle.
const requireShim =
  "import { createRequire as __cr } from 'node:module'; import { dirname as __dn } from 'node:path'; " +
  "import { fileURLToPath as __fu } from 'node:url'; const require = __cr(import.meta.url); " +
  "const __filename = __fu(import.meta.url); const __dirname = __dn(__filename);";
cpSync(join(ROOT, "node_modules/miniflare/dist/src/workers"), join(OUT, "workers"), {
  recursive: true,
  filter: (path) => !path.endsWith(".map"),
});
// The `workerd` package finds its binary in node_modules when it is loaded; there, the binary is
// wherever MINIFLARE_WORKERD_PATH says (Miniflare reads it first), and the package is this stub.
// @ts-expect-error: the package has no types; it is two strings and a path.
const workerdPackage = (await import("workerd")) as { compatibilityDate: string; version: string };
const stub = join(OUT, "workerd-stub.mjs");
writeFileSync(
  stub,
  `export default process.env.MINIFLARE_WORKERD_PATH;\n` +
    `export const compatibilityDate = ${JSON.stringify(workerdPackage.compatibilityDate)};\n` +
    `export const version = ${JSON.stringify(workerdPackage.version)};\n`,
);
for (const [entry, out] of [
  ["scripts/start.ts", "start.mjs"],
  ["bench/agents.ts", "bench-agents.mjs"],
  ["sandboxes/main.ts", "sandbox-host.mjs"],
  ["gpu-backends/simulator/main.ts", "simulator.mjs"],
]) {
  sh("npx", [
    "esbuild",
    entry!,
    "--bundle",
    "--platform=node",
    "--format=esm",
    "--target=node20",
    "--external:wrangler",
    "--external:sharp",
    `--alias:workerd=${stub}`,
    `--banner:js=${requireShim}`,
    `--outfile=${join(OUT, out!)}`,
  ]);
}
// What travels is capped (64 MiB with the repository): no source map, and the JavaScript in one xz.
rmSync(join(EDGE, "worker", "index.js.map"), { force: true });
const packed = ["edge", "workers", "start.mjs", "bench-agents.mjs", "sandbox-host.mjs", "simulator.mjs"];
sh("tar", ["-cJf", join(OUT, "bundle.tar.xz"), "-C", OUT, ...packed]);
for (const name of [...packed, "workerd-stub.mjs"]) rmSync(join(OUT, name), { recursive: true, force: true });
const workerd = execFileSync("node", ["-e", "process.stdout.write(require('workerd').default ?? require('workerd'))"], {
  cwd: ROOT,
  encoding: "utf8",
}).trim();
for (const [binary, name] of [
  [process.execPath, "node.xz"],
  [workerd, "workerd.xz"],
]) {
  writeFileSync(join(OUT, name!), execFileSync("xz", ["-6", "-T2", "-c", binary!], { maxBuffer: 256 * 2 ** 20 }));
}
console.log(sh("du", ["-sh", OUT]).trim());
