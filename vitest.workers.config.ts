import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

function testLimits() {
  const roomy = { key: { requests: { limit: 100_000, windowSeconds: 60 } } };
  const classes = Object.fromEntries(
    ["tab", "chat", "apply", "embed", "index", "events", "admin"].map((c) => [c, roomy]),
  );
  return {
    plans: {
      free: { ...classes, embed: { key: { requests: { limit: 5, windowSeconds: 60 }, concurrency: 2 } } },
      pro: classes,
      business: classes,
    },
  };
}

/** Tests that run inside workerd against real D1, R2 and SQLite-backed Durable Objects. */
export default defineConfig(async () => {
  const migrations = await readD1Migrations("./migrations");
  return {
    plugins: [
      cloudflareTest({
        wrangler: { configPath: "./wrangler.toml" },
        miniflare: {
          bindings: {
            TEST_MIGRATIONS: migrations,
            ADMIN_SECRET: "test-admin-secret-0123456789abcdefghijkl",
            // Short, so that the lake's retention can be seen at work within the 7 days events may be late.
            LAKE_RETENTION_DAYS: "3",
            // Small, so that a test can fill a workspace's staging with a few requests.
            MAX_STAGED_BYTES: String(64 * 1024),
            // Generous limits, so that tests of other routes never meet them; the free plan's
            // embeddings are tight for the rate limit tests.
            RATE_LIMITS: JSON.stringify(testLimits()),
            // Backends nobody listens on (the discard port refuses connections): the gateway's
            // health object and routes run against real storage with every backend down.
            GATEWAY_CONFIG: JSON.stringify({
              pools: {
                tab: {
                  role: "tab",
                  models: ["tab-test"],
                  fim: "qwen2.5-coder",
                  endpoints: [
                    {
                      id: "nowhere-east",
                      region: "us-east",
                      latitude: 39,
                      longitude: -77,
                      url: "http://127.0.0.1:1/v1",
                      kind: "vllm",
                      capacity: 4,
                    },
                    {
                      id: "nowhere-west",
                      region: "eu-west",
                      latitude: 51.5,
                      longitude: 0,
                      url: "http://127.0.0.1:1/v2",
                      kind: "vllm",
                      capacity: 4,
                    },
                  ],
                  timeouts: { connectMs: 200, firstByteMs: 200, deadlineMs: 2000 },
                },
                embed: {
                  role: "embed",
                  models: ["embed-none"],
                  endpoints: [
                    {
                      id: "nowhere-embed",
                      region: "us-east",
                      latitude: 39,
                      longitude: -77,
                      url: "http://127.0.0.1:1/v3",
                      kind: "vllm",
                      capacity: 4,
                    },
                  ],
                  timeouts: { connectMs: 200, firstByteMs: 200, deadlineMs: 2000 },
                },
              },
              health: { probeIntervalMs: 1000, probeTimeoutMs: 200, snapshotMaxAgeMs: 100 },
            }),
          },
        },
      }),
    ],
    test: {
      name: "worker",
      // Two files at a time even on two cores (vitest's default there is one): each file starts a
      // runtime of its own, and that start, not the file's tests, is most of a file's time.
      maxWorkers: Math.max(2, availableParallelism() - 1),
      include: ["test/worker/**/*.test.ts"],
      // Sized for a machine whose cores are busy with other work, where vitest's 5 s default cut
      // off tests that take under a second alone (the dashboard's, at 5 s while other runs shared
      // both cores). A test that needs more says so itself.
      testTimeout: 60_000,
      hookTimeout: 60_000,
      sequence: { groupOrder: 0 },
      setupFiles: ["./test/worker/setup.ts"],
    },
  };
});
