import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

/**
 * The limiter accuracy benchmark runs inside workerd: simulated isolates (the isolate-side
 * limiter, several instances) sharing real limiter Durable Objects.
 */
export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: { bindings: { LIMITS_BENCH_SCALE: process.env.LIMITS_BENCH_SCALE ?? "1" } },
    }),
  ],
  test: { name: "limits", include: ["bench/limits/accuracy.bench.ts"], testTimeout: 3_600_000 },
});
