import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // In turn: the Worker's tests and the Node tests, each two files at a time; `ALONE`'s one at a
    // time; then the benchmarks' smoke runs, two files at a time.
    projects: [
      "./vitest.workers.config.ts",
      "./vitest.node.config.ts",
      "./vitest.node-alone.config.ts",
      "./vitest.node-bench.config.ts",
    ],
  },
});
