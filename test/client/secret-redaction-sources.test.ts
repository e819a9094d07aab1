/**
 * The device's secret redaction over real package sources, from this checkout's node_modules: three
 * of `npm run eval:secrets`'s pinned packages, which npm installs at the same versions. The eval
 * itself downloads its twenty packages and measures how many redactions are not secrets; here
 * nothing leaves the machine.
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { judge, measurePackage, type Precision } from "../../eval/secret-precision.js";

const NODE_MODULES = new URL("../../node_modules/", import.meta.url).pathname;
const INSTALLED = ["zod-to-json-schema", "semver", "debug"];

describe("secret redaction over installed package sources", () => {
  it("redacts nothing in zod-to-json-schema, semver and debug, whose long names (JsonSchema7NativeEnumType) are not secrets", async () => {
    const result: Precision = { files: 0, findings: [] };
    for (const name of INSTALLED) {
      const dir = join(NODE_MODULES, name);
      expect(existsSync(join(dir, "package.json")), `${name} is installed`).toBe(true);
      await measurePackage(name, dir, result);
    }
    // The identifier an entropy check without context once redacted is among what was read.
    const declarations = readdirSync(join(NODE_MODULES, "zod-to-json-schema"), { recursive: true, encoding: "utf8" })
      .filter((path) => path.endsWith(".d.ts"))
      .filter((path) =>
        readFileSync(join(NODE_MODULES, "zod-to-json-schema", path), "utf8").includes("JsonSchema7NativeEnumType"),
      );
    expect(declarations.length).toBeGreaterThan(0);
    expect(result.files).toBeGreaterThan(100);
    expect(result.findings).toEqual([]);
  });
});

describe("the eval's judgement of a redaction", () => {
  // Built at run time, so that no scanner takes this file for a leak.
  const token = "ghp_" + "aB3dE5gH7jK9".repeat(3);
  const text = `const value = "${token}";\n`;
  const start = text.indexOf(token);
  const github = "@secretlint/secretlint-rule-github";

  it("counts a secret where the preset's own rule flags the redacted range on its lines", async () => {
    expect(await judge("a.ts", text, { start, end: start + token.length, rule: github })).toEqual({
      start,
      end: start + token.length,
      rule: github,
      file: "a.ts",
      excerpt: token,
      false: false,
    });
  });

  it("counts not a secret a redaction by a rule outside the preset, or one the preset's rule does not flag there", async () => {
    const named = await judge("a.ts", text, { start, end: start + token.length, rule: "named-credential" });
    expect(named.false).toBe(true);
    const elsewhere = await judge("a.ts", text, { start: 0, end: 5, rule: github });
    expect([elsewhere.excerpt, elsewhere.false]).toEqual(["const", true]);
  });
});
