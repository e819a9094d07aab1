import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ALLOWED_SKIPS, summarize, type AllowedSkip } from "../../scripts/test-summary.js";

const ROOT = resolve(".");
const FIXTURE = "test/fixtures/skips";

describe("npm test's summary of vitest's report", () => {
  const dir = mkdtempSync(join(tmpdir(), "sextant-test-summary-"));
  let report = "";
  beforeAll(() => {
    // vitest's own JSON report of a suite that passes, fails, skips and leaves a test to do.
    const out = join(dir, "report.json");
    spawnSync("npx", ["vitest", "run", "--root", FIXTURE, "--reporter=json", `--outputFile.json=${out}`], {
      encoding: "utf8",
      env: { ...process.env, CI: "true" },
    });
    report = readFileSync(out, "utf8");
  }, 120_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const options = { root: ROOT, asRoot: false, narrowed: false };

  it("counts passed, failed and skipped tests as vitest does, and fails every skip nothing excuses", () => {
    const summary = summarize(report, { ...options, allowList: [] });
    expect(summary.passed).toBe(1);
    expect(summary.failed).toBe(1);
    expect(summary.skipped.map((s) => s.test).sort()).toEqual([
      "a skipped suite would pass",
      "a suite is to do",
      "a suite skips",
      "a suite skips as one kind of user",
    ]);
    expect(summary.skipped.every((s) => s.file === `${FIXTURE}/skips.fixture.ts`)).toBe(true);
    expect(summary.unexcused).toEqual(summary.skipped);
  });

  it("excuses a skip on the allow-list only as the kind of user the list names", () => {
    const allowList: AllowedSkip[] = [
      { file: `${FIXTURE}/skips.fixture.ts`, test: /as one kind of user$/, skipsWhen: "not-root", why: "needs root" },
    ];
    const asUser = summarize(report, { ...options, allowList });
    expect(asUser.unexcused.map((s) => s.test).sort()).toEqual([
      "a skipped suite would pass",
      "a suite is to do",
      "a suite skips",
    ]);
    expect(asUser.skipped.find((s) => s.test === "a suite skips as one kind of user")?.allowed).toBe("needs root");
    // As root the test should have run: its skip is not excused.
    const asRoot = summarize(report, { ...options, asRoot: true, allowList });
    expect(asRoot.unexcused).toHaveLength(4);
  });

  it("fails no skip of a run narrowed on the command line", () => {
    const summary = summarize(report, { ...options, narrowed: true, allowList: [] });
    expect(summary.skipped).toHaveLength(4);
    expect(summary.unexcused).toEqual([]);
  });

  it("refuses a report that is not vitest's", () => {
    expect(() => summarize(JSON.stringify({ numPassedTests: 3 }), options)).toThrow();
  });

  it("names only files that exist in its allow-list", () => {
    for (const entry of ALLOWED_SKIPS) expect(existsSync(entry.file), entry.file).toBe(true);
  });
});
