import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { indexWorkspace, openWorkspace } from "../../client/workspace/session.js";
import { makeTree } from "../support/fixture.js";
import { edgeWithCliForSuite, withCliSdk } from "../support/local-edge.js";

/** `sextant index` on trees with files a sync cannot carry: each is skipped and named, never fatal. */
describe("indexing hostile trees", () => {
  const suite = edgeWithCliForSuite();
  const cli = suite.cli;
  const workspaceIds = () =>
    (JSON.parse(cli(["--json", "workspace", "list"]).stdout) as { id: string }[]).map((w) => w.id).sort();

  it("skips a path too deep for the protocol and a file too large, names both, and syncs the rest", () => {
    const deep = Array.from({ length: 200 }, () => "d").join("/");
    const dir = makeTree({ "ok.ts": "export const ok = 1;", [`${deep}/deep.ts`]: "x", "big.txt": "y".repeat(5000) });
    const run = cli(["--json", "index", dir, "--max-file-bytes", "4096"]);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({ files: 1, skipped: { pathTooLong: 1, tooLarge: 1 }, sync: { converged: true } });
    const named = report.skippedFiles as { path: string; reason: string }[];
    expect(named).toContainEqual({ path: "big.txt", reason: "tooLarge" });
    expect(named.find((f) => f.reason === "pathTooLong")?.path.startsWith("d/d/d/")).toBe(true);

    // Human output names them too, and so does a run that finds nothing changed.
    const again = cli(["index", dir, "--max-file-bytes", "4096"]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain("skipped big.txt: too large");
    expect(again.stdout).toMatch(/skipped d\/d\/d\/.*: path too long/);
  });

  it("indexes a file near the 1 MiB cap whose chunks no one request body holds, staging them over several", () => {
    // Short lines: JSON writes each newline as two bytes, so the chunks take far more than 1 MiB in a body.
    const dir = makeTree({
      "near-cap.txt": "ab\n".repeat(1_039_000 / 3) + "function zebraCrossingFinale() { return 1; }\n",
      "half.txt": "cd\n".repeat(150_000),
      "ok.ts": "export const ok = 1;",
    });
    const run = cli(["--json", "index", dir]);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({ files: 3, skipped: { tooLarge: 0 }, sync: { added: 3, converged: true } });
    expect(report.skippedFiles).toEqual([]);
    expect(report.sync.stagedParts).toBeGreaterThan(0);
    // The last lines of the file were in its last part: the whole file is searchable.
    const hits = JSON.parse(cli(["--json", "search", "zebraCrossingFinale", dir, "-k", "1"]).stdout);
    expect(hits[0]).toMatchObject({ path: "near-cap.txt" });
    expect(hits[0].startLine).toBeGreaterThan(340_000);
    expect(JSON.parse(cli(["--json", "status", dir]).stdout).inSync).toBe(true);
  });

  it("names at most 20 skipped paths in human output and all of them in --json", () => {
    const files: Record<string, string> = { "ok.ts": "ok" };
    for (let i = 0; i < 25; i++) files[`big-${i}.txt`] = "z".repeat(200);
    const dir = makeTree(files);
    const human = cli(["index", dir, "--max-file-bytes", "100"]);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout.match(/^ {2}skipped big-\d+\.txt: too large$/gm)).toHaveLength(20);
    expect(human.stdout).toContain("and 5 more");
    const json = JSON.parse(cli(["--json", "index", dir, "--max-file-bytes", "100"]).stdout);
    expect(json.skippedFiles).toHaveLength(25);
  });

  it("answers a directory that does not exist, or is a file, with exit 2 in every command, and creates nothing", () => {
    const before = workspaceIds();
    const missing = join(mkdtempSync(join(tmpdir(), "sextant-gone-")), "nonexistent");
    const file = join(mkdtempSync(join(tmpdir(), "sextant-file-")), "hostname");
    writeFileSync(file, "host\n");
    for (const args of [["index"], ["status"], ["search", "anything"], ["watch"]]) {
      const gone = cli([...args, missing]);
      expect(gone.code, `${args[0]}: ${gone.stderr}`).toBe(2);
      expect(gone.stderr).toContain(`${missing} does not exist`);
      const notDir = cli([...args, file]);
      expect(notDir.code, `${args[0]}: ${notDir.stderr}`).toBe(2);
      expect(notDir.stderr).toContain(`${file} is not a directory`);
    }
    expect(workspaceIds()).toEqual(before);
  });

  it("creates a workspace only once its first scan succeeded", async () => {
    await withCliSdk(suite.edge, suite.env, async (sdk) => {
      const before = workspaceIds();
      const dir = makeTree({ "a.ts": "a" });
      const ws = await openWorkspace(sdk, dir, { create: true });
      // The directory goes away between opening and scanning: the scan fails, and nothing is left on the edge.
      rmSync(dir, { recursive: true });
      await expect(indexWorkspace(sdk, ws)).rejects.toThrow(/ENOENT/);
      expect(workspaceIds()).toEqual(before);
      expect(cli(["status", dir]).code).toBe(2);
    });
  });
});
