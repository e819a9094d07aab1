import { describe, expect, it } from "vitest";
import { makeTree } from "../support/fixture.js";
import { edgeWithCliForSuite } from "../support/local-edge.js";

/** An edge whose `MAX_BODY_BYTES` is below the client's default: the client sizes its requests to it. */
describe("syncing to an edge with a small body limit", () => {
  const LIMIT = 256 * 1024;
  const { cli } = edgeWithCliForSuite({ MAX_BODY_BYTES: String(LIMIT) });

  it("learns the limit from the edge and stages a file's chunks over requests that each fit it", () => {
    const files: Record<string, string> = {
      // About 400 KB in a body: over the limit, under the client's default of 1 MiB.
      "big.txt": "ab\n".repeat(70_000) + "function zebraCrossingFinale() { return 1; }\n",
    };
    // Many small files: their commits are batched under the limit too.
    for (let i = 0; i < 40; i++)
      files[`src/f${i}.ts`] = Array.from({ length: 400 }, (_, j) => `export const value${i}_${j} = ${j};\n`).join("");
    const dir = makeTree(files);
    const run = cli(["--json", "index", dir]);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({ files: 41, sync: { added: 41, converged: true } });
    expect(report.skippedFiles).toEqual([]);
    expect(report.sync.stagedParts).toBeGreaterThan(0);
    const hits = JSON.parse(cli(["--json", "search", "zebraCrossingFinale", dir, "-k", "1"]).stdout);
    expect(hits[0]).toMatchObject({ path: "big.txt" });
    expect(hits[0].startLine).toBeGreaterThan(60_000);
  });
});
