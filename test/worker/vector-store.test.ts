import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import { VectorStore, type IndexedChunk } from "../../durable-objects/vector-store.js";

const DIMS = 32;
const unit = (seed: number) => {
  const v = new Float32Array(DIMS).map((_, i) => Math.sin(seed * 7.3 + i * 1.7));
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
};
const chunk = (path: string, seed: number, line = 1): IndexedChunk => ({
  path,
  chunkId: String(seed).padStart(64, "0"),
  startLine: line,
  endLine: line + 9,
  vector: unit(seed),
});

async function withStore<T>(name: string, fn: (open: () => VectorStore) => Promise<T>): Promise<T> {
  const stub = workspaceStub(env, name);
  await stub.init({ workspaceId: name, orgId: "org_t", createdAt: new Date().toISOString() });
  return runInDurableObject(stub, (_instance, state) =>
    fn(() => new VectorStore(state.storage.sql, env.INDEX, `ws/${name}`, DIMS)),
  );
}

describe("vector store", () => {
  it("finds the nearest chunks, with scores that survive int8 quantization", async () => {
    await withStore("ws_vs1", async (open) => {
      const store = open();
      const chunks = Array.from({ length: 50 }, (_, i) => chunk(`P${i % 5}`, i, i));
      store.record(await store.write(chunks));
      for (const target of [3, 17, 42]) {
        const hits = await store.search(unit(target), 3);
        expect(hits[0]!.chunkId).toBe(chunks[target]!.chunkId);
        expect(hits[0]!.score).toBeCloseTo(1, 1);
        expect(hits[0]!.score).toBeGreaterThanOrEqual(hits[1]!.score);
      }
    });
  });

  it("forgets a deleted file and everything under a deleted directory", async () => {
    await withStore("ws_vs2", async (open) => {
      const store = open();
      store.record(await store.write([chunk("A", 1), chunk("A/b", 2), chunk("A/c", 3), chunk("Z", 4)]));
      store.removePaths(["A"]);
      expect(store.count()).toBe(1);
      expect((await store.search(unit(2), 5)).map((h) => h.path)).toEqual(["Z"]);
    });
  });

  it("replaces a file's chunks when it is indexed again", async () => {
    await withStore("ws_vs3", async (open) => {
      const store = open();
      store.record(await store.write([chunk("F", 1, 1), chunk("F", 2, 11)]));
      store.record(await store.write([chunk("F", 3, 1)]));
      expect(store.count()).toBe(1);
      expect((await store.search(unit(3), 5))[0]!.chunkId).toBe(chunk("F", 3).chunkId);
    });
  });

  it("rebuilds its hot copy from R2 in a fresh instance, and writes content-addressed segments", async () => {
    await withStore("ws_vs4", async (open) => {
      const first = open();
      const written = await first.write([chunk("X", 9)]);
      expect(written.segment).toMatch(/^ws\/ws_vs4\/segments\/[0-9a-f]{64}$/);
      expect((await first.write([chunk("X", 9)])).segment).toBe(written.segment);
      first.record(written);
      const fresh = open();
      expect((await fresh.search(unit(9), 1))[0]!.path).toBe("X");
      const object = await env.INDEX.get(written.segment);
      expect(object).not.toBeNull();
      await object!.arrayBuffer();
    });
  });
});
