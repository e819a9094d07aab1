import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

/**
 * The benchmarks' smoke runs, last and two files at a time: they load the machine themselves (edges,
 * sandboxes, floods of requests), so they run beside each other and nothing else.
 */
export const BENCH_SMOKE = [
  "test/e2e/bench-smoke.test.ts",
  "test/e2e/bench-smoke-gateway.test.ts",
  "test/e2e/bench-smoke-agents.test.ts",
];

/**
 * Files that run by themselves, after the Node tests and before the benchmarks' smoke runs: the
 * lake's end-to-end test (README, "Development": its queue stalled in three full runs, each time
 * beside or right after the smoke runs).
 */
export const ALONE = ["test/e2e/lake.test.ts"];

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
      // A test's own connections go to loopback only: the suite needs no network.
      setupFiles: ["./test/support/loopback-only.ts"],
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
  exclude: [...BENCH_SMOKE, ...ALONE],
  maxWorkers: Math.max(2, availableParallelism() - 1),
  groupOrder: 1,
});
