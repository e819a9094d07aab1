import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const read = (path: string) => readFileSync(path, "utf8");

describe("the project's licence", () => {
  it("is Apache-2.0 in package.json, LICENSE and NOTICE alike", () => {
    const pkg = JSON.parse(read("package.json")) as { license?: string; files?: string[] };
    expect(pkg.license).toBe("Apache-2.0");
    const licence = read("LICENSE");
    expect(
      licence
        .split("\n")
        .slice(0, 3)
        .map((l) => l.trim()),
    ).toEqual(["Apache License", "Version 2.0, January 2004", "http://www.apache.org/licenses/"]);
    // The licence's text unchanged: its terms end where the appendix on applying it begins.
    expect(licence).toContain("END OF TERMS AND CONDITIONS");
    expect(read("NOTICE")).toMatch(/^Sextant\nCopyright \d{4} The Sextant authors\n/);
  });
});
