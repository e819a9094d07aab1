import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

/**
 * Files that run after the rest, one at a time: the benchmarks' smoke runs, which load the machine
 * themselves (edges, sandboxes, floods of requests) and whose figures mean most on a machine doing
 * nothing else; and the lake's end-to-end test (README, "Development": its queue has stalled in
 * two full runs, and running beside another file is one way those runs differed from its own).
 */
export const ALONE = ["test/e2e/bench-smoke.test.ts", "test/e2e/lake.test.ts"];

/** The client SDK and CLI in Node, and end-to-end runs against a real local edge. */
export function nodeProject(
  name: string,
  options: { include?: string[]; exclude?: string[]; maxWorkers: number; groupOrder: number },
) {
  return defineConfig({
    test: {
      name,
      environment: "node",
      include: options.include ?? [
        "test/client/**/*.test.ts",
        "test/e2e/**/*.test.ts",
        "test/simulator/**/*.test.ts",
        "test/gpu-backends/**/*.test.ts",
        "test/sandboxes/**/*.test.ts",
      ],
      exclude: [...(options.exclude ?? []), "**/node_modules/**"],
      // Generous: many tests start processes (an edge, the CLI), which a machine busy with other work slows down.
      testTimeout: 120_000,
      hookTimeout: 120_000,
      maxWorkers: options.maxWorkers,
      sequence: { groupOrder: options.groupOrder },
    },
  });
}

// Two files at a time even on two cores (vitest's default there is one): most of an end-to-end
// file's time goes to waiting on the processes it starts (an edge, the CLI, a sandbox).
export default nodeProject("node", {
  exclude: ALONE,
  maxWorkers: Math.max(2, availableParallelism() - 1),
  groupOrder: 1,
});
