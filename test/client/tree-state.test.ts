import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { FileTable, FileTableBuilder } from "../../client/workspace/file-table.js";
import { WorkspaceSecret } from "../../client/workspace/secret.js";
import { emptyState, loadState, saveState, statePath, type StateKey } from "../../client/workspace/state.js";
import { LocalTree } from "../../client/workspace/tree.js";
import { Lazy } from "../../client/workspace/lazy.js";

const secret = WorkspaceSecret.generate();
const NAMES = ["a", "b", "c.ts", "d"];
const files = fc.dictionary(
  fc.array(fc.constantFrom(...NAMES), { minLength: 1, maxLength: 4 }).map((p) => p.join("/")),
  fc.constantFrom("1", "2", "3").map((c) => c.repeat(64)),
  { maxKeys: 25 },
);

/** A table from path -> hash, dropping paths that would need a file and a directory at once. */
function table(entries: Record<string, string>): FileTable {
  const builder = new FileTableBuilder();
  const paths = Object.keys(entries).filter(
    (p) =>
      !Object.keys(entries).some(
        (q) => q !== p && (q.startsWith(`${p}/`) || p.startsWith(`${q}/`)) && q.length < p.length,
      ),
  );
  paths.forEach((p, i) => builder.push(p, i, i, i, entries[p]!));
  return builder.build();
}

describe("incremental Merkle tree", () => {
  it("rehashing only changed paths gives exactly the tree a full build gives", () => {
    fc.assert(
      fc.property(files, files, (before, after) => {
        const first = new LocalTree(table(before), secret);
        const next = table(after);
        const incremental = new LocalTree(next, secret, { files: first.files, dirHashes: first.dirHashes });
        const full = new LocalTree(next, secret);
        expect(incremental.root).toBe(full.root);
        expect(new Map(incremental.dirHashes)).toEqual(new Map(full.dirHashes));
      }),
      { numRuns: 300 },
    );
  });

  it("lists the same files under encrypted names as the plain table", () => {
    const tree = new LocalTree(table({ "x/y.ts": "1".repeat(64), "z.md": "2".repeat(64) }), secret);
    const encrypted = [...tree.filesUnder("")].map(([path, node]) => [secret.decryptPath(path), node.hash] as const);
    expect(new Map(encrypted)).toEqual(
      new Map([
        ["x/y.ts", "1".repeat(64)],
        ["z.md", "2".repeat(64)],
      ]),
    );
  });
});

describe("workspace state", () => {
  let key: StateKey;
  beforeAll(() => {
    process.env.SEXTANT_CACHE_DIR = mkdtempSync(join(tmpdir(), "sextant-state-test-"));
    key = { root: "/w", workspaceId: "ws_1", fingerprint: secret.fingerprint };
  });

  it("round-trips every field, with the synced snapshot stored once when it equals the files", async () => {
    const state = emptyState();
    state.startedAt = 1234;
    state.rules = "r".repeat(64);
    state.entries = table({ "a/b.ts": "1".repeat(64), "c.ts": "2".repeat(64) });
    state.dirs = new Map([["", { mtimeMs: 5, names: ["da", "fc.ts"] }]]);
    state.dirHashes = new Map([["", "3".repeat(64)]]);
    state.segments = Lazy.of(new Map([["a", "token-a"]]));
    state.synced = state.entries;
    state.syncedRoot = "4".repeat(64);
    await saveState(key, state);
    const loaded = await loadState(key);
    expect(loaded.entries.sameFiles(state.entries)).toBe(true);
    expect(loaded.entries.get("a/b.ts")).toEqual(state.entries.get("a/b.ts"));
    expect(loaded.synced.sameFiles(state.entries)).toBe(true);
    expect(loaded).toMatchObject({ startedAt: 1234, rules: "r".repeat(64), syncedRoot: "4".repeat(64) });
    expect(loaded.dirs).toEqual(state.dirs);
    expect(loaded.dirHashes).toEqual(state.dirHashes);
    expect(loaded.segments.get()).toEqual(new Map([["a", "token-a"]]));
  });

  it("discards a corrupt state and one written for another secret or workspace, without failing", async () => {
    const state = emptyState();
    state.entries = table({ "a.ts": "1".repeat(64) });
    await saveState(key, state);
    expect((await loadState({ ...key, fingerprint: "other" })).entries.size).toBe(0);
    expect((await loadState({ ...key, workspaceId: "ws_2" })).entries.size).toBe(0);
    writeFileSync(statePath(key), "SXS3garbage");
    expect((await loadState(key)).entries.size).toBe(0);
    writeFileSync(statePath(key), Buffer.alloc(0));
    expect((await loadState(key)).entries.size).toBe(0);
  });
});
