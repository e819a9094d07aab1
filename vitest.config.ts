import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    projects: ["./vitest.workers.config.ts", "./vitest.node.config.ts"],
    // Two test files at a time even on two cores (vitest's default there is one): most of an
    // end-to-end file's time goes to waiting on the processes it starts (an edge, the CLI, a sandbox).
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});
