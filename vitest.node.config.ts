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
    ],
    testTimeout: 30_000,
    hookTimeout: 120_000,
  },
});
