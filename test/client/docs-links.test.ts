/**
 * Every relative link and heading anchor of the docs resolves: `npm run docs:check` (remark-cli with
 * remark-validate-links, offline) over README.md, CHANGELOG.md, SECURITY.md and docs/. The checker
 * is first run, with the script's own options, on a fixture holding a broken link and a broken
 * anchor, so that a checker that reports nothing (a plugin not loaded, a file list that matches no
 * file) fails here instead of passing the docs.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = resolve(".");
const script = (JSON.parse(readFileSync("package.json", "utf8")) as { scripts: Record<string, string> }).scripts[
  "docs:check"
]!;
const [bin, ...args] = script.split(" ");
/** What the script checks: its arguments that name a file or folder rather than an option or its value. */
const TARGETS = args.filter((a) => /^[\w.-]+(\.md)?$/.test(a) && (a.endsWith(".md") || a === "docs"));
const OPTIONS = args.filter((a) => !TARGETS.includes(a));

/** The checker with the script's options on `targets`, in `cwd`: its exit status and its report. */
function check(cwd: string, targets: string[]): { status: number | null; report: string } {
  const result = spawnSync(join(ROOT, "node_modules/.bin", bin!), [...OPTIONS, ...targets], {
    cwd,
    encoding: "utf8",
    timeout: 60_000,
  });
  // remark colours its report whatever the environment says.
  const report = `${result.stdout}${result.stderr}`.replace(/\x1b\[[0-9;]*m/g, "");
  return { status: result.status, report };
}

// Inside the checkout, so that the plugin resolves from its node_modules as it does for the docs.
const fixtures = join(ROOT, ".vitest");
mkdirSync(fixtures, { recursive: true });
const fixture = mkdtempSync(join(fixtures, "docs-links-"));
afterAll(() => rmSync(fixture, { recursive: true, force: true }));

function writeFixture(readme: string): void {
  mkdirSync(join(fixture, "docs"), { recursive: true });
  writeFileSync(join(fixture, "docs/page.md"), "# Page\n\n## Setting up\n\nText.\n");
  writeFileSync(join(fixture, "README.md"), readme);
}

describe("the docs' link check", () => {
  it("checks the README, the changelog, the security policy and docs/", () => {
    expect(bin).toBe("remark");
    expect(TARGETS).toEqual(["README.md", "CHANGELOG.md", "SECURITY.md", "docs"]);
    expect(OPTIONS).toContain("--frail");
    expect(OPTIONS.join(" ")).toContain("--use remark-validate-links");
  });

  it("passes a fixture whose links and anchors all resolve", () => {
    writeFixture("# Fixture\n\nSee [setting up](docs/page.md#setting-up) and [below](#more).\n\n## More\n");
    const { status, report } = check(fixture, ["README.md", "docs"]);
    expect(report).not.toContain("warning");
    expect(status, report).toBe(0);
  });

  it("fails a fixture with a link to a missing file and an anchor to a missing heading", () => {
    writeFixture("# Fixture\n\nSee [the guide](docs/missing.md) and [setting up](docs/page.md#setting-upp).\n");
    const { status, report } = check(fixture, ["README.md", "docs"]);
    expect(status).not.toBe(0);
    expect(report).toMatch(/Cannot find file `docs\/missing\.md`/);
    expect(report).toMatch(/Cannot find heading for `#setting-upp` in `docs\/page\.md`/);
  });

  it("finds no broken link or anchor in the docs", () => {
    const { status, report } = check(ROOT, TARGETS);
    expect(report.trim()).toBe("");
    expect(status, report).toBe(0);
  });
});
