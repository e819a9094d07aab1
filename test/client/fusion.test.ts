import { describe, expect, it } from "vitest";
import { fuseScores, LEXICAL_WEIGHT } from "../../protocol/fusion.js";

describe("score fusion", () => {
  it("adds the cosine and the weighted BM25 scaled to the query's best", () => {
    const fused = fuseScores(
      [
        { id: "a", score: 0.5 },
        { id: "b", score: 0.4 },
      ],
      [
        { id: "b", score: 10 },
        { id: "a", score: 2 },
      ],
      1,
    );
    expect(fused.map((h) => h.id)).toEqual(["b", "a"]);
    expect(fused[0]!.score).toBeCloseTo(1.4);
    expect(fused[1]!.score).toBeCloseTo(0.7);
  });

  it("counts a lexical-only candidate at the lowest cosine returned, and a vector-only one with no lexical score", () => {
    const fused = fuseScores(
      [
        { id: "v1", score: 0.9 },
        { id: "v2", score: 0.2 },
      ],
      [{ id: "t", score: 3 }],
      LEXICAL_WEIGHT,
    );
    expect(new Map(fused.map((h) => [h.id, h.score]))).toEqual(
      new Map([
        ["t", 0.2 + LEXICAL_WEIGHT],
        ["v1", 0.9],
        ["v2", 0.2],
      ]),
    );
  });

  it("ranks by one channel when the other returned nothing, and breaks ties by id", () => {
    expect(
      fuseScores(
        [],
        [
          { id: "x", score: 4 },
          { id: "y", score: 2 },
        ],
      ).map((h) => h.id),
    ).toEqual(["x", "y"]);
    expect(
      fuseScores(
        [
          { id: "b", score: 0.3 },
          { id: "a", score: 0.3 },
        ],
        [],
      ).map((h) => h.id),
    ).toEqual(["a", "b"]);
  });
});
