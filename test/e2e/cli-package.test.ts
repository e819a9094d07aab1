/**
 * The `sextant-cli` package as a user gets it: packed from the workspace (its `prepack` builds it)
 * into a scratch folder, installed into an empty project from the npm cache, and used there with
 * nothing of the checkout's: the bin through npx, the SDK from plain Node and from TypeScript, and
 * an index and a search against a local edge, which load the package's own grammars.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LANGUAGES } from "../../client/index/languages.js";
import { generateApiKey } from "../../protocol/api-key.js";
import { makeTree } from "../support/fixture.js";
import { startLocalEdge } from "../support/local-edge.js";
import {
  bytesUnder,
  installedPackages,
  installOffline,
  npmEnv,
  pack,
  ROOT,
  run,
  type Manifest,
} from "../support/packed-package.js";

/** The issue's bound on what installing the CLI may take, in bytes on disk (files' sizes summed). */
const MAX_INSTALL_BYTES = 25_000_000;
/** The Worker's and the checkout's own packages, none of which a user of the CLI or SDK needs. */
const NOT_FOR_USERS = [
  /^@cloudflare\//,
  /^@turbopuffer\//,
  /^hono$/,
  /^drizzle-(orm|kit)$/,
  /^wrangler$/,
  /^miniflare$/,
  /^workerd$/,
  /^tree-sitter-wasms$/,
  /^web-tree-sitter$/,
  /^hyparquet(-writer)?$/,
  /^uplot$/,
  /^tsx$/,
];

const manifest = JSON.parse(readFileSync(join(ROOT, "client/package.json"), "utf8")) as Manifest;

describe("the sextant-cli package, packed and installed", () => {
  let scratch: string;
  let project: string;

  beforeAll(() => {
    scratch = mkdtempSync(join(tmpdir(), "sextant-package-"));
    const tarball = pack(["--workspace", "client"], ROOT, join(scratch, "packed"));
    project = join(scratch, "project");
    installOffline(tarball, manifest, join(ROOT, "package-lock.json"), project);
  }, 300_000);
  afterAll(() => {
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it(`installs in at most ${MAX_INSTALL_BYTES / 1e6} MB, with none of the Worker's packages`, () => {
    const bytes = bytesUnder(join(project, "node_modules"));
    // The figure docs/cli.md gives.
    console.log(`sextant-cli installed: ${(bytes / 1e6).toFixed(1)} MB in node_modules`);
    expect(bytes, `${(bytes / 1e6).toFixed(1)} MB installed`).toBeLessThanOrEqual(MAX_INSTALL_BYTES);
    const installed = JSON.parse(
      readFileSync(join(project, "node_modules", manifest.name, "package.json"), "utf8"),
    ) as Manifest;
    for (const name of [...Object.keys(installed.dependencies ?? {}), ...installedPackages(project)])
      expect(
        NOT_FOR_USERS.some((p) => p.test(name)),
        name,
      ).toBe(false);
    // The grammars are the supported languages' alone, with the runtime that loads them.
    const dist = join(project, "node_modules", manifest.name, "dist");
    expect(existsSync(join(dist, "tree-sitter.wasm"))).toBe(true);
    expect(readdirSync(join(dist, "grammars")).sort()).toEqual(
      Object.values(LANGUAGES)
        .map((l) => l.grammar)
        .sort(),
    );
    // The licence, and notices for the third-party code and files it ships: the bundled CLI's, the grammars'.
    expect(readFileSync(join(dist, "LICENSE"), "utf8")).toContain("Apache License");
    const notices = readFileSync(join(dist, "THIRD-PARTY-NOTICES.md"), "utf8");
    for (const shipped of ["commander", "web-tree-sitter", "tree-sitter-wasms"])
      expect(notices).toMatch(new RegExp(`^## ${shipped} \\d`, "m"));
    // Each grammar file also under its grammar's own licence, which tree-sitter-wasms does not ship.
    const grammarSection = notices.slice(notices.indexOf("## The grammars in `dist/grammars/`"));
    for (const { grammar } of Object.values(LANGUAGES)) {
      const entry = new RegExp(
        `^Files: [^\\n]*\`${grammar.replaceAll(".", "\\.")}\`[^\\n]*\\n\\n\`\`\`text\\n(?:The )?MIT License`,
        "m",
      );
      expect(grammarSection, grammar).toMatch(entry);
    }
  });

  it("runs `sextant --version` through npx and through the bin", () => {
    // Never from the registry: `sextant` there is another package.
    const npx = run("npx", ["--offline", "--yes=false", "sextant", "--version"], project);
    expect(npx.status, npx.stderr).toBe(0);
    expect(npx.stdout).toBe(`${manifest.version}\n`);
    const bin = run(process.execPath, [join(project, "node_modules/.bin/sextant"), "-V"], project);
    expect(bin.stdout).toBe(`${manifest.version}\n`);
  });

  it("imports the SDK under plain Node, and TypeScript finds its types", () => {
    writeFileSync(
      join(project, "check.mjs"),
      `import { Sextant, NotFoundError } from "${manifest.name}/sdk";
import { questionTranslations } from "${manifest.name}/sdk/node";
const sextant = new Sextant({ apiKey: "${generateApiKey()}", baseURL: "http://127.0.0.1:1" });
const words = questionTranslations("remove the first element of the list");
console.log(JSON.stringify({ client: typeof sextant.workspaces, error: NotFoundError.name, terms: words.map((w) => w.term) }));
`,
    );
    const node = run(process.execPath, ["check.mjs"], project);
    expect(node.status, node.stderr).toBe(0);
    const printed = JSON.parse(node.stdout) as { client: string; error: string; terms: string[] };
    expect(printed).toMatchObject({ client: "object", error: "NotFoundError" });
    // The translation table shipped in the package was found and read.
    expect(printed.terms).toContain("remov");

    writeFileSync(
      join(project, "check.ts"),
      `import { Sextant, type EnvSession, type StepResponse, type TranslatedWord } from "${manifest.name}/sdk";
import { questionTranslations } from "${manifest.name}/sdk/node";
export const sextant: Sextant = new Sextant({ apiKey: "${generateApiKey()}" });
export const words: TranslatedWord[] | undefined = questionTranslations("remove the first element");
export async function play(taskset: string): Promise<StepResponse> {
  const session: EnvSession = await sextant.envs.sessions.create({ taskset, task: 0, limits: { turns: 4 } });
  const step = await session.step([{ function: { name: "read_file", arguments: { path: "a" } } }]);
  // @ts-expect-error: a session's step takes tool calls, not text.
  await session.step("read_file");
  return step;
}
// @ts-expect-error: the declarations are real types, not \`any\`: an API key is a string.
new Sextant({ apiKey: 42 });
`,
    );
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          target: "ES2022",
          module: "NodeNext",
          moduleResolution: "NodeNext",
          lib: ["ES2023", "DOM"],
          types: [],
          skipLibCheck: true,
          noEmit: true,
        },
        files: ["check.ts"],
      }),
    );
    const tsc = run(process.execPath, [join(ROOT, "node_modules/typescript/bin/tsc"), "-p", project], project);
    expect(tsc.stdout + tsc.stderr).toBe("");
    expect(tsc.status).toBe(0);
  });

  it("indexes every supported language with its own grammars, and searches, against a local edge", async () => {
    const edge = await startLocalEdge();
    try {
      const env = {
        ...npmEnv(),
        SEXTANT_CONFIG_DIR: edge.configDir,
        SEXTANT_CACHE_DIR: mkdtempSync(join(tmpdir(), "sextant-cache-")),
      };
      const dir = makeTree({
        "orbit.ts": "export function apogee(orbit: { a: number; e: number }) {\n  return orbit.a * (1 + orbit.e);\n}\n",
        "view.tsx": "export function Chart() {\n  return <svg />;\n}\n",
        "clock.js": "export function sidereal(days) {\n  return days * 1.0027379;\n}\n",
        "stars.py": "def magnitude(flux):\n    return -2.5 * flux\n",
        "sky.go": "package sky\n\nfunc Declination(x float64) float64 {\n\treturn x / 2\n}\n",
        "moon.rs": "pub fn phase(days: f64) -> f64 {\n    days % 29.53\n}\n",
        "Tide.java": "class Tide {\n  double height(double t) {\n    return Math.sin(t);\n  }\n}\n",
      });
      const bin = join(project, "node_modules/.bin/sextant");
      const cli = (args: string[]) =>
        spawnSync(process.execPath, [bin, ...args], { cwd: project, env, encoding: "utf8", timeout: 120_000 });
      const indexed = cli(["--json", "index", dir]);
      expect(indexed.status, indexed.stderr).toBe(0);
      expect(JSON.parse(indexed.stdout)).toMatchObject({ files: Object.keys(LANGUAGES).length });
      const found = cli(["--json", "search", "the height of the tide", dir, "-k", "3"]);
      expect(found.status, found.stderr).toBe(0);
      expect(found.stdout).toContain("Tide.java");
    } finally {
      await edge.stop();
    }
  }, 240_000);
});
