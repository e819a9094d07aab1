/**
 * The docs keep the shape a newcomer can use: a short README that links out, one page under docs/
 * per capability and for the HTTP API, configuration, deployment, security and benchmarks, history
 * in CHANGELOG.md in Keep a Changelog's form, and no commit hashes in the docs themselves.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const README = readFileSync("README.md", "utf8");
const DOCS = readdirSync("docs").filter((name) => name.endsWith(".md"));

/** Text outside fenced code blocks, where a hex string could be a real hash or an example's output. */
const prose = (markdown: string) => markdown.replace(/^```[\s\S]*?^```$/gm, "");

/** A word of 7 to 40 hex digits with both a letter and a digit: how a commit is named. */
const COMMIT_LIKE = /\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b/g;

describe("the docs' shape", () => {
  it("keeps the README to about 300 lines, with the two commands, a quick start and links into docs/", () => {
    expect(README.split("\n").length).toBeLessThanOrEqual(300);
    expect(README).toContain("npm install && npm start");
    expect(README).toContain("npm test");
    expect(README).toMatch(/^## Quick start$/m);
    const linked = new Set([...README.matchAll(/\]\(docs\/([\w-]+\.md)/g)].map((m) => m[1]));
    expect([...linked].sort()).toEqual([...DOCS].sort());
  });

  it("has a page for the HTTP API, configuration, deployment, security, benchmarks and editors", () => {
    for (const page of [
      "http-api.md",
      "configuration.md",
      "deployment.md",
      "security.md",
      "benchmarks.md",
      "editors.md",
      "development.md",
    ])
      expect(DOCS).toContain(page);
  });

  it("names no commit in the README or docs/ (history goes to CHANGELOG.md)", () => {
    const found = ["README.md", ...DOCS.map((name) => join("docs", name))].flatMap((file) =>
      [...prose(readFileSync(file, "utf8")).matchAll(COMMIT_LIKE)].map((m) => `${file}: ${m[0]}`),
    );
    expect(found).toEqual([]);
  });

  it("finds a commit hash where one is written", () => {
    expect("fixed in 014f223, see a8f5d69c".match(COMMIT_LIKE)).toEqual(["014f223", "a8f5d69c"]);
    expect("ports 20260426 and 2130706433, word cafebabe".match(COMMIT_LIKE)).toEqual(null);
  });

  it("keeps CHANGELOG.md in Keep a Changelog's form", () => {
    const changelog = readFileSync("CHANGELOG.md", "utf8");
    expect(changelog.startsWith("# Changelog\n")).toBe(true);
    expect(changelog).toContain("[Keep a Changelog 1.1.0](https://keepachangelog.com/en/1.1.0/)");
    const releases = [...changelog.matchAll(/^## (.*)$/gm)].map((m) => m[1]!);
    expect(releases[0]).toBe("[Unreleased]");
    for (const release of releases.slice(1)) expect(release).toMatch(/^\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}$/);
    const kinds = new Set([...changelog.matchAll(/^### (.*)$/gm)].map((m) => m[1]!));
    for (const kind of kinds)
      expect(["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]).toContain(kind);
  });
});
