import { rmSync, statSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalEdge as LocalEdgeFile, localEdgePath, readJsonFile } from "../../client/cli/credentials.js";
import { Sextant } from "../../client/sdk/client.js";
import { scanWorkspace } from "../../client/workspace/scanner.js";
import { WorkspaceSecret } from "../../client/workspace/secret.js";
import { emptyState, type WorkspaceState } from "../../client/workspace/state.js";
import { syncTree } from "../../client/workspace/sync.js";
import { LocalTree } from "../../client/workspace/tree.js";
import { dirHash, nameOf, parentOf } from "../../protocol/merkle.js";
import { SYNC_PROTOCOL, type TreeNode } from "../../protocol/sync.js";
import { makeTree, writeTree } from "../support/fixture.js";
import { scanDirectoryFor } from "../support/storage-scan.js";
import { startLocalEdge, type LocalEdge } from "../support/local-edge.js";

let edge: LocalEdge;
let apiKey: string;

beforeAll(async () => {
  edge = await startLocalEdge();
  process.env.SEXTANT_CONFIG_DIR = edge.configDir;
  apiKey = (await readJsonFile(localEdgePath(), LocalEdgeFile))!.apiKey;
});
afterAll(async () => {
  await edge?.stop();
});

class Interrupted extends Error {}

/** A fetch that breaks the connection at request `at`: before the edge sees it, or after it answered. */
function flaky(at: number, after: boolean): typeof fetch {
  let n = 0;
  return (async (input: RequestInfo | URL, init?: RequestInit) => {
    if (n++ !== at) return fetch(input, init);
    if (after) await (await fetch(input, init)).arrayBuffer();
    throw new Interrupted("connection dropped");
  }) as typeof fetch;
}

interface Client {
  root: string;
  secret: WorkspaceSecret;
  state: WorkspaceState;
  workspaceId: string;
}

async function newClient(root: string, shared?: Client): Promise<Client> {
  const sextant = new Sextant({ apiKey, baseURL: edge.baseURL });
  const secret = shared?.secret ?? WorkspaceSecret.generate();
  const workspaceId = shared?.workspaceId ?? (await sextant.workspaces.create({ name: secret.encryptSegment("w") })).id;
  return { root, secret, state: emptyState(), workspaceId };
}

async function sync(client: Client, fetchImpl: typeof fetch = fetch) {
  const scan = await scanWorkspace(client.root, client.secret, { useDefaults: false, globalExcludes: null });
  const tree = new LocalTree(scan.files, client.secret);
  const sextant = new Sextant({ apiKey, baseURL: edge.baseURL, fetch: fetchImpl, maxRetries: 0 });
  const report = await syncTree({
    sextant,
    workspaceId: client.workspaceId,
    root: client.root,
    secret: client.secret,
    tree,
    state: client.state,
  });
  return { report, tree };
}

/** The edge's whole tree, with every directory hash checked against its children. */
async function serverTree(workspaceId: string): Promise<Map<string, TreeNode>> {
  const sextant = new Sextant({ apiKey, baseURL: edge.baseURL });
  const answer = await sextant.workspaces.diff(workspaceId, { protocol: SYNC_PROTOCOL, dirs: [""], budget: 5000 });
  expect(answer.truncated).toEqual([]);
  const nodes = new Map(answer.nodes.map((n) => [n.path, n]));
  const check = (dir: string): string => {
    const kids = answer.nodes
      .filter((n) => parentOf(n.path) === dir)
      .map((n) => ({ name: nameOf(n.path), kind: n.kind, hash: n.kind === "d" ? check(n.path) : n.hash }));
    const hash = dirHash(kids);
    expect(dir === "" ? answer.root : nodes.get(dir)!.hash).toBe(hash);
    return hash;
  };
  check("");
  return nodes;
}

const NAMES = ["a", "b", "c.ts", "d.md"];
const filePath = fc.array(fc.constantFrom(...NAMES), { minLength: 1, maxLength: 3 }).map((p) => p.join("/"));
type Edit = { kind: "write"; path: string; content: string } | { kind: "remove"; path: string };
const edit: fc.Arbitrary<Edit> = fc.oneof(
  fc.record({ kind: fc.constant("write" as const), path: filePath, content: fc.string({ maxLength: 8 }) }),
  fc.record({
    kind: fc.constant("remove" as const),
    path: fc.array(fc.constantFrom(...NAMES), { minLength: 1, maxLength: 2 }).map((p) => p.join("/")),
  }),
);

/** Applies an edit the way an editor would: a file replaces a directory in its way, and vice versa. */
function applyEdit(root: string, e: Edit): void {
  if (e.kind === "remove") {
    try {
      rmSync(join(root, e.path), { recursive: true, force: true });
    } catch {
      // A parent is a file: there is nothing to remove.
    }
    return;
  }
  const segments = e.path.split("/");
  for (let i = 1; i <= segments.length; i++) {
    const prefix = join(root, ...segments.slice(0, i));
    try {
      const isLast = i === segments.length;
      const stat = statSync(prefix);
      if (isLast ? stat.isDirectory() : !stat.isDirectory()) rmSync(prefix, { recursive: true, force: true });
    } catch {
      // Nothing there.
    }
  }
  writeTree(root, { [e.path]: e.content });
}

describe("sync protocol against the local edge", () => {
  it("converges after random edits and syncs interrupted at random points", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.array(edit, { minLength: 1, maxLength: 5 }), fc.nat({ max: 6 }), fc.boolean()), {
          minLength: 1,
          maxLength: 4,
        }),
        async (steps) => {
          const root = makeTree({ "seed.ts": "seed" });
          const client = await newClient(root);
          for (const [edits, breakAt, after] of steps) {
            edits.forEach((e) => applyEdit(root, e));
            try {
              await sync(client, flaky(breakAt, after));
            } catch (err) {
              if (!(err instanceof Interrupted) && !String((err as Error).cause ?? err).includes("connection dropped"))
                throw err;
            }
          }
          const { report, tree } = await sync(client);
          expect(report.converged).toBe(true);
          const server = await serverTree(client.workspaceId);
          const localFiles = [...tree.nodes].filter(([, n]) => n.kind === "f").map(([p, n]) => [p, n.hash] as const);
          const serverFiles = [...server].filter(([, n]) => n.kind === "f").map(([p, n]) => [p, n.hash] as const);
          expect(new Map(serverFiles)).toEqual(new Map(localFiles));
          // Once converged, a sync with no change is a single round trip.
          expect((await sync(client)).report).toMatchObject({ strategy: "unchanged", roundTrips: 1 });
        },
      ),
      { numRuns: 25 },
    );
  }, 240_000);

  it("finds changes with the snapshot in two round trips, and by descent when the snapshot is lost", async () => {
    const files = Object.fromEntries(
      Array.from({ length: 200 }, (_, i) => [`pkg${i % 5}/mod${i % 7}/f${i}.ts`, `v${i}`]),
    );
    const root = makeTree(files);
    const client = await newClient(root);
    expect((await sync(client)).report).toMatchObject({ strategy: "initial", added: 200, converged: true });
    writeTree(root, { "pkg1/mod1/f1.ts": "changed", "pkg2/new.ts": "new" });
    rmSync(join(root, "pkg3/mod3/f3.ts"));
    expect((await sync(client)).report).toMatchObject({
      strategy: "snapshot",
      added: 1,
      changed: 1,
      deleted: 1,
      roundTrips: 2,
      converged: true,
    });
    writeTree(root, { "pkg4/mod4/f4.ts": "again" });
    client.state = emptyState();
    const descent = (await sync(client)).report;
    expect(descent).toMatchObject({ strategy: "descent", converged: true });
    expect(descent.added + descent.changed).toBe(1);
  });

  it("never corrupts the tree when two clients sync one workspace at once, and each converges", async () => {
    const a = await newClient(makeTree({ "shared.ts": "a", "only-a/x.ts": "a" }));
    const b = await newClient(makeTree({ "shared.ts": "b", "only-b/y.ts": "b" }), a);
    for (let round = 0; round < 5; round++) {
      writeTree(a.root, { [`only-a/r${round}.ts`]: `a${round}`, "shared.ts": `a${round}` });
      writeTree(b.root, { [`only-b/r${round}.ts`]: `b${round}`, "shared.ts": `b${round}` });
      await Promise.all([sync(a), sync(b)]);
      await serverTree(a.workspaceId);
    }
    const final = await sync(a);
    expect(final.report.converged).toBe(true);
    expect((await serverTree(a.workspaceId)).size).toBe(final.tree.nodes.size - 1);
    expect((await sync(b)).report.converged).toBe(true);
  });

  it("stores no plaintext name anywhere the edge persists state", async () => {
    const marker = "zebra-quasar-7731";
    const client = await newClient(makeTree({ [`${marker}-dir/${marker}.ts`]: `const ${marker} = 1;` }));
    expect((await sync(client)).report.converged).toBe(true);
    // The scan does see the edge's storage: the workspace id, stored in D1, is found.
    expect((await scanDirectoryFor(edge.persistTo, [client.workspaceId])).length).toBeGreaterThan(0);
    expect(await scanDirectoryFor(edge.persistTo, [marker])).toEqual([]);
    expect(edge.output()).not.toContain(marker);
  });
});
