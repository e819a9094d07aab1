/**
 * Builds the `sextant-cli` package (`client/`) into `client/dist`: the CLI, which
 * `client/bin/sextant.js` runs, and the SDK as JavaScript with type declarations, with the data files
 * both read at run time. `npm install`, `npm ci` and `npm test` run it, and so does packing the
 * package (its `prepack`).
 *
 * - The CLI is bundled by esbuild with every dependency, since resolving and loading some 300 modules
 *   from node_modules doubled the start-up CPU of `--version`; compiling the TypeScript through tsx
 *   on every start cost 0.6–1.9 s. It is two files: `sextant.js`, the entry, answers `--version` by
 *   itself and imports `cli.js`, the rest, for anything else, so that printing the version does not
 *   read 2 MB of JavaScript.
 * - web-tree-sitter, bundled, loads `tree-sitter.wasm` from beside the script that holds it, so the
 *   file is copied there; the grammars of the languages the chunker supports (client/index/languages.ts)
 *   go to `grammars/` and the translation table to `model/`, and SEXTANT_ASSETS tells the built code
 *   where they are (client/assets.ts). The package then needs neither tree-sitter-wasms (50 MB of
 *   grammars) nor the checkout's `protocol/`.
 * - The SDK (`sextant-cli/sdk`, `sextant-cli/sdk/node`) is bundled with its own sources (`protocol/`
 *   included) and leaves its packages (zod, eventsource-parser, @noble/hashes, pure-rand) to the
 *   installer: they are the package's dependencies, and its types name zod's. rollup-plugin-dts
 *   bundles the declarations the same way, so TypeScript callers get types without the sources.
 * - `THIRD-PARTY-NOTICES.md` names every npm package with code or files in what the package ships,
 *   with its licence's full text (scripts/third-party-notices.ts), and `LICENSE` and `NOTICE` are
 *   Sextant's own.
 *
 * `client/dist/inputs.json` lists the repository files the CLI was built from, so that the bin can
 * tell, in a checkout, that a source file changed since the build.
 *
 *   npm run build:cli
 */
import { build, type BuildOptions, type Metafile, type Plugin } from "esbuild";
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { rollup } from "rollup";
import { dts } from "rollup-plugin-dts";
import { LANGUAGES } from "../client/index/languages.js";
import { thirdPartyNotices } from "./third-party-notices.js";

const ROOT = new URL("../", import.meta.url).pathname;
const OUT = join(ROOT, "client/dist");
const require = createRequire(import.meta.url);

/** The SDK's packages, left to the installer: the package's dependencies (and openai, a peer its types name). */
const SDK_EXTERNAL = ["zod", "eventsource-parser", "@noble/hashes", "pure-rand", "openai"];

/**
 * Writes each file aside and renames it into place, so that a CLI started meanwhile never reads half
 * a file; the suffix keeps two builds at once (a test's, a benchmark's) from sharing a scratch name.
 */
function replace(path: string, contents: string | Uint8Array): void {
  mkdirSync(dirname(path), { recursive: true });
  const scratch = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  writeFileSync(scratch, contents);
  renameSync(scratch, path);
}

const copy = (from: string, to: string) => replace(to, readFileSync(from));

const COMMON = {
  absWorkingDir: ROOT,
  bundle: true,
  platform: "node",
  target: "node20",
  format: "esm",
  write: false,
  metafile: true,
  logLevel: "warning",
} as const satisfies BuildOptions;

/** The entry's `import("./main.js")` becomes an import of the other output file. */
const mainApart: Plugin = {
  name: "main-apart",
  setup(b) {
    b.onResolve({ filter: /^\.\/main\.js$/ }, (args) =>
      args.importer.endsWith("client/cli/entry.ts") ? { path: "./cli.js", external: true } : undefined,
    );
  },
};

export interface CliBuild {
  /** The two scripts' bytes: the entry's and the rest's. */
  bytes: { entry: number; cli: number };
  inputs: string[];
  metafiles: Metafile[];
  /** The files copied beside the scripts, where they came from. */
  copied: string[];
}

/** The CLI and the data files it reads, into `outDir`. */
export async function buildCli(outDir = OUT): Promise<CliBuild> {
  const [entry, cli] = await Promise.all([
    build({ ...COMMON, entryPoints: ["client/cli/entry.ts"], outfile: "sextant.js", plugins: [mainApart] }),
    build({
      ...COMMON,
      entryPoints: ["client/cli/main.ts"],
      outfile: "cli.js",
      define: { SEXTANT_ASSETS: JSON.stringify("./") },
      // Bundled CommonJS packages call require() for Node's built-ins, which an ES module lacks.
      banner: {
        js: "import { createRequire as __sextantRequire } from 'node:module'; const require = __sextantRequire(import.meta.url);",
      },
    }),
  ]);
  const grammars = join(dirname(require.resolve("tree-sitter-wasms/package.json")), "out");
  const copies: [from: string, to: string][] = [
    ...Object.values(LANGUAGES).map(({ grammar }): [string, string] => [
      join(grammars, grammar),
      `grammars/${grammar}`,
    ]),
    [require.resolve("web-tree-sitter/tree-sitter.wasm"), "tree-sitter.wasm"],
    ...["translation.bin", "translation-terms.txt"].map((name): [string, string] => [
      join(ROOT, "protocol/embedder/model", name),
      `model/${name}`,
    ]),
    ...["LICENSE", "NOTICE"].map((name): [string, string] => [join(ROOT, name), name]),
  ];
  for (const [from, to] of copies) copy(from, join(outDir, to));

  const metafiles = [entry.metafile, cli.metafile];
  const inputs = [...new Set(metafiles.flatMap((m) => Object.keys(m.inputs)))].filter(
    (path) => !path.startsWith("node_modules/"),
  );
  replace(join(outDir, "inputs.json"), JSON.stringify(inputs));
  // The rest before the entry that imports it; the entry last, since the bin compares its time with the sources'.
  replace(join(outDir, "cli.js"), cli.outputFiles[0]!.contents);
  replace(join(outDir, "sextant.js"), entry.outputFiles[0]!.contents);
  return {
    bytes: { entry: entry.outputFiles[0]!.contents.byteLength, cli: cli.outputFiles[0]!.contents.byteLength },
    inputs,
    metafiles,
    copied: copies.map(([from]) => from),
  };
}

export interface SdkBuild {
  files: string[];
  metafile: Metafile;
}

/** The SDK's two entry points as JavaScript and bundled declarations, into `outDir/sdk`. */
export async function buildSdk(outDir = OUT): Promise<SdkBuild> {
  const entryPoints = { index: "client/sdk/index.ts", node: "client/sdk/node.ts" };
  const js = await build({
    ...COMMON,
    entryPoints,
    outdir: join(outDir, "sdk"),
    target: "es2022",
    external: SDK_EXTERNAL,
    define: { SEXTANT_ASSETS: JSON.stringify("../") },
  });
  const bundle = await rollup({
    input: Object.fromEntries(Object.entries(entryPoints).map(([name, path]) => [name, join(ROOT, path)])),
    external: (id) => id.startsWith("node:") || SDK_EXTERNAL.some((p) => id === p || id.startsWith(`${p}/`)),
    plugins: [dts({ tsconfig: join(ROOT, "tsconfig.node.json") })],
  });
  const { output } = await bundle.generate({
    format: "es",
    entryFileNames: "[name].d.ts",
    chunkFileNames: "shared-[name].d.ts",
  });
  await bundle.close();
  const files = new Map<string, string | Uint8Array>();
  for (const file of js.outputFiles) files.set(file.path, file.contents);
  for (const chunk of output)
    files.set(join(outDir, "sdk", chunk.fileName), chunk.type === "chunk" ? chunk.code : chunk.source);
  for (const [path, contents] of files) replace(path, contents);
  // Files of an earlier build that this one no longer writes (another build's scratch files aside).
  for (const name of readdirSync(join(outDir, "sdk")))
    if (!name.endsWith(".tmp") && !files.has(join(outDir, "sdk", name)))
      rmSync(join(outDir, "sdk", name), { force: true });
  return { files: [...files.keys()], metafile: js.metafile };
}

const NOTICES_INTRO = `
The \`sextant-cli\` package's CLI (\`dist/sextant.js\`, \`dist/cli.js\`) and SDK (\`dist/sdk/\`) contain code from
the npm packages below, and \`dist/grammars/\` and \`dist/tree-sitter.wasm\` are files from them, each under its own
licence, which is reproduced in full as the package ships it. The packages the SDK imports (its dependencies) are
installed beside it with their own licences. Sextant itself is licensed under the Apache License 2.0
(\`dist/LICENSE\`, \`dist/NOTICE\`).
`;

/** The whole package: the CLI, the SDK, and the notices for the third-party code and files they ship. */
export async function buildPackage(outDir = OUT): Promise<{ cli: CliBuild; sdk: SdkBuild }> {
  const cli = await buildCli(outDir);
  const sdk = await buildSdk(outDir);
  const shipped = [...[...cli.metafiles, sdk.metafile].flatMap((m) => Object.keys(m.inputs)), ...cli.copied];
  // tree-sitter-wasms ships the grammars' compiled files under its own licence but not the grammars'
  // own, so their texts are kept beside the package and follow the packages' notices.
  const grammarLicences = readFileSync(join(ROOT, "client/grammar-licences.md"), "utf8").replace(/^<!--.*-->\n+/, "");
  replace(
    join(outDir, "THIRD-PARTY-NOTICES.md"),
    `${await thirdPartyNotices(shipped, { title: "Third-party notices", intro: NOTICES_INTRO })}\n${grammarLicences}`,
  );
  return { cli, sdk };
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) {
  const { cli, sdk } = await buildPackage();
  console.log(
    `client/dist: sextant.js ${(cli.bytes.entry / 1024).toFixed(1)} KiB and cli.js ${(cli.bytes.cli / 1024).toFixed(0)} KiB from ${cli.inputs.length} source files; the SDK in ${sdk.files.length} files`,
  );
}
