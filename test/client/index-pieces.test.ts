import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { HotIndex, type HotEntry } from "../../durable-objects/hot-index.js";
import { decodeSegment, encodeSegment, languageCode, quantize } from "../../durable-objects/segment.js";
import { MAX_DEFINITION_PIECES } from "../../protocol/embedder/names.js";
import { seededUnit } from "../support/vectors.js";

const DIMS = 32;

const unit = (seed: number) => seededUnit(seed, DIMS);

const NO_TERMS = { ids: new Uint32Array(0), counts: new Uint16Array(0) };

/** Entry `id` with its own vector and `pieces` piece vectors, as a segment holds it. */
function raw(id: number, pieces: number, language = "typescript"): HotEntry {
  return quantize(
    {
      id: String(id),
      path: "p",
      language,
      vector: unit(id),
      terms: NO_TERMS,
      pieces: Array.from({ length: pieces }, (_, p) => unit(id * 10 + p + 100_000)),
    },
    DIMS,
  );
}

/** The entries' true ranking: each scored by the best int8 dot product of its own vector and its pieces'. */
function bruteForce(entries: HotEntry[], query: Float32Array, k: number) {
  const dot = (int8: Int8Array, scale: number) => int8.reduce((s, x, j) => s + x * query[j]!, 0) * scale;
  return entries
    .map((e) => ({
      id: e.id,
      score: Math.max(dot(e.int8, e.scale), ...(e.pieces ?? []).map((p) => dot(p.int8, p.scale))),
    }))
    .sort((a, b) => b.score - a.score || a.id - b.id)
    .slice(0, k);
}

describe("definition pieces in the hot index", () => {
  it("ranks an entry by the best of its own vector and its pieces', each entry once", () => {
    const hot = new HotIndex(DIMS);
    const entries = Array.from({ length: 40 }, (_, i) => raw(i + 1, i % 5));
    for (const e of entries) hot.add(e);
    expect(hot.pieceCount).toBe(entries.reduce((n, e) => n + (e.pieces?.length ?? 0), 0));
    // A question that matches the third piece of entry 14 (of 3) finds entry 14 first, as its own vector would.
    const hits = hot.queryVector(unit(14 * 10 + 2 + 100_000), 5);
    expect(hits[0]!.id).toBe(14);
    expect(hits[0]!.score).toBeCloseTo(1, 1);
    expect(new Set(hits.map((h) => h.id)).size).toBe(hits.length);
    expect(hits).toHaveLength(5);
    // An entry without pieces is found by its own vector.
    expect(hot.queryVector(unit(5), 1)[0]!.id).toBe(5);
  });

  it("returns exactly the brute-force top k, with or without the 1-bit scan's candidates", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: MAX_DEFINITION_PIECES }), { minLength: 1, maxLength: 60 }),
        fc.integer({ min: 1, max: 12 }),
        fc.integer({ min: 1, max: 1000 }),
        fc.boolean(),
        (pieceCounts, k, seed, scan) => {
          const entries = pieceCounts.map((n, i) => raw(i + 1, n));
          // `scan`: the 1-bit scan picks candidates (all of them, at this size) for exact re-scoring.
          const hot = new HotIndex(DIMS, scan ? { exactLimit: 4 } : {});
          for (const e of entries) hot.add(e);
          const query = unit(seed + 500_000);
          const got = hot.queryVector(query, k);
          const want = bruteForce(entries, query, k);
          expect(got.map((h) => h.id)).toEqual(want.map((h) => h.id));
          got.forEach((h, i) => expect(h.score).toBeCloseTo(want[i]!.score, 4));
        },
      ),
      { numRuns: 150 },
    );
  });

  it("filters pieces with their entries, by mask and by language", () => {
    const hot = new HotIndex(DIMS);
    const entries = Array.from({ length: 12 }, (_, i) => raw(i + 1, 3, (i + 1) % 2 ? "python" : "go"));
    for (const e of entries) hot.add(e);
    const query = unit(4 * 10 + 1 + 100_000);
    expect(hot.queryVector(query, 1)[0]!.id).toBe(4);
    // Entry 4's pieces match best, but only entries 1, 2, 3, 5 and 6 are asked for.
    const allowed = [1, 2, 3, 5, 6];
    const masked = hot.queryVector(query, 12, hot.filterOf(allowed));
    expect(masked.map((h) => h.id)).toEqual(
      bruteForce(
        entries.filter((e) => allowed.includes(e.id)),
        query,
        12,
      ).map((h) => h.id),
    );
    const python = hot.queryVector(query, 12, { language: languageCode("python") });
    expect(python.map((h) => h.id)).toEqual(
      bruteForce(
        entries.filter((e) => e.id % 2 === 1),
        query,
        12,
      ).map((h) => h.id),
    );
    // A mask over the entries alone would let another entry's pieces through: refused.
    expect(() => hot.queryVector(query, 3, { mask: hot.maskOf([1]) })).toThrow(/pieces' mask/);
  });

  it("drops an entry's pieces with it, and replaces them when it is written again", () => {
    const hot = new HotIndex(DIMS);
    for (let i = 1; i <= 20; i++) hot.add(raw(i, 2));
    const piece = unit(7 * 10 + 1 + 100_000);
    expect(hot.queryVector(piece, 1)[0]!.id).toBe(7);
    hot.remove(7);
    expect(hot.pieceCount).toBe(38);
    expect(hot.queryVector(piece, 20).map((h) => h.id)).not.toContain(7);
    // Written again with no pieces: its own vector only.
    hot.add(raw(7, 0));
    expect(hot.queryVector(piece, 1)[0]!.id).not.toBe(7);
    expect(hot.queryVector(unit(7), 1)[0]!.id).toBe(7);
  });

  it("past its budget of pieces, drops them all and ranks entries by their own vectors", () => {
    // Room for the int8 copies of 10 pieces.
    const hot = new HotIndex(DIMS, { pieceInt8BudgetBytes: 10 * DIMS });
    for (let i = 1; i <= 3; i++) hot.add(raw(i, 3));
    expect(hot.pieceCount).toBe(9);
    hot.add(raw(4, 2));
    expect(hot.pieceCount).toBeNull();
    // Nor are they held when tombstones awaiting compaction leave their int8 copies no room.
    const churned = new HotIndex(DIMS, { pieceInt8BudgetBytes: 20 * DIMS });
    for (let i = 1; i <= 6; i++) churned.add(raw(i, 3));
    churned.remove(1);
    churned.remove(2);
    expect(churned.pieceCount).toBe(12);
    churned.add(raw(1, 3));
    expect(churned.pieceCount).toBe(15);
    // 18 pieces, within the budget of 20, in 24 slots: the int8 copy no longer holds them all.
    churned.add(raw(2, 3));
    expect(churned.pieceCount).toBeNull();
    const query = unit(2 * 10 + 1 + 100_000);
    const want = bruteForce(
      [1, 2, 3, 4].map((i) => raw(i, 0)),
      query,
      4,
    );
    const got = hot.queryVector(query, 4);
    expect(got.map((h) => h.id)).toEqual(want.map((h) => h.id));
    got.forEach((h, i) => expect(h.score).toBeCloseTo(want[i]!.score, 5));
  });
});

describe("index segments with definition pieces", () => {
  it("round-trip each entry's pieces byte for byte", () => {
    const entries = [raw(1, 0), raw(2, 4), raw(3, 1, "python")];
    const decoded = decodeSegment(encodeSegment(entries, DIMS), DIMS);
    expect(decoded.map((e) => e.pieces?.length ?? 0)).toEqual([0, 4, 1]);
    decoded.forEach((e, i) => {
      expect(e.int8).toEqual(entries[i]!.int8);
      expect(e.scale).toBe(Math.fround(entries[i]!.scale));
      expect(e.pieces?.map((p) => [p.scale, [...p.int8]])).toEqual(
        entries[i]!.pieces?.map((p) => [Math.fround(p.scale), [...p.int8]]),
      );
    });
  });

  it("still reads segments written before pieces (format SXV2)", () => {
    const e = { ...raw(9, 0), termIds: Uint32Array.of(5, 6), termCounts: Uint16Array.of(2, 1) };
    const bytes = new Uint8Array(12 + 15 + DIMS + 12);
    const view = new DataView(bytes.buffer);
    view.setUint32(0, 0x53585632);
    view.setUint32(4, 1);
    view.setUint32(8, DIMS);
    view.setFloat64(12, 9, true);
    view.setUint8(20, e.language);
    view.setUint16(21, 2, true);
    view.setFloat32(23, e.scale, true);
    bytes.set(new Uint8Array(e.int8.buffer, e.int8.byteOffset, DIMS), 27);
    view.setUint32(27 + DIMS, 5, true);
    view.setUint32(31 + DIMS, 6, true);
    view.setUint16(35 + DIMS, 2, true);
    view.setUint16(37 + DIMS, 1, true);
    const [decoded] = decodeSegment(bytes, DIMS);
    expect(decoded!.id).toBe(9);
    expect(decoded!.pieces).toBeUndefined();
    expect(decoded!.int8).toEqual(e.int8);
    expect(decoded!.scale).toBeCloseTo(e.scale, 6);
    expect([...decoded!.termIds]).toEqual([5, 6]);
    expect([...decoded!.termCounts]).toEqual([2, 1]);
  });
});
