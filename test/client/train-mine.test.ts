import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { create as createTar } from "tar";
import { fetchPackages } from "../../train/fetch.js";
import { emptyFingerprints, queryKey } from "../../train/fingerprint.js";
import { evenly, minePackage } from "../../train/mine.js";
import { mineInPool } from "../../train/pool.js";
import { assemble } from "../../train/stats.js";
import { makeTree } from "../support/fixture.js";

/** One small documented library per language, each in its own doc convention. */
const FILES = {
  "src/clock.js": `/**
 * Rounds a timestamp down to the start of the minute it falls in.
 * @param {number} ms
 */
export function floorMinute(ms) {
  // integer division keeps it exact
  return ms - (ms % 60000);
}

/** Short doc. */
export function tiny() {}
`,
  "pkg/geometry.py": `def circle_area(radius):
    """Compute the area enclosed by a circle of the given radius.

    :param radius: the radius
    """
    # pi r squared
    return 3.14159 * radius ** 2
`,
  "pkg/ring.go": `package ring

// Push adds a value to the buffer, dropping the oldest one when it is full.
func (b *Buffer) Push(v int) {
	b.items = append(b.items, v) // grow
}
`,
  "pkg/stack.rs": `/// Removes the topmost plate from the stack and hands it back, if there is one.
pub fn pop_plate(stack: &mut Vec<u32>) -> Option<u32> {
    // LIFO
    stack.pop()
}
`,
};

const dirs: string[] = [];
const tree = (files: Record<string, string>) => {
  const dir = makeTree(files, "sextant-train-");
  dirs.push(dir);
  return dir;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

describe("mining pairs", () => {
  it("pairs each documented definition's question with its code, comments and docstrings gone", async () => {
    const mined = await minePackage({ name: "fixture", dir: tree(FILES), roots: [""] }, emptyFingerprints());
    const byLanguage = Object.fromEntries(mined.pairs.map((p) => [p.language, p]));
    expect(byLanguage.javascript).toEqual({
      query: "Rounds a timestamp down to the start of the minute it falls in.",
      code: "export function floorMinute(ms) {\n  return ms - (ms % 60000);\n}",
      language: "javascript",
      package: "fixture",
    });
    expect(byLanguage.python).toMatchObject({
      query: "Compute the area enclosed by a circle of the given radius.",
      code: "def circle_area(radius):\n    ...\n    return 3.14159 * radius ** 2",
    });
    // Go's convention opens the doc with the name, which the eval's questions leave out.
    expect(byLanguage.go).toMatchObject({
      query: "adds a value to the buffer, dropping the oldest one when it is full.",
      code: "func (b *Buffer) Push(v int) {\n\tb.items = append(b.items, v)\n}",
    });
    expect(byLanguage.rust).toMatchObject({
      query: "Removes the topmost plate from the stack and hands it back, if there is one.",
      code: "pub fn pop_plate(stack: &mut Vec<u32>) -> Option<u32> {\n    stack.pop()\n}",
    });
    expect(mined.pairs).toHaveLength(4);
  });

  it("leaves out minified, oversized, test and vendored held-out files", async () => {
    const doc = "/** Rounds a timestamp down to the start of the minute it falls in. */\nexport const f = (x) => x;\n";
    const dir = tree({
      "lib/a.min.js": doc,
      "lib/big.js": doc + `export const table = "${"x".repeat(600 * 1024)}";\n`,
      "lib/a.test.js": doc,
      "lib/vendor/lodash/index.js": doc,
    });
    const mined = await minePackage({ name: "fixture", dir, roots: [""] }, emptyFingerprints());
    expect(mined.pairs).toEqual([]);
    expect(mined.excludedFiles).toEqual(["lib/vendor/lodash/index.js"]);
  });

  it("reads a package that ships only its build, once per question, but never its bundles", async () => {
    const doc = FILES["src/clock.js"];
    const dir = tree({
      "dist/esm/clock.js": doc,
      "dist/cjs/clock.js": doc.replace("export function floorMinute", "function floorMinute"),
      "dist/umd/clock.js": doc.replace("Rounds", "Bundled: rounds"),
    });
    const mined = await minePackage({ name: "fixture", dir }, emptyFingerprints());
    expect(mined.pairs.map((p) => p.query)).toEqual([
      "Rounds a timestamp down to the start of the minute it falls in.",
    ]);
  });

  it("drops a pair whose question is a held-out one", async () => {
    const held = emptyFingerprints();
    held.queries.add(queryKey("Compute the area enclosed by a circle of the given radius."));
    const mined = await minePackage({ name: "fixture", dir: tree(FILES), roots: [""] }, held);
    expect(mined.contaminatedPairs).toBe(1);
    expect(mined.pairs.map((p) => p.language)).not.toContain("python");
  });

  it("caps a package's pairs, chosen evenly through it", () => {
    expect(evenly([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 4)).toEqual([0, 2, 5, 7]);
    expect(evenly([1, 2], 4)).toEqual([1, 2]);
  });
});

describe("determinism", () => {
  it("gives the same pairs in the same order from the same packages, on one thread or two", async () => {
    const dirA = tree(FILES);
    const dirB = tree({ "src/other.js": FILES["src/clock.js"].replace("floorMinute", "floorMinuteAgain") });
    const tasks = [
      { name: "a", dir: dirA, roots: [""], maxPairs: 400 },
      { name: "b", dir: dirB, roots: [""], maxPairs: 400 },
    ];
    const run = async (threads: number) => {
      const mined = await mineInPool(tasks, emptyFingerprints(), threads, () => {});
      const fetched = tasks.map((t) => ({ ...t, version: "1.0.0", language: "javascript" as const }));
      const input = { fetched, mined, failed: [], excludedByName: [], heldOut: { sources: [], failed: [] } };
      return assemble({ ...input, seconds: { fetch: 0, fingerprint: 0, mine: 0, total: 0 } }).lines.join("");
    };
    const once = await run(1);
    expect(once.split("\n").filter(Boolean)).toHaveLength(5);
    expect(await run(2)).toBe(once);
    expect(await run(1)).toBe(once);
  });
});

describe("fetching", () => {
  it("uses a cached archive that matches its pin, and names and skips a package it cannot get", async () => {
    const work = mkdtempSync(join(tmpdir(), "sextant-train-fetch-"));
    dirs.push(work);
    const packageDir = tree({ "package/index.js": "module.exports = 1;\n" });
    const cacheDir = join(work, "downloads");
    const tgz = join(cacheDir, "cached-1.0.0.tgz");
    mkdirSync(cacheDir, { recursive: true });
    await createTar({ gzip: true, file: tgz, cwd: packageDir }, ["package"]);
    const integrity = `sha512-${createHash("sha512").update(readFileSync(tgz)).digest("base64")}`;
    // Nothing listens there: a package that needs the network fails at once, without leaving the machine.
    const registry = process.env.npm_config_registry;
    process.env.npm_config_registry = "http://127.0.0.1:9/";
    try {
      const list = {
        npm: [
          { name: "cached", version: "1.0.0", integrity },
          { name: "missing", version: "1.0.0", integrity: "sha512-AAAA" },
        ],
        debian: [],
      };
      const result = await fetchPackages(list, { cacheDir, srcDir: join(work, "src"), concurrency: 2, log: () => {} });
      expect(result.fetched.map((p) => p.name)).toEqual(["cached"]);
      expect(existsSync(join(result.fetched[0]!.dir, "index.js"))).toBe(true);
      expect(result.failed.map((f) => f.name)).toEqual(["missing@1.0.0"]);
    } finally {
      if (registry === undefined) delete process.env.npm_config_registry;
      else process.env.npm_config_registry = registry;
    }
  });
});
