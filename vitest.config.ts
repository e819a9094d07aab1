import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { availableParallelism } from "node:os";
import { relative } from "node:path";
import { defineConfig, type TestProjectInlineConfiguration } from "vitest/config";
import { BaseSequencer, type TestSpecification } from "vitest/node";

/**
 * Every vitest project. `vitest run` (and `npm test`) runs the tests in turn by `groupOrder`: the
 * Worker's tests and the Node tests, each two files at a time; `ALONE`'s one at a time; then the
 * benchmarks' smoke runs, two files at a time. The benchmarks themselves (`limits`, `scale`) are
 * projects only when the command line names them (`--project limits`, as `npm run bench:limits`
 * does), so that no plain run starts them.
 */

/**
 * The benchmarks' smoke runs, last and two files at a time: they load the machine themselves (edges,
 * sandboxes, floods of requests), so they run beside each other and nothing else.
 */
const BENCH_SMOKE = [
  "test/e2e/bench-smoke.test.ts",
  "test/e2e/bench-smoke-gateway.test.ts",
  "test/e2e/bench-smoke-agents.test.ts",
  "test/e2e/bench-smoke-envs.test.ts",
  "test/e2e/bench-smoke-evals.test.ts",
];

/**
 * Files that run by themselves, after the Node tests and before the benchmarks' smoke runs: the
 * lake's end-to-end test (docs/development.md: its queue stalled in three full runs, each time
 * beside or right after the smoke runs).
 */
const ALONE = ["test/e2e/lake.test.ts"];

/**
 * The `node` files that take a minute or more (edges stopped and started again, tasks run to their
 * budgets), first in their project, longest first. A fresh checkout has no record of past durations,
 * and vitest then starts the largest files first: most of these are small, so they would start last
 * and end the project with one of them running alone.
 */
const LONG_FIRST = [
  "test/e2e/envs-durability.test.ts",
  "test/e2e/agent-durability.test.ts",
  "test/e2e/agent-budgets.test.ts",
  "test/e2e/agent-cli.test.ts",
  "test/sandboxes/hostile.test.ts",
  "test/e2e/envs-sessions.test.ts",
  "test/e2e/env-rollouts-agents.test.ts",
];

/** vitest's order (group, then project, then past durations or size), with `LONG_FIRST` moved to the front of its project. */
class LongFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (spec: TestSpecification) => {
      const at = LONG_FIRST.indexOf(relative(spec.project.config.root, spec.moduleId));
      return at < 0 ? LONG_FIRST.length : at;
    };
    // Each project's files are together in vitest's order: reorder within each run of one project.
    const out: TestSpecification[] = [];
    for (let start = 0; start < sorted.length; ) {
      let end = start;
      while (end < sorted.length && sorted[end]!.project === sorted[start]!.project) end++;
      const run = sorted.slice(start, end).map((spec, i) => ({ spec, i }));
      run.sort((a, b) => rank(a.spec) - rank(b.spec) || a.i - b.i);
      out.push(...run.map(({ spec }) => spec));
      start = end;
    }
    return out;
  }
}

// Two files at a time even on two cores (vitest's default there is one): a Worker test file's time
// is mostly its runtime's start, and an end-to-end file's mostly waiting on the processes it starts
// (an edge, the CLI, a sandbox).
const TWO_OR_MORE = Math.max(2, availableParallelism() - 1);

/** The projects `--project` names on the command line (`--project x` or `--project=x`). */
function namedProjects(argv: string[]): string[] {
  return argv.flatMap((arg, i) =>
    arg === "--project" && argv[i + 1] !== undefined
      ? [argv[i + 1]!]
      : arg.startsWith("--project=")
        ? [arg.slice("--project=".length)]
        : [],
  );
}

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
function workerProject(migrations: Awaited<ReturnType<typeof readD1Migrations>>): TestProjectInlineConfiguration {
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
      maxWorkers: TWO_OR_MORE,
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
}

/** The client SDK and CLI in Node, and end-to-end runs against a real local edge. */
function nodeProject(
  name: string,
  options: { include?: string[]; exclude?: string[]; maxWorkers: number; groupOrder: number },
): TestProjectInlineConfiguration {
  return {
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
  };
}

/**
 * The limiter accuracy benchmark runs inside workerd: simulated isolates (the isolate-side
 * limiter, several instances) sharing real limiter Durable Objects.
 */
const limitsBenchmark: TestProjectInlineConfiguration = {
  plugins: [
    cloudflareTest({
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: { bindings: { LIMITS_BENCH_SCALE: process.env.LIMITS_BENCH_SCALE ?? "1" } },
    }),
  ],
  test: { name: "limits", include: ["bench/limits/accuracy.bench.ts"], testTimeout: 3_600_000 },
};

/**
 * The search-scale benchmark runs inside workerd, against the real Workspace Durable Object with
 * its SQLite and local R2, fed synthetic vectors through the object's own commit RPC.
 */
const scaleBenchmark: TestProjectInlineConfiguration = {
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
  test: { name: "scale", include: ["bench/scale/search-scale.bench.ts"], testTimeout: 3_600_000 },
};

export default defineConfig(async () => {
  const named = namedProjects(process.argv);
  return {
    test: {
      sequence: { sequencer: LongFirst },
      projects: [
        workerProject(await readD1Migrations("./migrations")),
        nodeProject("node", { exclude: [...BENCH_SMOKE, ...ALONE], maxWorkers: TWO_OR_MORE, groupOrder: 1 }),
        nodeProject("node-alone", { include: ALONE, maxWorkers: 1, groupOrder: 2 }),
        nodeProject("node-bench", { include: BENCH_SMOKE, maxWorkers: 2, groupOrder: 3 }),
        ...(named.includes("limits") ? [limitsBenchmark] : []),
        ...(named.includes("scale") ? [scaleBenchmark] : []),
      ],
    },
  };
});
