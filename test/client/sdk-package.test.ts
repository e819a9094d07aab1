import { readFileSync } from "node:fs";
import { build, type Metafile } from "esbuild";
import { describe, expect, it } from "vitest";
import { questionTranslations } from "../../client/sdk/node.js";
import { parseTranslation, translationsWith } from "../../client/sdk/index.js";

const ROOT = new URL("../../", import.meta.url).pathname;
/** The published package, `sextant-cli`, whose SDK entry points are built from these sources. */
const pkg = JSON.parse(readFileSync(`${ROOT}client/package.json`, "utf8")) as {
  exports: Record<string, string | { types: string; default: string }>;
  dependencies: Record<string, string>;
};
const SOURCES = { "./sdk": "client/sdk/index.ts", "./sdk/node": "client/sdk/node.ts" } as const;

/** What an entry point pulls in: its own files, and the packages it leaves to the installer. */
async function inputsOf(entry: string, platform: "browser" | "node") {
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: [entry],
    bundle: true,
    write: false,
    platform,
    format: "esm",
    metafile: true,
    logLevel: "silent",
    ...(platform === "node" ? { packages: "external" as const } : {}),
  });
  const metafile = result.metafile as Metafile;
  const external = new Set(
    Object.values(metafile.inputs).flatMap((i) => i.imports.filter((x) => x.external).map((x) => x.path)),
  );
  return { files: Object.keys(metafile.inputs), external: [...external] };
}

const packageOf = (specifier: string) =>
  specifier.startsWith("@") ? specifier.split("/").slice(0, 2).join("/") : specifier.split("/")[0]!;

describe("the SDK as a package", () => {
  it("bundles for browsers and Workers: sextant-cli/sdk imports nothing of Node's", async () => {
    const { files } = await inputsOf(SOURCES["./sdk"], "browser");
    expect(files.some((f) => f.startsWith("client/sdk/"))).toBe(true);
    expect(files.filter((f) => f.startsWith("node:"))).toEqual([]);
  });

  it("exports each entry point built with its types, and depends on exactly the packages they import", async () => {
    expect(pkg.exports).toEqual({
      "./sdk": { types: "./dist/sdk/index.d.ts", default: "./dist/sdk/index.js" },
      "./sdk/node": { types: "./dist/sdk/node.d.ts", default: "./dist/sdk/node.js" },
      "./package.json": "./package.json",
    });
    // The CLI is one bundle with its dependencies inside: what the package installs is the SDK's alone.
    const needed = new Set<string>();
    for (const entry of Object.values(SOURCES)) {
      const { external } = await inputsOf(entry, "node");
      for (const specifier of external.filter((s) => !s.startsWith("node:"))) needed.add(packageOf(specifier));
    }
    expect(Object.keys(pkg.dependencies).sort()).toEqual([...needed].sort());
  });

  it("translates a question with the shipped table (sextant/sdk/node) as with a table the caller loaded (sextant/sdk)", () => {
    const model = `${ROOT}protocol/embedder/model/`;
    const table = parseTranslation(
      readFileSync(`${model}translation.bin`),
      readFileSync(`${model}translation-terms.txt`, "utf8"),
    );
    const question = "Removes the first element of the list";
    const words = questionTranslations(question)!;
    expect(words.map((w) => w.term)).toContain("remov");
    expect(translationsWith(table, question)).toEqual(words);
    // A question with no words sends no translations at all.
    expect(translationsWith(table, "?! ...")).toBeUndefined();
  });
});
