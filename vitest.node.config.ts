import { defineConfig } from "vitest/config";

/** The client SDK and CLI in Node, and end-to-end runs against a real local edge. */
export default defineConfig({
  test: {
    name: "node",
    environment: "node",
    include: [
      "test/client/**/*.test.ts",
      "test/e2e/**/*.test.ts",
      "test/simulator/**/*.test.ts",
      "test/gpu-backends/**/*.test.ts",
      "test/sandboxes/**/*.test.ts",
    ],
    // Generous: many tests start processes (an edge, the CLI), which a machine busy with other work slows down.
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
