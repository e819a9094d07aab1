import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildBundle, MAX_GZIP_BYTES, type Bundle } from "../../scripts/bundle-size.js";

const MODEL = new URL("../../protocol/embedder/model/", import.meta.url);
/**
 * The bundle's JavaScript today is about 1.8 MiB. The trained model's table alone (20k × 128 int8)
 * would add 3.3 MiB as base64 and more as an array literal, so 2.5 MiB leaves room for code to grow
 * and none for the model to slip into the script.
 */
const MAX_JS_BYTES = 2.5 * 1024 * 1024;
const MAX_OTHER_DATA_BYTES = 64 * 1024;

describe("the deployable bundle", () => {
  let outdir: string;
  let bundle: Bundle;
  beforeAll(() => {
    outdir = mkdtempSync(join(tmpdir(), "sextant-bundle-test-"));
    bundle = buildBundle(outdir);
  });
  afterAll(() => rmSync(outdir, { recursive: true, force: true }));

  it("ships the model's weights and vocabulary, byte for byte, as its only large data modules", () => {
    // Every module but the Worker's own code is data (uPlot's browser build is text the dashboard serves).
    const data = bundle.modules.filter((m) => m.name !== "index.js");
    const model = ["weights.bin", "vocab.txt"].map((file) => {
      const module = data.find((m) => m.name.replace(/^[0-9a-f]+-/, "") === file);
      expect(module?.name.replace(/^[0-9a-f]+-/, ""), file).toBe(file);
      expect(readFileSync(join(outdir, module!.name)).equals(readFileSync(new URL(file, MODEL)))).toBe(true);
      return module!;
    });
    // Anything else a module rule brings in stays small: a data module past 64 KiB (another model, a
    // grammar) is a choice about the bundle budget that should be made here, not slip in.
    const large = data.filter((m) => !model.includes(m) && m.bytes > MAX_OTHER_DATA_BYTES).map((m) => m.name);
    expect(large).toEqual([]);
    // The dashboard's Evals panel script and uPlot are text the page loads, not code the Worker runs.
    expect(
      bundle.modules
        .filter((m) => m.name.endsWith(".js"))
        .map((m) => m.name.replace(/^[0-9a-f]+-/, ""))
        .sort(),
    ).toEqual(["evals-panel.js", "index.js", "uPlot.iife.min.js"]);
  });

  it("holds no model data in its JavaScript", () => {
    const js = readFileSync(join(outdir, "index.js"), "utf8");
    expect(js.length).toBeLessThan(MAX_JS_BYTES);
    // No long base64 run, no long numeric array literal, no run of the vocabulary's terms.
    expect(js.match(/[A-Za-z0-9+/=]{1024,}/)).toBeNull();
    expect(js.match(/\[(?:\s*-?\d+(?:\.\d+)?(?:e-?\d+)?\s*,){256,}/)).toBeNull();
    const terms = readFileSync(new URL("vocab.txt", MODEL), "utf8").split("\n").slice(0, 40);
    for (const separator of ["\\n", "\n", '","', '", "']) expect(js).not.toContain(terms.join(separator));
  });

  it("fits Cloudflare's free plan, 3 MiB compressed", () => {
    expect(bundle.gzipBytes).toBeLessThan(MAX_GZIP_BYTES);
    expect(bundle.wranglerSummary).toMatch(/Total Upload: .* \/ gzip: /);
  });
});
