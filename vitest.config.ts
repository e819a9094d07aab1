import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // In turn: the Worker's tests, the Node tests and the benchmarks' smoke runs, each two files at a
    // time, then `ALONE`'s one at a time.
    projects: [
      "./vitest.workers.config.ts",
      "./vitest.node.config.ts",
      "./vitest.node-bench.config.ts",
      "./vitest.node-alone.config.ts",
    ],
  },
});
