import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { workspaceStub } from "../../durable-objects/workspace-client.js";
import { parseCommit } from "../../durable-objects/commit.js";
import { R2Backend } from "../../durable-objects/r2-backend.js";
import { InvalidRpcInput } from "../../durable-objects/workspace-rpc.js";
import type { BackendEntry } from "../../durable-objects/index-backend.js";
import type { HotIndexOptions } from "../../durable-objects/hot-index.js";
import type { IndexedChunk } from "../../durable-objects/workspace.js";
import type { SearchResponse } from "../../protocol/sync.js";
import { seededUnit } from "../support/vectors.js";

const DIMS = 32;
const unit = (seed: number) => seededUnit(seed, DIMS);
const terms = (...pairs: [number, number][]) => ({
  ids: Uint32Array.from(pairs, (p) => p[0]),
  counts: Uint16Array.from(pairs, (p) => p[1]),
});
const entry = (id: number, path: string, language = "typescript", t = terms([id % 7, 1])): BackendEntry => ({
  id: String(id),
  path,
  language,
  vector: unit(id),
  terms: t,
});
/** Piece `p` of entry `id`'s vector. */
const pieceVector = (id: number, p: number) => unit(id * 10 + p + 100_000);
/** `entry`, with `id % 4` definition pieces. */
const pieced = (id: number, path: string): BackendEntry => ({
  ...entry(id, path),
  ...(id % 4 ? { pieces: Array.from({ length: id % 4 }, (_, p) => pieceVector(id, p)) } : {}),
});

async function withBackend<T>(
  name: string,
  fn: (open: (options?: HotIndexOptions) => R2Backend) => Promise<T>,
): Promise<T> {
  const stub = workspaceStub(env, name);
  await stub.init({ workspaceId: name, orgId: "org_t", createdAt: new Date().toISOString() });
  return runInDurableObject(stub, (_instance, state) =>
    fn(
      (options) =>
        new R2Backend(
          state.storage.sql,
          (f) => state.storage.transactionSync(f),
          env.INDEX,
          `ws/${name}`,
          DIMS,
          options,
        ),
    ),
  );
}

describe("R2 index backend", () => {
  it("finds the nearest entries, with scores that survive int8 quantization", async () => {
    await withBackend("ws_r2a", async (open) => {
      const backend = open();
      await backend.write(Array.from({ length: 50 }, (_, i) => entry(i + 1, `P${i % 5}`)));
      for (const target of [3, 17, 42]) {
        const hits = await backend.queryVector(unit(target), 3, {});
        expect(hits[0]!.id).toBe(String(target));
        expect(hits[0]!.score).toBeCloseTo(1, 1);
        expect(hits[0]!.score).toBeGreaterThanOrEqual(hits[1]!.score);
      }
    });
  });

  it("filters by directory and by language", async () => {
    await withBackend("ws_r2b", async (open) => {
      const backend = open();
      await backend.write([entry(1, "A/x"), entry(2, "A/y", "python"), entry(3, "B/z"), entry(4, "AB")]);
      const ids = async (filter: object) => (await backend.queryVector(unit(1), 10, filter)).map((h) => h.id).sort();
      expect(await ids({ pathPrefix: "A" })).toEqual(["1", "2"]);
      expect(await ids({ language: "python" })).toEqual(["2"]);
      expect(await ids({ pathPrefix: "A", language: "typescript" })).toEqual(["1"]);
      expect(await ids({ language: "go" })).toEqual([]);
    });
  });

  it("ranks by BM25 over keyed terms: rarer terms weigh more, longer chunks less", async () => {
    await withBackend("ws_r2c", async (open) => {
      const backend = open();
      await backend.write([
        entry(1, "a", "text", terms([100, 1], [200, 1])),
        entry(2, "b", "text", terms([100, 1])),
        entry(3, "c", "text", terms([100, 1], [300, 5], [301, 5], [302, 5])),
        entry(4, "d", "text", terms([400, 1])),
        ...Array.from({ length: 6 }, (_, i) => entry(5 + i, `e${i}`, "text", terms([500 + i, 1]))),
      ]);
      const ranked = (await backend.queryTerms([100, 200], 10, {})).map((h) => h.id);
      expect(ranked).toEqual(["1", "2", "3"]);
      expect(await backend.queryTerms([999], 10, {})).toEqual([]);
    });
  });

  it("forgets removed entries, rebuilds from R2 in a fresh instance, and writes content-addressed segments", async () => {
    await withBackend("ws_r2d", async (open) => {
      const first = open();
      await first.write([entry(1, "X"), entry(2, "Y"), entry(3, "Z")]);
      await first.remove(["2"]);
      expect((await first.queryVector(unit(2), 3, {})).map((h) => h.id)).not.toContain("2");
      const fresh = open();
      const hits = await fresh.queryVector(unit(3), 3, {});
      expect(hits.map((h) => h.id).sort()).toEqual(["1", "3"]);
      const listed = await env.INDEX.list({ prefix: "ws/ws_r2d/segments/" });
      expect(listed.objects.map((o) => o.key)).toEqual([expect.stringMatching(/^ws\/ws_r2d\/segments\/[0-9a-f]{64}$/)]);
      await fresh.destroy();
      expect((await env.INDEX.list({ prefix: "ws/ws_r2d/" })).objects).toEqual([]);
    });
  });

  it("ranks an entry by its best piece, keeps pieces in its segments, and filters and forgets them with it", async () => {
    await withBackend("ws_r2p", async (open) => {
      const backend = open();
      await backend.write([pieced(1, "A/x"), pieced(2, "A/y"), pieced(3, "B/z"), pieced(7, "B/w")]);
      // Entry 3's third piece: entry 3 first, once, scored as the piece.
      const hits = await backend.queryVector(pieceVector(3, 2), 4, {});
      expect(hits[0]).toEqual({ id: "3", score: expect.closeTo(1, 1) });
      expect(new Set(hits.map((h) => h.id)).size).toBe(hits.length);
      expect(backend.stats().pieces).toBe(1 + 2 + 3 + 3);
      // Outside the directory asked for, a matching piece does not count.
      expect((await backend.queryVector(pieceVector(3, 2), 4, { pathPrefix: "A" })).map((h) => h.id).sort()).toEqual([
        "1",
        "2",
      ]);
      // Rebuilt from R2 by a fresh instance: the same ranking.
      const fresh = open();
      expect(await fresh.queryVector(pieceVector(3, 2), 4, {})).toEqual(hits);
      expect(fresh.stats().pieces).toBe(1 + 2 + 3 + 3);
      await fresh.remove(["3"]);
      const after = await fresh.queryVector(pieceVector(3, 2), 4, {});
      expect(after.map((h) => h.id)).not.toContain("3");
      expect(fresh.stats().pieces).toBe(1 + 2 + 3);
    });
  });

  it("past the exact limit, the 1-bit scan with int8 re-scoring returns what an exact scan returns", async () => {
    await withBackend("ws_r2e", async (open) => {
      const exact = open({ exactLimit: 100_000 });
      await exact.write(Array.from({ length: 3000 }, (_, i) => entry(i + 1, `F${i % 40}`)));
      const approx = open({ exactLimit: 16 });
      let agree = 0;
      for (let q = 0; q < 20; q++) {
        const query = unit(10_000 + q);
        const a = (await exact.queryVector(query, 10, {})).map((h) => h.id);
        const b = (await approx.queryVector(query, 10, {})).map((h) => h.id);
        agree += a.filter((id) => b.includes(id)).length;
      }
      expect(agree / 200).toBeGreaterThan(0.95);
    });
  });

  it("compaction leaves search results unchanged and deletes the segments it replaces", async () => {
    const ops = fc.array(
      fc.oneof(
        fc.record({ kind: fc.constant("write" as const), n: fc.integer({ min: 1, max: 12 }) }),
        fc.record({ kind: fc.constant("remove" as const), share: fc.double({ min: 0, max: 1, noNaN: true }) }),
        fc.record({ kind: fc.constant("compact" as const) }),
      ),
      { minLength: 1, maxLength: 25 },
    );
    let run = 0;
    await fc.assert(
      fc.asyncProperty(ops, fc.integer({ min: 1, max: 1000 }), async (sequence, querySeed) =>
        withBackend(`ws_r2f${run++}`, async (open) => {
          const backend = open();
          let next = 1;
          const live: number[] = [];
          // A query near one entry's piece, so that pieces decide some of the ranking.
          const query = pieceVector(querySeed, 0);
          const snapshot = async () => {
            const byVector = await backend.queryVector(query, 10, {});
            const byTerms = await backend.queryTerms([1, 2, 3], 10, {});
            return JSON.stringify([byVector, byTerms]);
          };
          for (const op of sequence) {
            if (op.kind === "write") {
              const batch = Array.from({ length: op.n }, () => pieced(next++, `D${next % 3}/f${next}`));
              await backend.write(batch);
              live.push(...batch.map((e) => Number(e.id)));
            } else if (op.kind === "remove") {
              const gone = live.filter((_, i) => (i * 0.618) % 1 < op.share);
              await backend.remove(gone.map(String));
              for (const id of gone) live.splice(live.indexOf(id), 1);
            } else {
              const before = await snapshot();
              await backend.compact();
              expect(await snapshot()).toBe(before);
              // A fresh instance, built from what compaction left on R2, agrees too.
              expect(
                await (async () => {
                  const fresh = open();
                  return JSON.stringify([
                    await fresh.queryVector(query, 10, {}),
                    await fresh.queryTerms([1, 2, 3], 10, {}),
                  ]);
                })(),
              ).toBe(before);
            }
          }
          await backend.compact();
          const hits = await backend.queryVector(query, 1000, {});
          expect(hits.map((h) => Number(h.id)).sort((a, b) => a - b)).toEqual([...live].sort((a, b) => a - b));
          const stats = backend.stats();
          expect(stats.entries).toBe(live.length);
          const objects = (await env.INDEX.list({ prefix: `ws/ws_r2f${run - 1}/segments/` })).objects.length;
          expect(objects).toBe(stats.segments);
        }),
      ),
      { numRuns: 25 },
    );
  });

  it("refuses a chunk's pieces the index cannot hold: more than 3, or of another size than its vector", async () => {
    const stub = workspaceStub(env, "ws_r2pieces");
    await stub.init({ workspaceId: "ws_r2pieces", orgId: "org_t", createdAt: new Date().toISOString() });
    const path = "p".padEnd(43, "A");
    const chunk = (pieces: Float32Array[]): IndexedChunk => ({
      path,
      chunkId: "1".padStart(64, "0"),
      startLine: 1,
      endLine: 5,
      language: "typescript",
      vector: unit(1),
      terms: terms([1, 1]),
      pieces,
    });
    const tree = { upserts: [{ path, hash: "1".padStart(64, "0"), size: 1 }], deletes: [] };
    // What the object's commit checks first (`parseCommit`), before it reads or writes anything.
    expect(() => parseCommit(tree, [chunk([0, 1, 2, 3].map((p) => pieceVector(1, p)))], {})).toThrow(InvalidRpcInput);
    expect(() => parseCommit(tree, [chunk([new Float32Array(64).fill(0.125)])], {})).toThrow(
      /pieces must have its vector's dimensions/,
    );
    await stub.commit(tree, [chunk([0, 1, 2].map((p) => pieceVector(1, p)))]);
    await stub.search({ vector: unit(1), terms: [], topK: 1 });
    expect((await stub.indexStats())!.backend!.pieces).toBe(3);
  });

  it("a commit that leaves sparse segments sets the alarm, and the alarm compacts them without changing search", async () => {
    const stub = workspaceStub(env, "ws_r2alarm");
    await stub.init({ workspaceId: "ws_r2alarm", orgId: "org_t", createdAt: new Date().toISOString() });
    const seg = (n: number) => `f${n}`.padEnd(43, "A");
    const hex = (n: number) => n.toString(16).padStart(64, "0");
    const chunk = (n: number): IndexedChunk => ({
      path: seg(n),
      chunkId: hex(n),
      startLine: 1,
      endLine: 5,
      language: "typescript",
      vector: unit(n),
      terms: terms([n % 5, 1]),
    });
    // Ten commits of ten files each: ten small segments.
    for (let c = 0; c < 10; c++) {
      const files = Array.from({ length: 10 }, (_, i) => c * 10 + i + 1);
      await stub.commit(
        { upserts: files.map((n) => ({ path: seg(n), hash: hex(n), size: 1 })), deletes: [] },
        files.map(chunk),
      );
    }
    // Six of each ten deleted: every segment is left sparse.
    const gone = Array.from({ length: 100 }, (_, i) => i + 1).filter((n) => n % 10 < 6);
    await stub.commit({ upserts: [], deletes: gone.map(seg) });
    const query = { vector: unit(77), terms: [2], topK: 10 };
    const before = (await stub.search(query)) as SearchResponse;
    const statsBefore = (await stub.indexStats())!;
    expect(statsBefore.backend!.segments).toBe(10);

    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const after = (await stub.search(query)) as SearchResponse;
    expect(after.results).toEqual(before.results);
    const statsAfter = (await stub.indexStats())!;
    expect(statsAfter.chunks).toBe(40);
    expect(statsAfter.backend!.segments).toBe(1);
    const id = await runInDurableObject(stub, (_instance, state) => state.id.toString());
    const objects = await env.INDEX.list({ prefix: `workspaces/${id}/segments/` });
    expect(objects.objects).toHaveLength(1);
  });
});
