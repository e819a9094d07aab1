import { describe, expect, it } from "vitest";
import { falsePerThousandFiles, measurePrecision } from "../../eval/secret-precision.js";

// Small packages from `npm run eval:secrets`'s pinned list: zod-to-json-schema declares
// `JsonSchema7NativeEnumType`, which an entropy check without context used to redact.
const SMOKE = [
  { name: "zod-to-json-schema", version: "3.25.2" },
  { name: "semver", version: "7.8.6" },
  { name: "debug", version: "4.4.3" },
];

describe("secret redaction over npm sources", () => {
  it("removes at most 1 non-secret per 1,000 files, by secretlint's recommended rules", async () => {
    const result = await measurePrecision(SMOKE);
    expect(result.files).toBeGreaterThan(100);
    const falseOnes = result.findings.filter((f) => f.false).map((f) => `${f.rule} ${f.file}: ${f.excerpt}`);
    expect(falsePerThousandFiles(result), falseOnes.join("\n")).toBeLessThanOrEqual(1);
  });
});
