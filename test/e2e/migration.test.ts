import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { indexWorkspace, openWorkspace } from "../../client/workspace/session.js";
import { SYNC_PROTOCOL } from "../../protocol/sync.js";
import { makeTree } from "../support/fixture.js";
import { restartableEdge, withCliSdk } from "../support/local-edge.js";
import { startOpenAIStandIn, type OpenAIStandIn } from "../support/openai-standin.js";

const FILES = {
  "src/auth/revoke.ts": `/** Revokes an API key: marks it revoked and evicts it from the key cache. */
export function revokeApiKey(keyId: string): void {
  markKeyRevoked(keyId);
  evictKeyFromCache(keyId);
}
`,
  "src/orbit/kepler.ts": `/** Solves Kepler's equation for the eccentric anomaly by Newton iteration. */
export function solveKeplerEquation(meanAnomaly: number, eccentricity: number): number {
  return meanAnomaly + eccentricity * Math.sin(meanAnomaly);
}
`,
  "src/net/backoff.ts": `/** Exponential backoff with jitter between retries of a failed request. */
export function backoffDelay(attempt: number): number {
  return Math.min(30_000, 2 ** attempt * 500) * (0.75 + Math.random() / 4);
}
`,
  "docs/billing.md": "# Billing\n\nInvoices are computed monthly from usage, with tax added per country.\n",
};

/**
 * A workspace indexed by an edge whose embedder then changed (here from an OpenAI-compatible model
 * to the built-in one, on the same state): searches keep working from the old index, and one
 * `sextant index` moves it to the new embedder without deleting anything.
 */
describe("moving a workspace to the edge's new embedder", () => {
  let standIn: OpenAIStandIn;
  let dir: string;
  const local = restartableEdge();
  const { cli, json, start } = local;

  beforeAll(async () => {
    standIn = await startOpenAIStandIn();
    await start({
      EMBEDDER: "openai",
      EMBEDDING_BASE_URL: standIn.url,
      EMBEDDING_MODEL: "standin-embed-768",
      EMBEDDING_API_KEY: standIn.apiKey,
    });
    dir = makeTree(FILES);
    expect((await json(["index", dir])).sync.converged).toBe(true);
    await start();
  }, 240_000);
  afterAll(async () => {
    await local.stop();
    await standIn?.close();
  });

  it("searches the old index by keyed terms until the workspace is indexed again", async () => {
    const hits = await json(["search", "solveKeplerEquation eccentric anomaly", dir, "-k", "1"]);
    expect(hits[0].path).toBe("src/orbit/kepler.ts");
  }, 60_000);

  it("a move cut off after part of its files leaves them moved, and searches keep using the old index", async () => {
    await withCliSdk(local.edge, local.env, async (sdk) => {
      // The edge takes a commit of the first two files, then the client's connection drops.
      const commit = sdk.workspaces.commit.bind(sdk.workspaces);
      sdk.workspaces.commit = async (id, body, opts) => {
        await commit(id, { ...body, upserts: (body.upserts ?? []).slice(0, 2) }, opts);
        throw new Error("the connection dropped");
      };
      const ws = await openWorkspace(sdk, dir);
      await expect(indexWorkspace(sdk, ws)).rejects.toThrow(/the connection dropped/);
      const moved = await sdk.workspaces.reembedded(ws.entry.workspaceId, { protocol: SYNC_PROTOCOL });
      expect(moved.files).toHaveLength(2);
      expect(moved.next).toBeNull();
      expect((await sdk.workspaces.tree(ws.entry.workspaceId)).reembed).toBe(true);
    });
    const hits = await json(["search", "solveKeplerEquation eccentric anomaly", dir, "-k", "1"]);
    expect(hits[0].path).toBe("src/orbit/kepler.ts");
  }, 60_000);

  it("a file added while the move is under way is found by `sextant search` before the move ends", async () => {
    mkdirSync(join(dir, "src/geo"));
    writeFileSync(
      join(dir, "src/geo/haversine.ts"),
      `export function haversineDistance(lat1: number, lon1: number, lat2: number, lon2: number): number {
  const earthRadiusKm = 6371;
  return 2 * earthRadiusKm * Math.asin(Math.sqrt(Math.sin((lat2 - lat1) / 2) ** 2 + Math.cos(lat1) * Math.cos(lat2) * Math.sin((lon2 - lon1) / 2) ** 2));
}
`,
    );
    await withCliSdk(local.edge, local.env, async (sdk) => {
      // The edge takes the new file alone, then the client's connection drops: the move stays under way.
      const commit = sdk.workspaces.commit.bind(sdk.workspaces);
      sdk.workspaces.commit = async (id, body, opts) => {
        const added = (body.upserts ?? []).filter((u) => u.chunks?.some((c) => c.text.includes("haversineDistance")));
        expect(added).toHaveLength(1);
        await commit(id, { ...body, upserts: added }, opts);
        throw new Error("the connection dropped");
      };
      const ws = await openWorkspace(sdk, dir);
      await expect(indexWorkspace(sdk, ws)).rejects.toThrow(/the connection dropped/);
      expect((await sdk.workspaces.tree(ws.entry.workspaceId)).reembed).toBe(true);
    });
    const hits = await json(["search", "haversine distance between two points on the earth", dir, "-k", "1"]);
    expect(hits[0].path).toBe("src/geo/haversine.ts");
    // The files not yet moved are still searched in the old index.
    const old = await json(["search", "solveKeplerEquation eccentric anomaly", dir, "-k", "1"]);
    expect(old[0].path).toBe("src/orbit/kepler.ts");
  }, 60_000);

  it("`sextant index` says it is moving the workspace, sends the files not yet moved, and ends on the new embedder", async () => {
    const run = await cli(["index", dir]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      /Moving the workspace to this edge's embedder \S+ \(indexed by standin-embed-768\): sending 2 files again \(3 files moved by an earlier run\)/,
    );
    expect(run.stdout).toContain("moved to");
    const again = await json(["index", dir]);
    expect(again.sync.reembed).toBeUndefined();
    expect(again.sync.strategy).toBe("unchanged");
    const hits = await json(["search", "retry a failed request after a delay", dir, "-k", "1"]);
    expect(hits[0].path).toBe("src/net/backoff.ts");
  }, 120_000);
});
