/**
 * THIRD-PARTY-NOTICES.md is what the Worker's deployed bundle ships: the test builds the bundle the
 * way `npm run deploy` does (`wrangler deploy --dry-run`), writes the notices again and fails when the
 * committed file differs, naming the packages that changed. The generator itself is shown on a small
 * tree: scoped and nested packages, licence and NOTICE texts, a package with no licence file, and a
 * licence the policy refuses.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ROOT } from "../../scripts/licences.js";
import {
  bundledPackages,
  NOTICES_FILE,
  thirdPartyNotices,
  workerBundleInputs,
  workerNotices,
} from "../../scripts/third-party-notices.js";

/** The notices' table rows: one per package, `| name | version | licence |`. */
const rows = (markdown: string) => markdown.split("\n").filter((line) => /^\| (?!Package |-)/.test(line));

describe("the Worker's third-party notices", () => {
  // One build for both tests: wrangler takes seconds.
  let built: Promise<string[]> | undefined;
  const inputs = () => (built ??= workerBundleInputs());

  it("are committed as a fresh build writes them", async () => {
    const fresh = await workerNotices(await inputs());
    const committed = readFileSync(join(ROOT, NOTICES_FILE), "utf8");
    const stale = `${NOTICES_FILE} is out of date: run npm run notices`;
    expect(rows(committed), stale).toEqual(rows(fresh));
    expect(committed, stale).toBe(fresh);
  }, 120_000);

  it("cover the packages the bundle's script imports and the uPlot files wrangler ships beside it", async () => {
    const files = await inputs();
    expect(files).toContain("node_modules/uplot/dist/uPlot.iife.min.js");
    expect(files).toContain("node_modules/uplot/dist/uPlot.min.css");
    const names = bundledPackages(files).map((p) => p.name);
    for (const name of ["hono", "openai", "uplot", "zod"]) expect(names).toContain(name);
    // The CLI's packages are not in the Worker.
    expect(names).not.toContain("web-tree-sitter");
  }, 120_000);
});

describe("thirdPartyNotices", () => {
  const dir = mkdtempSync(join(tmpdir(), "sextant-notices-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const write = (path: string, contents: unknown) => {
    mkdirSync(join(dir, path, ".."), { recursive: true });
    writeFileSync(join(dir, path), typeof contents === "string" ? contents : JSON.stringify(contents));
  };
  write("package.json", { name: "fixture", version: "1.0.0", license: "Apache-2.0" });
  write("node_modules/@scope/apache/package.json", { name: "@scope/apache", version: "2.0.0", license: "Apache-2.0" });
  write("node_modules/@scope/apache/index.js", "");
  write("node_modules/@scope/apache/LICENSE", "Apache License\r\nVersion 2.0   \r\n");
  write("node_modules/@scope/apache/NOTICE", "Apache thing\nCopyright 2020 Someone");
  write("node_modules/mit/package.json", { name: "mit", version: "1.2.3", license: "MIT" });
  write("node_modules/mit/lib/a.js", "");
  write("node_modules/mit/lib/b.js", "");
  write("node_modules/mit/LICENSE.md", "MIT text with a ``` fence inside");
  write("node_modules/mit/node_modules/inner/package.json", { name: "inner", version: "0.1.0", license: "ISC" });
  write("node_modules/mit/node_modules/inner/index.js", "");
  write("node_modules/mit/node_modules/inner/README.md", "# inner\n\nISC licensed.");
  write("node_modules/gpl/package.json", { name: "gpl", version: "3.0.0", license: "GPL-3.0-only" });
  write("node_modules/gpl/index.js", "");
  const options = { root: dir, title: "Notices", intro: "For the fixture." };

  it("lists each package once, sorted, with its licence's text", async () => {
    const inputs = [
      "src/own.ts",
      "node_modules/mit/lib/b.js",
      "node_modules/mit/node_modules/inner/index.js",
      join(dir, "node_modules/@scope/apache/index.js"),
      "node_modules/mit/lib/a.js",
    ];
    expect(bundledPackages(inputs, dir).map((p) => `${p.name}@${p.version}`)).toEqual([
      "@scope/apache@2.0.0",
      "inner@0.1.0",
      "mit@1.2.3",
    ]);
    const notices = await thirdPartyNotices({ inputs: Object.fromEntries(inputs.map((i) => [i, {}])) }, options);
    expect(notices).toBe(await thirdPartyNotices([...inputs].reverse(), options));
    expect(rows(notices)).toEqual([
      "| @scope/apache | 2.0.0   | Apache-2.0 |",
      "| inner         | 0.1.0   | ISC        |",
      "| mit           | 1.2.3   | MIT        |",
    ]);
    expect(notices).toContain("## @scope/apache 2.0.0\n\nLicence: Apache-2.0, from the package's `LICENSE`:");
    expect(notices).toContain("```text\nApache License\nVersion 2.0\n```");
    expect(notices).toContain("Its `NOTICE`:\n\n```text\nApache thing\nCopyright 2020 Someone\n```");
    // A README is no licence file.
    expect(notices).toContain("## inner 0.1.0\n\nLicence: ISC. The package ships no licence file.\n");
    expect(notices).toContain("````text\nMIT text with a ``` fence inside\n````");
  }, 60_000);

  it("refuses a package whose licence the policy does not allow", async () => {
    await expect(
      thirdPartyNotices(["node_modules/mit/lib/a.js", "node_modules/gpl/index.js"], options),
    ).rejects.toThrow("gpl@3.0.0 (GPL-3.0-only)");
  }, 60_000);
});
