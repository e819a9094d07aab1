/**
 * `npm test`: type-checks everything (tests included), runs every vitest project, and ends
 * with the plain `N passed, N failed` line that CI reads. Extra arguments go to vitest.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync } from "node:fs";

const REPORT = ".vitest/results.json";

function run(command: string, args: string[]): boolean {
  console.log(`\n$ ${command} ${args.join(" ")}`);
  return spawnSync(command, args, { stdio: "inherit" }).status === 0;
}

let failed = 0;
let passed = 0;
for (const project of ["tsconfig.json", "tsconfig.node.json"]) {
  if (run("npx", ["tsc", "-p", project])) passed++;
  else failed++;
}

mkdirSync(".vitest", { recursive: true });
rmSync(REPORT, { force: true });
const vitestOk = run("npx", [
  "vitest",
  "run",
  "--reporter=default",
  "--reporter=json",
  `--outputFile.json=${REPORT}`,
  ...process.argv.slice(2),
]);

try {
  const report = JSON.parse(readFileSync(REPORT, "utf8")) as { numPassedTests: number; numFailedTests: number };
  passed += report.numPassedTests;
  failed += report.numFailedTests;
  // A crash outside any test (an unhandled error, a failed setup) fails the run even with no failed test.
  if (!vitestOk && report.numFailedTests === 0) failed++;
} catch {
  failed++;
}

console.log(`\n${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
