/**
 * `npm test`: type-checks everything (tests included), runs every vitest project, reads every edge's
 * log for the Workers runtime's cross-request and hung-request messages, and ends with the plain
 * `N passed, N failed, N skipped` line that CI reads: vitest's own counts of tests, with each check
 * that is not a test (the type checks, the prebuilt edge, the log scan, a skip nothing excuses)
 * reported on a line of its own and, when it fails, counted as one failure more, so that the line
 * never says 0 failed of a run that failed. Extra arguments go to vitest.
 *
 * `--quick` (`npm run test:quick`) is the contributor's tier: the Worker's tests and the client's
 * unit tests, with no type check, no local edge and no end-to-end or benchmark smoke run, read and
 * summed the same way.
 */
import { spawn, spawnSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from "node:fs";
import { join, resolve } from "node:path";
import { prebuildEdge } from "./prebuilt-edge.js";
import { EDGE_LOG_DIR, scanRuntimeLogFiles } from "./runtime-log-scan.js";
import { summarize, type TestSummary } from "./test-summary.js";
import { describeExplained, explainUncaughtFile, QuietFilter } from "./uncaught-log.js";

const REPORT = ".vitest/results.json";
/** vitest's own output: the pool's workerd and any Miniflare run inside a test process write there. */
const OUTPUT = ".vitest/output.log";
/** The run's prebuilt edge (`SEXTANT_PREBUILT_EDGE`). */
const PREBUILT_EDGE = ".vitest/edge";

function run(command: string, args: string[]): boolean {
  console.log(`\n$ ${command} ${args.join(" ")}`);
  return spawnSync(command, args, { stdio: "inherit" }).status === 0;
}

/** Runs a command with its stdout and stderr both streamed to ours and copied to `file`. */
async function runTee(command: string, args: string[], file: string): Promise<boolean> {
  console.log(`\n$ ${command} ${args.join(" ")}`);
  const log = openSync(file, "w");
  const child = spawn(command, args, {
    stdio: ["inherit", "pipe", "pipe"],
    // Piped, vitest would drop colours that a terminal shows.
    env: { ...process.env, FORCE_COLOR: process.env.FORCE_COLOR ?? (process.stdout.isTTY ? "1" : undefined) },
  });
  for (const [from, to] of [
    [child.stdout, process.stdout],
    [child.stderr, process.stderr],
  ] as const) {
    // What verbose workerd writes of failures that were handled goes to the file only.
    const quiet = new QuietFilter();
    from.on("data", (d: Buffer) => {
      to.write(quiet.write(d));
      writeSync(log, d);
    });
    from.on("end", () => to.write(quiet.end()));
  }
  const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
  closeSync(log);
  return code === 0;
}

const quick = process.argv.includes("--quick");
/**
 * The quick tier's files: the client's unit tests and the Worker's tests of its parts taken one at a
 * time, within about 3 minutes of CPU on two cores. A Worker test file costs about 4 s of CPU before
 * its first test (a runtime of its own, sent every module it imports), so the files that send
 * requests through the whole Worker (its harness or `SELF`), most of them, are left to `npm test`;
 * so are the client tests that check the checkout as a whole (every dependency's licence, the docs'
 * links). vitest keeps a file that matches any filter, the worker project's under test/worker/.
 */
function quickArgs(): string[] {
  const routeLevel = readdirSync("test/worker")
    .filter((name) => name.endsWith(".test.ts"))
    .map((name) => `test/worker/${name}`)
    .filter((file) => /from "\.\/harness\.js"|\bSELF\b/.test(readFileSync(file, "utf8")));
  const wholeCheckout = [
    "test/client/licences.test.ts",
    "test/client/third-party-notices.test.ts",
    "test/client/docs-links.test.ts",
  ];
  return [
    "--project",
    "worker",
    "--project",
    "node",
    ...[...routeLevel, ...wholeCheckout].flatMap((file) => ["--exclude", file]),
    "test/worker/",
    "test/client/",
  ];
}

/** The checks that are not tests, each with its outcome, for the closing lines. */
const checks: { name: string; ok: boolean }[] = [];
if (!quick)
  for (const project of ["tsconfig.json", "tsconfig.node.json"])
    checks.push({ name: `type check of ${project}`, ok: run("npx", ["tsc", "-p", project]) });

mkdirSync(".vitest", { recursive: true });
rmSync(REPORT, { force: true });
rmSync(EDGE_LOG_DIR, { recursive: true, force: true });

// Every local edge the tests start runs one bundle, built and migrated here once for the run
// (scripts/prebuilt-edge.ts), rather than bundling and migrating again at each start; the tests of
// `npm start` and `npm run dev` themselves start theirs the newcomer's way.
if (!quick && !process.env.SEXTANT_PREBUILT_EDGE) {
  const dir = resolve(PREBUILT_EDGE);
  rmSync(dir, { recursive: true, force: true });
  try {
    const started = Date.now();
    await prebuildEdge(dir);
    process.env.SEXTANT_PREBUILT_EDGE = dir;
    console.log(
      `\nThe local edges start from the bundle and migrated state in ${PREBUILT_EDGE} (built in ${((Date.now() - started) / 1000).toFixed(1)} s).`,
    );
  } catch (err) {
    console.log(`\nBuilding the prebuilt edge failed; each local edge bundles its own:\n${String(err)}`);
    checks.push({ name: "prebuilt edge", ok: false });
  }
}
// Files or a `-t` filter on the command line narrow the run, and vitest skips what was not asked for.
const vitestArgs = process.argv.slice(2).filter((arg) => arg !== "--quick");
const vitestOk = await runTee(
  "npx",
  [
    "vitest",
    "run",
    "--reporter=default",
    "--reporter=json",
    `--outputFile.json=${REPORT}`,
    ...(quick ? quickArgs() : []),
    ...vitestArgs,
  ],
  OUTPUT,
);
let summary: TestSummary | undefined;
try {
  summary = summarize(readFileSync(REPORT, "utf8"), {
    root: process.cwd(),
    asRoot: process.getuid?.() === 0,
    narrowed: quick || vitestArgs.length > 0,
  });
} catch (err) {
  console.log(`\nvitest's report ${REPORT} could not be read: ${String(err)}`);
}
// A crash outside any test (an unhandled error, a failed setup) fails the run even with no failed test.
checks.push({
  name: "vitest's run, with no error outside a test",
  ok: summary !== undefined && (vitestOk || summary.failed > 0),
});

let edgeLogs: string[] = [];
try {
  edgeLogs = readdirSync(EDGE_LOG_DIR).map((name) => join(EDGE_LOG_DIR, name));
} catch {
  // No test started a local edge.
}
const logs = [OUTPUT, ...edgeLogs];
const faults = await scanRuntimeLogFiles(logs);
if (faults.length > 0) {
  console.log("\nThe Workers runtime reported cross-request or hung-request I/O:");
  for (const fault of faults) console.log(`${fault.file}:${fault.line}: ${fault.text}`);
}
checks.push({ name: `Workers runtime log scan (${logs.length} logs)`, ok: faults.length === 0 });

// Verbose workerd writes `uncaught exception` for failures that were handled; scripts/uncaught-log.ts
// names those, and anything else in the output fails the run, so that a real one is seen.
const uncaught = await explainUncaughtFile(OUTPUT);
if (uncaught.unexplained.length > 0) {
  console.log(`\nUncaught exceptions in ${OUTPUT} that no rule of scripts/uncaught-log.ts explains:`);
  for (const at of uncaught.unexplained) console.log(`${OUTPUT}:${at.line}: ${at.text}`);
}
checks.push({
  name: `workerd's uncaught-exception lines in vitest's output: ${uncaught.unexplained.length} unexplained (explained: ${describeExplained(uncaught)})`,
  ok: uncaught.unexplained.length === 0,
});

console.log("");
for (const check of checks) console.log(`${check.ok ? "ok    " : "FAILED"} ${check.name}`);
for (const skip of summary?.skipped ?? [])
  console.log(
    summary!.unexcused.includes(skip)
      ? `FAILED skipped, and no entry of scripts/test-summary.ts's allow-list excuses it: ${skip.file} > ${skip.test}`
      : `skip   ${skip.file} > ${skip.test}${skip.allowed ? ` (${skip.allowed})` : ""}`,
  );
const failed = (summary?.failed ?? 0) + (summary?.unexcused.length ?? 0) + checks.filter((check) => !check.ok).length;
console.log(`\n${summary?.passed ?? 0} passed, ${failed} failed, ${summary?.skipped.length ?? 0} skipped`);
process.exit(failed === 0 ? 0 : 1);
