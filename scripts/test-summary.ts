/**
 * What `npm test` makes of vitest's JSON report: the runner's own passed, failed and skipped counts,
 * and a skipped test that the allow-list below does not excuse counted as a failure, so that a
 * suite that did not run can never read as a green one.
 */
import { relative } from "node:path";
import { z } from "zod";

/**
 * Where a test may skip. `skipsWhen` is the one condition under which the skip is expected; a skip
 * anywhere else fails the run.
 */
export interface AllowedSkip {
  /** The test file, relative to the repository root. */
  file: string;
  /** The test's full name (its suites' names and its own, space-separated). */
  test: RegExp;
  skipsWhen: "root" | "not-root";
  why: string;
}

/**
 * The allow-list: tests that can only mean something as one kind of user. Everything else, the
 * browser, bubblewrap and cgroup tests included, must run; a machine that lacks what they need fails.
 */
export const ALLOWED_SKIPS: readonly AllowedSkip[] = [
  {
    file: "test/client/scanner.test.ts",
    test: /^scanner counts a directory it cannot read instead of failing$/,
    skipsWhen: "root",
    why: "root reads a directory whatever its mode, so there is no unreadable directory to count",
  },
  {
    file: "test/sandboxes/host.test.ts",
    test: /kills what a deleted sandbox's commands left running in a session of their own$/,
    skipsWhen: "not-root",
    why: "a uid of the sandbox's own, whose processes go with it, needs root",
  },
  {
    file: "test/sandboxes/limits.test.ts",
    test: /^a sandbox under (direct|bubblewrap) (caps the sandbox as a whole|holds the (disk|memory) cap|ends what a cancelled task|removes what its commands left)/,
    skipsWhen: "not-root",
    why: "control groups, tmpfs disks and per-sandbox uids need root (under CI=true these run as any user)",
  },
  {
    file: "test/sandboxes/hostile.test.ts",
    test: /^(the host's fair share holds one tenant to its share of the disk|the host's fair share of memory |a host killed before it could clean up )/,
    skipsWhen: "not-root",
    why: "the fair shares and the sweep of a killed host's groups need control groups, so root (run under CI=true as any user)",
  },
] as const;

const ReportSchema = z.object({
  numPassedTests: z.number(),
  numFailedTests: z.number(),
  testResults: z.array(
    z.object({
      name: z.string(),
      assertionResults: z.array(z.object({ fullName: z.string(), status: z.string() })),
    }),
  ),
});

export interface SkippedTest {
  file: string;
  test: string;
  /** The allow-list's reason, or undefined where nothing excuses the skip. */
  allowed?: string;
}

export interface TestSummary {
  passed: number;
  failed: number;
  /** Every test that did not run: skipped, todo or left pending. */
  skipped: SkippedTest[];
  /** The skips nothing excuses; each fails the run. */
  unexcused: SkippedTest[];
}

export interface SummaryOptions {
  /** The repository root, which the report's absolute file names are made relative to. */
  root: string;
  /** Whether the run is as root (uid 0). */
  asRoot: boolean;
  /**
   * Whether the run was narrowed (files or `-t` named on the command line): vitest then skips what
   * was not asked for, so no skip fails the run.
   */
  narrowed: boolean;
  allowList?: readonly AllowedSkip[];
}

/** Reads vitest's JSON report (as text) into the run's counts; throws if it is not one. */
export function summarize(reportText: string, options: SummaryOptions): TestSummary {
  const report = ReportSchema.parse(JSON.parse(reportText));
  const allowList = options.allowList ?? ALLOWED_SKIPS;
  const skipped: SkippedTest[] = [];
  for (const file of report.testResults) {
    const name = relative(options.root, file.name).split("\\").join("/");
    for (const test of file.assertionResults) {
      if (test.status === "passed" || test.status === "failed") continue;
      const excuse = allowList.find(
        (a) => a.file === name && a.test.test(test.fullName) && (a.skipsWhen === "root") === options.asRoot,
      );
      skipped.push({ file: name, test: test.fullName, allowed: excuse?.why });
    }
  }
  const unexcused = options.narrowed ? [] : skipped.filter((s) => s.allowed === undefined);
  return {
    passed: report.numPassedTests,
    failed: report.numFailedTests,
    skipped,
    unexcused,
  };
}
