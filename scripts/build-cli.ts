/**
 * Bundles the CLI into `client/dist/sextant.js`, which `client/bin/sextant.js` runs: compiling the
 * TypeScript through tsx on every start cost 0.6–1.9 s of CPU even to print the version.
 *
 * Dependencies are bundled, except the two that load `.wasm` files from their own package
 * directories at run time (web-tree-sitter finds `tree-sitter.wasm` beside its script, the chunker
 * resolves `tree-sitter-wasms/out`): bundled, those paths would point into `client/dist`. Resolving
 * and loading the other ~300 modules from node_modules doubled the start-up CPU of `--version`.
 *
 * `client/dist/inputs.json` lists the repository files the bundle was built from, so that the bin
 * can tell, in a checkout, that a source file changed since the build.
 *
 *   npm run build:cli
 */
import { build } from "esbuild";
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const ROOT = new URL("../", import.meta.url).pathname;
const OUT = join(ROOT, "client/dist");

/** Loaded at run time from their own directories, for their `.wasm` files. */
const RUNTIME_FILES = ["web-tree-sitter", "tree-sitter-wasms"] as const;

export async function buildCli(outDir = OUT): Promise<{ bytes: number; inputs: string[] }> {
  mkdirSync(outDir, { recursive: true });
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: ["client/cli/entry.ts"],
    bundle: true,
    platform: "node",
    target: "node20",
    format: "esm",
    external: [...RUNTIME_FILES],
    // Bundled CommonJS packages call require() for Node's built-ins, which an ES module lacks.
    banner: {
      js: "import { createRequire as __sextantRequire } from 'node:module'; const require = __sextantRequire(import.meta.url);",
    },
    write: false,
    metafile: true,
    logLevel: "warning",
  });
  const [bundle] = result.outputFiles;
  const inputs = Object.keys(result.metafile.inputs).filter((path) => !path.startsWith("node_modules/"));
  // Each written aside and renamed, so that a CLI started meanwhile never reads half a file.
  const replace = (name: string, contents: string | Uint8Array) => {
    writeFileSync(join(outDir, `${name}.${process.pid}.tmp`), contents);
    renameSync(join(outDir, `${name}.${process.pid}.tmp`), join(outDir, name));
  };
  replace("inputs.json", JSON.stringify(inputs));
  replace("sextant.js", bundle!.contents);
  return { bytes: bundle!.contents.byteLength, inputs };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { bytes, inputs } = await buildCli();
  console.log(`client/dist/sextant.js: ${(bytes / 1024).toFixed(0)} KiB from ${inputs.length} source files`);
}
