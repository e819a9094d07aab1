import { env } from "cloudflare:test";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import { dirHash, EMPTY_ROOT, nameOf, parentOf, type ChildEntry } from "../../protocol/merkle.js";
import { SYNC_PROTOCOL, type CommitResponse, type TreeNode } from "../../protocol/sync.js";
import type { TreeCommit } from "../../durable-objects/workspace.js";

// Stand-ins for encrypted segments: the edge only checks their shape.
const SEGMENTS = ["A", "B", "C"].map((c) => c.repeat(43));
const HASHES = ["1", "2", "3"].map((c) => c.repeat(64));

/** A reference model of the tree, written independently of the store: plain maps, no SQL. */
function modelRoot(files: Map<string, string>): string {
  const children = new Map<string, ChildEntry[]>([["", []]]);
  const dirs = new Set<string>([""]);
  for (const path of files.keys()) {
    for (let dir = parentOf(path); dir !== "" && !dirs.has(dir); dir = parentOf(dir)) dirs.add(dir);
  }
  const hashOf = (path: string): string => {
    if (files.has(path)) return files.get(path)!;
    const kids: ChildEntry[] = [];
    for (const f of files.keys())
      if (parentOf(f) === path) kids.push({ name: nameOf(f), kind: "f", hash: files.get(f)! });
    for (const d of dirs)
      if (d !== "" && parentOf(d) === path) kids.push({ name: nameOf(d), kind: "d", hash: hashOf(d) });
    return dirHash(kids);
  };
  void children;
  return hashOf("");
}

function applyModel(files: Map<string, string>, op: Op): void {
  const under = (p: string) => [...files.keys()].filter((f) => f === p || f.startsWith(`${p}/`));
  if (op.kind === "delete") {
    under(op.path).forEach((f) => files.delete(f));
    return;
  }
  under(op.path).forEach((f) => files.delete(f));
  for (let dir = parentOf(op.path); dir !== ""; dir = parentOf(dir)) files.delete(dir);
  files.set(op.path, op.hash);
}

type Op = { kind: "upsert"; path: string; hash: string } | { kind: "delete"; path: string };

const related = (a: string, b: string) => a === b || a.startsWith(`${b}/`) || b.startsWith(`${a}/`);

/** A batch as a commit may carry it: no path upserted twice, with a path below it, or also deleted. */
function unambiguous(batch: Op[]): Op[] {
  const upserted: string[] = [];
  for (const o of batch) if (o.kind === "upsert" && !upserted.some((p) => related(p, o.path))) upserted.push(o.path);
  const kept = new Set(upserted);
  return batch.filter((o) => (o.kind === "upsert" ? kept.delete(o.path) : !upserted.includes(o.path)));
}

const path = fc.array(fc.constantFrom(...SEGMENTS), { minLength: 1, maxLength: 3 }).map((s) => s.join("/"));
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant("upsert" as const), path, hash: fc.constantFrom(...HASHES) }),
  fc.record({ kind: fc.constant("delete" as const), path }),
);

let n = 0;
async function freshWorkspace() {
  const id = `ws_prop${++n}_${crypto.randomUUID().slice(0, 8)}`;
  const stub = workspaceStub(env, id);
  await stub.init({ workspaceId: id, orgId: "org_test", createdAt: new Date().toISOString() });
  return stub;
}

/** Reads the whole stored tree and checks that every directory hash is the hash of its children. */
async function checkWellFormed(stub: Awaited<ReturnType<typeof freshWorkspace>>): Promise<void> {
  const answer = (await stub.diff({ protocol: SYNC_PROTOCOL, dirs: [""], budget: 5000 }))!;
  expect(answer.truncated).toEqual([]);
  const byParent = new Map<string, TreeNode[]>();
  for (const node of answer.nodes) {
    const list = byParent.get(parentOf(node.path)) ?? [];
    list.push(node);
    byParent.set(parentOf(node.path), list);
  }
  const verify = (dir: string): string => {
    const kids = (byParent.get(dir) ?? []).map((node) => ({
      name: nameOf(node.path),
      kind: node.kind,
      hash: node.kind === "d" ? verify(node.path) : node.hash,
    }));
    if (dir !== "") expect(kids.length, "no empty directories are kept").toBeGreaterThan(0);
    const hash = dirHash(kids);
    const stored = dir === "" ? answer.root : answer.nodes.find((x) => x.path === dir)!.hash;
    expect(stored).toBe(hash);
    return hash;
  };
  verify("");
}

describe("Merkle store in the Workspace Durable Object", () => {
  it("starts empty", async () => {
    const stub = await freshWorkspace();
    expect(await stub.status()).toMatchObject({ root: EMPTY_ROOT, files: 0, bytes: 0, lastSyncAt: null });
  });

  // 100 cases, so that the rarest ones the model checks, a delete that empties a directory (9 cases in
  // 100) and a file rehashed in place (11 in 100), each come up in a run but for odds under 1 in 10,000
  // (at 40 cases, 1 in 50). Each case is a fresh Durable Object: the 100 take about 2 s on two cores
  // alone and 4 to 5 s beside two busy loops; the bound leaves room for a full run on a busy machine.
  it("matches a reference model after any sequence of commits, and stays well formed", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(op, { maxLength: 6 }).map(unambiguous), { minLength: 1, maxLength: 5 }),
        async (batches) => {
          const stub = await freshWorkspace();
          const model = new Map<string, string>();
          for (const batch of batches) {
            const deletes = batch.filter((o) => o.kind === "delete").map((o) => o.path);
            const upserts = batch.flatMap((o) =>
              o.kind === "upsert" ? [{ path: o.path, hash: o.hash, size: 1 }] : [],
            );
            // The store applies a commit's deletes before its upserts; so does the model.
            for (const o of batch) if (o.kind === "delete") applyModel(model, o);
            for (const o of batch) if (o.kind === "upsert") applyModel(model, o);
            const result = (await stub.commit({ upserts, deletes })) as CommitResponse;
            expect(result.root).toBe(modelRoot(model));
            expect(result.files).toBe(model.size);
          }
          await checkWellFormed(stub);
        },
      ),
      { numRuns: 100 },
    );
  }, 60_000);

  it("refuses a commit whose paths contradict each other, and keeps the tree as it was", async () => {
    const stub = await freshWorkspace();
    const [a, b] = SEGMENTS as [string, string];
    const file = { hash: HASHES[0]!, size: 1 };
    for (const commit of [
      {
        upserts: [
          { path: a, ...file },
          { path: `${a}/${b}`, ...file },
        ],
        deletes: [],
      },
      {
        upserts: [
          { path: a, ...file },
          { path: a, ...file },
        ],
        deletes: [],
      },
      { upserts: [{ path: a, ...file }], deletes: [a] },
    ]) {
      // An RPC promise is a thenable that is only settled when awaited, so await it directly.
      let error: unknown;
      try {
        await stub.commit(commit);
      } catch (err) {
        error = err;
      }
      expect(String(error)).toContain("Invalid commit");
    }
    expect(await stub.status()).toMatchObject({ root: EMPTY_ROOT, files: 0 });
  });

  it("is idempotent: replaying a commit changes nothing", async () => {
    const stub = await freshWorkspace();
    const commit = {
      upserts: [{ path: `${SEGMENTS[0]}/${SEGMENTS[1]}`, hash: HASHES[0]!, size: 10 }],
      deletes: [SEGMENTS[2]!],
    } satisfies TreeCommit;
    const first = (await stub.commit(commit)) as CommitResponse;
    const second = (await stub.commit(commit)) as CommitResponse;
    expect(second.root).toBe(first.root);
    expect(second.bytes).toBe(10);
  });

  it("answers a diff breadth-first in whole directories within the budget", async () => {
    const stub = await freshWorkspace();
    const upserts = SEGMENTS.flatMap((a) => SEGMENTS.map((b) => ({ path: `${a}/${b}`, hash: HASHES[0]!, size: 1 })));
    await stub.commit({ upserts, deletes: [] });
    const all = (await stub.diff({ protocol: SYNC_PROTOCOL, dirs: [""], budget: 100 }))!;
    expect(all.nodes).toHaveLength(12);
    expect(all.truncated).toEqual([]);
    const top = (await stub.diff({ protocol: SYNC_PROTOCOL, dirs: [""], budget: 4 }))!;
    expect(top.nodes.map((x) => x.path)).toEqual(SEGMENTS);
    expect(top.truncated).toEqual(SEGMENTS);
  });

  it("holds nothing before init and after destroy", async () => {
    const stub = workspaceStub(env, "ws_never_created");
    expect(await stub.status()).toBeNull();
    expect(await stub.commit({ upserts: [], deletes: [] })).toBeNull();
    const live = await freshWorkspace();
    await live.destroy();
    expect(await live.status()).toBeNull();
    expect(await live.diff({ protocol: SYNC_PROTOCOL, dirs: [""] })).toBeNull();
  });
});
