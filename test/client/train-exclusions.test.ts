import { describe, expect, it } from "vitest";
import { isExcludedFromTraining } from "../../train/exclusions.js";
import { extractFile } from "../../train/extract.js";
import { addFingerprints, contamination, emptyFingerprints } from "../../train/fingerprint.js";
import { parseStanzas, rankDebian } from "../../train/select-debian.js";

/** HELD-OUT.md's packages and the dev eval's never reach training: by name, by path, and by content. */
describe("training exclusions by name", () => {
  it("excludes every reserved and dev-eval npm package, scoped and suffixed names included", () => {
    for (const name of [
      "lodash",
      "lodash.merge",
      "lodash-es",
      "@types/lodash",
      "underscore",
      "date-fns-tz",
      "@date-fns/utc",
      "@tiptap/react",
      "prosemirror-view",
      "ramda",
      "rxjs",
      "async",
      "neo-async",
      "es-toolkit",
    ])
      expect(isExcludedFromTraining(name), name).toBe(true);
    for (const name of ["express", "zod", "async-retry", "lodashed", "rxjsx"])
      expect(isExcludedFromTraining(name), name).toBe(false);
  });

  it("excludes the reserved and dev-eval Debian packages, a Rust crate's feature packages too", () => {
    for (const name of [
      "python3-werkzeug",
      "python3-click",
      "python3-flask",
      "golang-golang-x-text-dev",
      "librust-petgraph-dev",
      "librust-petgraph+serde-dev",
      "librust-regex-syntax-dev",
      "python3-dateutil",
      "golang-github-google-go-cmp-dev",
      "librust-itertools-dev",
    ])
      expect(isExcludedFromTraining(name), name).toBe(true);
    for (const name of ["python3-attr", "golang-github-spf13-cobra-dev", "librust-serde-dev", "python3-more-itertools"])
      expect(isExcludedFromTraining(name), name).toBe(false);
  });

  it("excludes held-out and dev-eval code vendored anywhere in a path", () => {
    for (const path of [
      "usr/lib/python3/dist-packages/werkzeug/routing/map.py",
      "usr/lib/python3/dist-packages/pip/_vendor/click/core.py",
      "usr/lib/python3/dist-packages/flask/app.py",
      "usr/share/gocode/src/github.com/x/y/vendor/golang.org/x/text/language/tags.go",
      "usr/share/cargo/registry/petgraph-0.6.2/src/lib.rs",
      "usr/share/cargo/registry/regex-syntax-0.6.27/src/ast/mod.rs",
      "usr/lib/python3/dist-packages/botocore/vendored/dateutil/parser.py",
      "usr/share/gocode/src/github.com/google/go-cmp/cmp/compare.go",
      "usr/share/cargo/registry/itertools-0.10.3/src/lib.rs",
      "dist/vendor/lodash/index.js",
      "node_modules/rxjs/src/index.ts",
    ])
      expect(isExcludedFromTraining(path), path).toBe(true);
    for (const path of [
      "usr/lib/python3/dist-packages/flask_cors/core.py",
      "usr/lib/python3/dist-packages/more_itertools/more.py",
      "usr/lib/python3/dist-packages/attr/_make.py",
      "src/asyncHelpers.ts",
    ])
      expect(isExcludedFromTraining(path), path).toBe(false);
  });

  it("excludes packages named after a reserved one (extensions, plugins, ports), not names that merely start alike", () => {
    for (const name of [
      "python3-flask-restful",
      "python3-click-log",
      "underscore.string",
      "rxjs-compat",
      "prosemirror-tables",
    ])
      expect(isExcludedFromTraining(name), name).toBe(true);
    for (const name of [
      "python3-clickhouse-driver",
      "python3-async-timeout",
      "asyncio",
      "flasky",
      "golang-github-spf13-cobra-dev",
    ])
      expect(isExcludedFromTraining(name), name).toBe(false);
  });

  it("never selects an excluded Debian package, however many depend on it", () => {
    const stanza = (name: string, depends = "") =>
      `Package: ${name}\nVersion: 1.0-1\nArchitecture: all\nInstalled-Size: 100\nSHA256: ${"a".repeat(64)}\nDepends: ${depends}\n`;
    const stanzas = parseStanzas(
      [
        stanza("python3-click"),
        stanza("python3-attr"),
        stanza("python3-app", "python3-click, python3-attr (>= 1)"),
        stanza("python3-tool", "python3-click"),
      ].join("\n"),
    );
    const names = rankDebian(stanzas, 10).map((p) => p.name);
    expect(names).not.toContain("python3-click");
    expect(names[0]).toBe("python3-attr");
  });
});

/** An invented stand-in for a held-out library: the test never carries a reserved package's text. */
const HELD = `/**
 * Measures how far apart two lanterns hang along the harbour wall, in whole fathoms.
 */
export function lanternGap(first, second) {
  const northern = Math.max(first.position, second.position);
  const southern = Math.min(first.position, second.position);
  const difference = northern - southern;
  const fathoms = Math.round(difference / FATHOM_LENGTH);
  const lamplighter = first.keeper ?? second.keeper ?? harbourMaster();
  lamplighter.notebook.record(first.name, second.name, fathoms);
  const tideAdjusted = applyTide(fathoms, lamplighter.notebook.tideTable);
  if (tideAdjusted !== fathoms) lamplighter.notebook.flag(first.name);
  return fathoms > 0 ? fathoms : describeOverlap(first, second);
}
`;

async function heldFingerprints() {
  const held = emptyFingerprints();
  addFingerprints(held, (await extractFile("held/lantern.js", HELD))!);
  return held;
}

describe("training exclusions by content", () => {
  it("drops a file under another name that carries a held-out doc sentence", async () => {
    const file = await extractFile(
      "other/util.js",
      `// Measures how far apart two lanterns hang along the harbour wall, in whole fathoms.\nexport const gap = (a, b) => b - a;\n`,
    );
    expect(contamination(file!, await heldFingerprints())).toBe("held-out doc sentence");
  });

  it("drops a file whose code is a copied held-out block under another name and another doc", async () => {
    const copied = HELD.replace(/\/\*\*[\s\S]*?\*\//, "/** Distance between two marks. */").replace(
      "lanternGap",
      "markDistance",
    );
    const file = await extractFile("vendor-free/marks.ts", `${copied}\nexport const unit = 6;\n`);
    expect(contamination(file!, await heldFingerprints())).toMatch(/code shingles held out/);
  });

  it("keeps an unrelated file", async () => {
    const file = await extractFile(
      "own/queue.js",
      `/** Adds a job to the end of the queue and wakes one idle worker to run it. */\nexport function enqueue(queue, job) {\n  queue.items.push(job);\n  queue.idle.shift()?.wake();\n  return queue.items.length;\n}\n`,
    );
    expect(contamination(file!, await heldFingerprints())).toBeUndefined();
  });

  it("ignores license headers shared by whole ecosystems", async () => {
    const go = "// Use of this source code is governed by a BSD-style license that can be found in the LICENSE file.\n";
    const rust =
      "// Licensed under the Apache License, Version 2.0 or the MIT license, at your option.\n// This file may not be copied, modified, or distributed except according to those terms.\n";
    const held = emptyFingerprints();
    addFingerprints(held, (await extractFile("held/a.go", `${go}package a\n`))!);
    addFingerprints(held, (await extractFile("held/a.rs", `${rust}pub fn a() {}\n`))!);
    const goFile = await extractFile("own/b.go", `${go}package b\n\nfunc B() int { return 1 }\n`);
    const rustFile = await extractFile("own/b.rs", `${rust}pub fn b() -> u8 { 1 }\n`);
    expect(contamination(goFile!, held)).toBeUndefined();
    expect(contamination(rustFile!, held)).toBeUndefined();
  });
});
