import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { hashFile, scanWorkspace } from "../../client/workspace/scanner.js";
import { WorkspaceSecret } from "../../client/workspace/secret.js";
import { Upsert } from "../../protocol/sync.js";
import { emptyState } from "../../client/workspace/state.js";
import { scanPaths } from "../../client/workspace/targeted-scan.js";
import { backdate, git, gitVisibleFiles, makeTree, writeTree } from "../support/fixture.js";

const secret = WorkspaceSecret.generate();
const gitOnly = { useDefaults: false, globalExcludes: null } as const;
const scanned = async (root: string, options = {}) =>
  [...(await scanWorkspace(root, secret, { ...gitOnly, ...options })).files.keys()].sort();

describe("ignore semantics", async () => {
  it("matches git on nested .gitignore files, negation, anchoring, directory rules and info/exclude", async () => {
    const root = makeTree({
      ".gitignore": "*.log\n!keep.log\n/top-only.txt\nbuild/\ndocs/**/*.tmp\n**/cache\n",
      "keep.log": "k",
      "drop.log": "d",
      "top-only.txt": "t",
      "sub/top-only.txt": "not anchored here",
      "sub/.gitignore": "!drop.log\n*.md\n!README.md\n",
      "sub/drop.log": "re-included below",
      "sub/notes.md": "n",
      "sub/README.md": "r",
      "build/out.js": "o",
      "sub/build/out.js": "o",
      "docs/a/b.tmp": "x",
      "docs/a/b.txt": "x",
      "x/cache/y": "y",
      cache: "file named cache",
      "deep/a/b/c/d.ts": "d",
      "deep/a/.gitignore": "b/c/\n",
      "deep/a/b/e.ts": "e",
      "spaces in name.txt": "s",
      "ünïcode.ts": "u",
      "excluded-by-info.txt": "i",
      "Case.TXT": "c",
    });
    git(root, ["init", "-q"]);
    writeFileSync(join(root, ".git/info/exclude"), "excluded-by-info.txt\n*.txt\n!spaces in name.txt\n");
    expect(await scanned(root)).toEqual(gitVisibleFiles(root));
  });

  it("matches git on random trees with random ignore rules", async () => {
    const names = ["a", "b", "c.ts", "d.log", "e.md", "build", "x.ts"];
    const patterns = [
      "a",
      "b/",
      "*.log",
      "!d.log",
      "/c.ts",
      "**/x.ts",
      "build/",
      "!build/",
      "*.md",
      "!e.md",
      "a/**",
      "b/*.ts",
      "!x.ts",
      "e*",
    ];
    const path = fc.array(fc.constantFrom(...names), { minLength: 1, maxLength: 3 }).map((p) => p.join("/"));
    const rules = fc.array(fc.constantFrom(...patterns), { maxLength: 5 }).map((p) => p.join("\n") + "\n");
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(path, { minLength: 1, maxLength: 12 }),
        fc.array(fc.tuple(fc.constantFrom("", "a", "b", "build", "a/b"), rules), { maxLength: 3 }),
        async (paths, ignores) => {
          // A path cannot be both a file and a directory: keep the first of each conflict.
          const files: Record<string, string> = {};
          for (const p of paths) {
            const clash = Object.keys(files).some((f) => f.startsWith(`${p}/`) || p.startsWith(`${f}/`));
            if (!clash) files[p] = p;
          }
          for (const [dir, text] of ignores) {
            const at = dir ? `${dir}/.gitignore` : ".gitignore";
            if (Object.keys(files).some((f) => f === dir || at.startsWith(`${f}/`))) continue;
            files[at] = text;
          }
          const root = makeTree(files);
          git(root, ["init", "-q"]);
          expect(await scanned(root)).toEqual(gitVisibleFiles(root));
        },
      ),
      { numRuns: 60 },
    );
  });

  it("lets .sextantignore exclude more and re-include what git ignores", async () => {
    const root = makeTree({
      ".gitignore": "generated/\n*.snap\n",
      ".sextantignore": "!generated/\n!keep.snap\nvendor/\n",
      "generated/api.ts": "g",
      "keep.snap": "k",
      "other.snap": "o",
      "vendor/lib.js": "v",
      "src/main.ts": "m",
    });
    git(root, ["init", "-q"]);
    expect(await scanned(root)).toEqual([
      ".gitignore",
      ".sextantignore",
      "generated/api.ts",
      "keep.snap",
      "src/main.ts",
    ]);
  });

  it("skips lock files, .env files and keys by default, unless .sextantignore re-includes them", async () => {
    const root = makeTree({
      ".env": "SECRET=1",
      ".env.local": "SECRET=2",
      ".env.example": "SECRET=",
      "package-lock.json": "{}",
      "server.pem": "-----BEGIN",
      "node_modules/x/index.js": "x",
      "src/app.ts": "a",
    });
    expect(await scanned(root, { useDefaults: true })).toEqual(["src/app.ts"]);
    writeFileSync(join(root, ".sextantignore"), "!.env.example\n");
    expect(await scanned(root, { useDefaults: true })).toEqual([".env.example", ".sextantignore", "src/app.ts"]);
    // A .gitignore negation cannot re-include a default exclusion.
    writeFileSync(join(root, ".gitignore"), "!.env\n");
    expect(await scanned(root, { useDefaults: true })).not.toContain(".env");
  });
});

describe("scanner", async () => {
  it("skips binaries, oversized files and symlinks, and never reads outside the workspace", async () => {
    const outside = makeTree({ "secret.txt": "outside" });
    const root = makeTree({
      "text.ts": "x",
      "image.png": Buffer.from([0x89, 0x50, 0x00, 0x47]),
      "big.txt": "y".repeat(2000),
    });
    symlinkSync(join(outside, "secret.txt"), join(root, "link.txt"));
    symlinkSync(outside, join(root, "linked-dir"));
    const result = await scanWorkspace(root, secret, { ...gitOnly, maxFileBytes: 1000 });
    expect([...result.files.keys()]).toEqual(["text.ts"]);
    expect(result.skipped).toMatchObject({ binary: 1, tooLarge: 1, symlink: 2 });
    expect(new Set(result.skippedFiles)).toEqual(
      new Set([
        { path: "image.png", reason: "binary" },
        { path: "big.txt", reason: "tooLarge" },
        { path: "link.txt", reason: "symlink" },
        { path: "linked-dir", reason: "symlink" },
      ]),
    );
    // A warm scan that finds nothing changed names the same paths.
    const warm = await scanWorkspace(root, secret, {
      ...gitOnly,
      maxFileBytes: 1000,
      previous: result.files,
      previousDirs: result.dirs,
      previousStartedAt: Date.now() + 1,
      previousRules: result.rules,
      previousSkipped: result.skipped,
      previousSkippedFiles: result.skippedFiles,
    });
    expect(warm.skippedFiles).toEqual(result.skippedFiles);
  });

  // Linux's 4,096-byte PATH_MAX keeps a real path from reaching MAX_PATH_LENGTH encrypted before
  // it passes MAX_DEPTH, so depth is the limit a test can meet on disk.
  it("skips, and names, a directory too deep for the sync protocol, and keeps everything else", async () => {
    const deep = Array.from({ length: 200 }, () => "d").join("/");
    const root = makeTree({ "ok.ts": "ok", [`${deep}/deep.ts`]: "deep", "a/b/c.ts": "c" });
    const result = await scanWorkspace(root, secret, gitOnly);
    expect([...result.files.keys()].sort()).toEqual(["a/b/c.ts", "ok.ts"]);
    expect(result.skipped.pathTooLong).toBe(1);
    const [named] = result.skippedFiles.filter((f) => f.reason === "pathTooLong");
    expect(named!.path.split("/")).toHaveLength(64);
    expect(deep.startsWith(named!.path)).toBe(true);
    // Everything kept fits: encrypted, no path passes the protocol's limits.
    for (const path of result.files.keys())
      expect(Upsert.shape.path.safeParse(secret.encryptPath(path)).success).toBe(true);
  });

  it("counts a file that vanished before it was read instead of failing", async () => {
    const root = makeTree({ "a.ts": "a" });
    expect(hashFile(join(root, "gone.ts"), {} as never, secret)).toBe("vanished");
  });

  it("names a file that vanished between listing and reading, and one that is a FIFO", async () => {
    const root = makeTree({ "a.ts": "a", "b.ts": "b" });
    spawnSync("mkfifo", [join(root, "pipe")]);
    const result = await scanWorkspace(root, secret, {
      ...gitOnly,
      // Called once the walk has listed the root, before any file is read.
      onProgress: (e) => e.phase === "scan" && rmSync(join(root, "b.ts"), { force: true }),
    });
    expect([...result.files.keys()]).toEqual(["a.ts"]);
    expect(result.skippedFiles).toContainEqual({ path: "b.ts", reason: "vanished" });
    expect(result.skippedFiles).toContainEqual({ path: "pipe", reason: "special" });
  });

  // Permissions do not stop root, so this runs only as an ordinary user.
  it.skipIf(process.getuid?.() === 0)("counts a directory it cannot read instead of failing", async () => {
    const root = makeTree({ "ok.ts": "ok", "locked/inner.ts": "x" });
    chmodSync(join(root, "locked"), 0o000);
    try {
      const result = await scanWorkspace(root, secret, gitOnly);
      expect(result.files.has("ok.ts")).toBe(true);
      expect(result.files.has("locked/inner.ts")).toBe(false);
      expect(result.skipped.unreadable).toBe(1);
    } finally {
      chmodSync(join(root, "locked"), 0o755);
    }
  });

  it("rescans warm without reading unchanged files, and re-reads changed and racily clean ones", async () => {
    const files = Object.fromEntries(
      Array.from({ length: 50 }, (_, i) => [`src/f${i}.ts`, `export const v${i} = ${i};`]),
    );
    const root = makeTree(files);
    backdate(root, Object.keys(files));
    const cold = await scanWorkspace(root, secret, gitOnly);
    expect(cold.hashed).toBe(50);
    const warm = await scanWorkspace(root, secret, {
      ...gitOnly,
      previous: cold.files,
      previousStartedAt: cold.startedAt,
    });
    expect(warm.hashed).toBe(0);
    expect(warm.files).toEqual(cold.files);

    writeTree(root, { "src/f1.ts": "changed" });
    const afterEdit = await scanWorkspace(root, secret, {
      ...gitOnly,
      previous: warm.files,
      previousStartedAt: warm.startedAt,
    });
    expect(afterEdit.hashed).toBe(1);
    expect(afterEdit.files.get("src/f1.ts")!.hash).not.toBe(cold.files.get("src/f1.ts")!.hash);

    // An edit that keeps the size and lands in the same timestamp as the cached one (coarse
    // file-system clocks) is invisible to stat: only the racily-clean rule catches it.
    const second = Math.floor(Date.now() / 1000) - 100;
    utimesSync(join(root, "src/f2.ts"), second, second);
    const cached = await scanWorkspace(root, secret, {
      ...gitOnly,
      previous: afterEdit.files,
      previousStartedAt: afterEdit.startedAt,
    });
    const before = cached.files.get("src/f2.ts")!;
    writeTree(root, { "src/f2.ts": "export const v2 = 9;" });
    utimesSync(join(root, "src/f2.ts"), second, second);
    const fooled = await scanWorkspace(root, secret, {
      ...gitOnly,
      previous: cached.files,
      previousStartedAt: second * 1000 + 1,
    });
    expect(fooled.files.get("src/f2.ts")!.hash).toBe(before.hash);
    const racy = await scanWorkspace(root, secret, {
      ...gitOnly,
      previous: cached.files,
      previousStartedAt: second * 1000,
    });
    expect(racy.files.get("src/f2.ts")!.hash).not.toBe(before.hash);
  });

  it("hashes what is on disk: equal content, equal hash; one changed byte, another hash", async () => {
    const root = makeTree({ "a/x.ts": "same", "b/x.ts": "same", "c/x.ts": "samE" });
    const { files } = await scanWorkspace(root, secret, gitOnly);
    expect(files.get("a/x.ts")!.hash).toBe(files.get("b/x.ts")!.hash);
    expect(files.get("a/x.ts")!.hash).not.toBe(files.get("c/x.ts")!.hash);
  });

  it("does not descend into .git", async () => {
    const root = makeTree({ "a.ts": "a" });
    mkdirSync(join(root, ".git/objects"), { recursive: true });
    writeFileSync(join(root, ".git/objects/x"), "obj");
    expect(await scanned(root)).toEqual(["a.ts"]);
  });
});

describe("warm scan with parallel stat", () => {
  it("finds exactly what a cold scan finds, and every kind of change, on a tree large enough to use threads", async () => {
    const files = Object.fromEntries(
      Array.from({ length: 5000 }, (_, i) => [`d${i % 50}/e${i % 7}/f${i}.ts`, `v${i}`]),
    );
    const root = makeTree(files);
    backdate(root, Object.keys(files));
    const first = await scanWorkspace(root, secret, gitOnly);
    const options = (prev: typeof first) => ({
      ...gitOnly,
      previous: prev.files,
      previousDirs: prev.dirs,
      previousStartedAt: Date.now() + 1,
      previousRules: prev.rules,
      previousSkipped: prev.skipped,
      previousSkippedFiles: prev.skippedFiles,
    });
    const warm = await scanWorkspace(root, secret, options(first));
    expect(warm.hashed).toBe(0);
    expect(warm.relisted).toBe(0);
    expect(warm.files.sameFiles(first.files)).toBe(true);

    writeTree(root, { "d1/e1/f1.ts": "edited!", "d2/new.ts": "new" });
    rmSync(join(root, "d3/e3/f3.ts"));
    writeFileSync(join(root, ".gitignore"), "d4/\n");
    const after = await scanWorkspace(root, secret, options(warm));
    const cold = await scanWorkspace(root, secret, gitOnly);
    expect([...after.files.keys()].sort()).toEqual([...cold.files.keys()].sort());
    for (const path of cold.files.keys()) expect(after.files.hash(path)).toBe(cold.files.hash(path));
    expect(after.files.has("d4/e4/f4.ts")).toBe(false);
    expect(after.files.hash("d1/e1/f1.ts")).not.toBe(first.files.hash("d1/e1/f1.ts"));

    // Rules outside the tree change nothing that stat can see: only their fingerprint tells.
    mkdirSync(join(root, ".git/info"), { recursive: true });
    writeFileSync(join(root, ".git/info/exclude"), "");
    backdate(root, ["d1/e1/f1.ts", "d2/new.ts", ".gitignore", ".", "d2", "d1/e1"]);
    const settled = await scanWorkspace(root, secret, gitOnly);
    const again = await scanWorkspace(root, secret, options(settled));
    // Nothing changed: the previous result itself comes back, without a walk.
    expect(again.files).toBe(settled.files);
    writeFileSync(join(root, ".git/info/exclude"), "d5/\n");
    const excluded = await scanWorkspace(root, secret, options(settled));
    expect(excluded.files.has("d5/e5/f5.ts")).toBe(false);
    expect(excluded.files.size).toBe(settled.files.size - 100);
  });
});

describe("targeted scan of reported paths", () => {
  it("gives what a full scan gives for edits, additions, deletions and newly ignored files", async () => {
    const root = makeTree({ ".gitignore": "*.log\n", "a/x.ts": "x", "a/y.ts": "y", "b/z.ts": "z" });
    backdate(root, ["a/x.ts", "a/y.ts", "b/z.ts", ".gitignore"]);
    const state = emptyState();
    const first = await scanWorkspace(root, secret, gitOnly);
    Object.assign(state, { entries: first.files, dirs: first.dirs, rules: first.rules, startedAt: first.startedAt });

    writeTree(root, { "a/x.ts": "x2", "b/new.ts": "n", "b/debug.log": "ignored" });
    rmSync(join(root, "a/y.ts"));
    const targeted = scanPaths(root, secret, state, ["a/x.ts", "a/y.ts", "b/new.ts", "b/debug.log"], {})!;
    const full = await scanWorkspace(root, secret, gitOnly);
    expect([...targeted.files.keys()].sort()).toEqual([...full.files.keys()].sort());
    for (const path of full.files.keys()) expect(targeted.files.hash(path)).toBe(full.files.hash(path));
  });

  it("declines directory events, ignore-file edits and paths it has no listing for", async () => {
    const root = makeTree({ "a/x.ts": "x" });
    const state = emptyState();
    const first = await scanWorkspace(root, secret, gitOnly);
    Object.assign(state, { entries: first.files, dirs: first.dirs, rules: first.rules, startedAt: first.startedAt });
    mkdirSync(join(root, "newdir"));
    expect(scanPaths(root, secret, state, ["newdir"], {})).toBeUndefined();
    writeTree(root, { ".gitignore": "a/\n" });
    expect(scanPaths(root, secret, state, [".gitignore"], {})).toBeUndefined();
    writeTree(root, { "unseen/deep/f.ts": "f" });
    expect(scanPaths(root, secret, state, ["unseen/deep/f.ts"], {})).toBeUndefined();
  });
});
