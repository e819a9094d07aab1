import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

/**
 * The search-scale benchmark runs inside workerd, against the real Workspace Durable Object with
 * its SQLite and local R2, fed synthetic vectors through the object's own commit RPC.
 */
export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: {
        bindings: {
          SCALE_POINTS: process.env.SCALE_POINTS ?? "10000",
          SCALE_QUERIES: process.env.SCALE_QUERIES ?? "200",
        },
      },
    }),
  ],
  test: {
    name: "scale",
    include: ["bench/scale/search-scale.bench.ts"],
    testTimeout: 3_600_000,
  },
});
