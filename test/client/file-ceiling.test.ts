import { mkdtempSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, vi } from "vitest";
import { main } from "../../client/cli/main.js";
import { EXIT } from "../../client/cli/output.js";
import { scanWorkspace } from "../../client/workspace/scanner.js";
import { WorkspaceSecret } from "../../client/workspace/secret.js";
import { emptyState } from "../../client/workspace/state.js";
import { scanPaths } from "../../client/workspace/targeted-scan.js";
import { prepareUpload, uploadable } from "../../client/workspace/upload.js";
import { generateApiKey } from "../../protocol/api-key.js";
import { CommitRequest, MAX_FILE_BYTES, SYNC_PROTOCOL } from "../../protocol/sync.js";
import { captureCli } from "../support/cli-capture.js";

const secret = WorkspaceSecret.generate();
const gitOnly = { useDefaults: false, globalExcludes: null } as const;

captureCli();

/**
 * A workspace with a file one byte past the ceiling and one at it: text of ordinary lines where git's
 * binary probe and the generated-file probe look, sparse after it, so that neither takes disk and both
 * would be read if not skipped.
 */
function workspaceWithLargeFiles(): string {
  const root = mkdtempSync(join(tmpdir(), "sextant-ceiling-"));
  for (const [name, size] of [
    ["over.txt", MAX_FILE_BYTES + 1],
    ["at.txt", MAX_FILE_BYTES],
  ] as const) {
    writeFileSync(join(root, name), `${"x".repeat(79)}\n`.repeat(1024));
    truncateSync(join(root, name), size);
  }
  writeFileSync(join(root, "small.ts"), "export const a = 1;\n");
  return root;
}

describe("the file ceiling on the device", () => {
  it("skips files past the protocol's ceiling even when asked for more", async () => {
    const root = workspaceWithLargeFiles();
    const scan = await scanWorkspace(root, secret, { ...gitOnly, maxFileBytes: Number.MAX_SAFE_INTEGER });
    expect(scan.skipped.tooLarge).toBe(1);
    expect([...scan.files.keys()].sort()).toEqual(["at.txt", "small.ts"]);
  });

  it("skips them in a watcher's targeted scan too", async () => {
    const root = workspaceWithLargeFiles();
    const full = await scanWorkspace(root, secret, gitOnly);
    const state = { ...emptyState(), entries: full.files, dirs: full.dirs, rules: full.rules };
    const targeted = scanPaths(root, secret, state, ["over.txt", "small.ts"], {
      maxFileBytes: Number.MAX_SAFE_INTEGER,
    });
    expect(targeted && [...targeted.files.keys()]).toEqual(["small.ts"]);
  });

  it("refuses --max-file-bytes past the ceiling without calling the edge", async () => {
    const fetch = vi.fn();
    vi.stubGlobal("fetch", fetch);
    const argv = ["--base-url", "http://edge.test", "--api-key", generateApiKey(), "index"];
    const root = mkdtempSync(join(tmpdir(), "sextant-ceiling-cli-"));
    expect(await main([...argv, root, "--max-file-bytes", String(MAX_FILE_BYTES + 1)])).toBe(EXIT.usage);
    expect(await main([...argv, root, "--max-file-bytes", "0"])).toBe(EXIT.usage);
    expect(fetch).not.toHaveBeenCalled();
  });
});

describe("what a commit carries from the device", () => {
  it("drops chunks without text and the same chunk twice, and keeps copies at other lines", () => {
    const chunks = [
      { text: "", startLine: 1, endLine: 1 },
      { text: "a", startLine: 2, endLine: 2 },
      { text: "a", startLine: 2, endLine: 2 },
      { text: "a", startLine: 3, endLine: 3 },
    ];
    expect(uploadable(chunks)).toEqual([chunks[1], chunks[3]]);
  });

  it("prepares files that the edge's commit schema accepts: a blank line, a long repeated line, copies", async () => {
    const root = mkdtempSync(join(tmpdir(), "sextant-upload-"));
    const files = {
      "blank.txt": "\n",
      "ruler.txt": `${"=".repeat(10_000)}\n`,
      "a.ts": "export const same = 1;\n",
      "b.ts": "export const same = 1;\n",
    };
    const upserts = [];
    for (const [plain, text] of Object.entries(files)) {
      writeFileSync(join(root, plain), text);
      const entry = { path: secret.encryptPath(plain), hash: "0".repeat(64), size: text.length, plain };
      upserts.push((await prepareUpload(root, secret, entry)).upsert);
    }
    const parsed = CommitRequest.safeParse({ protocol: SYNC_PROTOCOL, upserts });
    expect(parsed.error?.issues ?? []).toEqual([]);
    expect(upserts[0]!.chunks).toEqual([]);
    expect(upserts[1]!.chunks.length).toBeGreaterThan(0);
  });
});
