/**
 * The text of a built task's files that are not the package's own: `tests/test.sh` (the verifier),
 * `solution/solve.sh`, `task.toml`, `environment/Dockerfile` and `instruction.md`.
 *
 * test.sh and solve.sh run in a sandbox, whose system may have neither awk nor bc: they use bash,
 * coreutils and the test command only. Both read their paths from TASK_TREE, TASK_TESTS, TASK_LOGS
 * and TASK_SOLUTION when set (the build's check runs them on the host that way) and otherwise use
 * Harbor's /workspace, /tests, /logs/verifier and /solution.
 */
import { stringify as stringifyToml } from "smol-toml";
import type { TaskDef } from "./def.js";

/** A word for bash, single-quoted. */
export const sq = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** How the verifier counts the passing tests of a command. */
export type Report =
  /** `node --test`: a TAP report of the runner's own, written to a file named at verify time. */
  | { kind: "node-test"; head: string; rest: string }
  /** pytest: a JUnit XML report written to a file named at verify time. */
  | { kind: "pytest"; head: string; rest: string }
  /** Anything else: the runners' summary lines in the output (TAP `# pass N`, mocha, uvu, pytest). */
  | { kind: "summary" };

/** A command that runs one program: no lists, pipes or substitutions that a report flag could land in the wrong part of. */
const SIMPLE = /^[^;&|`$()<>\n]*$/;

export function reportOf(command: string): Report {
  if (!SIMPLE.test(command)) return { kind: "summary" };
  const node = /^node\s+--test(?=\s|$)/.exec(command);
  if (node) return { kind: "node-test", head: node[0], rest: command.slice(node[0].length) };
  const pytest = /^(?:pytest(?:-3)?|python3?\s+-m\s+pytest)(?=\s|$)/.exec(command);
  if (pytest) return { kind: "pytest", head: pytest[0], rest: command.slice(pytest[0].length) };
  return { kind: "summary" };
}

/** The bash that runs the command with its output in the log and in "$output", and its exit status in "$status". */
function runLine(command: string, timeoutSec: number): string {
  const report = reportOf(command);
  // The report's path is only known at verify time: it is spliced between the quoted parts.
  const cmd =
    report.kind === "node-test"
      ? `${sq(`${report.head} --test-reporter=spec --test-reporter-destination=stdout --test-reporter=tap --test-reporter-destination=`)}"$report"${sq(report.rest)}`
      : report.kind === "pytest"
        ? `${sq(`${report.head} -p no:cacheprovider --junitxml=`)}"$report"${sq(report.rest)}`
        : sq(command);
  return `timeout -k 10 ${timeoutSec} bash -c ${cmd} </dev/null 2>&1 | tee "$output"\nstatus=\${PIPESTATUS[0]}`;
}

const COUNTERS: Record<Report["kind"], string> = {
  // The summary is the report's last `# pass N`: lines a test prints come before it.
  "node-test": `while IFS= read -r line; do
  if [[ $line =~ ^#\\ pass\\ ([0-9]+)$ ]]; then passed=\${BASH_REMATCH[1]}; fi
done <"$report"`,
  pytest: `xml=$(cat "$report")
suite='<testsuite [^>]*>'
if [[ $xml =~ $suite ]]; then
  tag=\${BASH_REMATCH[0]}
  attr() { local re=" $1=\\"([0-9]+)\\""; if [[ $tag =~ $re ]]; then echo "\${BASH_REMATCH[1]}"; else echo 0; fi; }
  passed=$(($(attr tests) - $(attr failures) - $(attr errors) - $(attr skipped)))
fi`,
  // Every runner's summary line found is added up: a command may run several runners in turn.
  summary: `shopt -s extglob
tap='^# pass +([0-9]+)'
mocha='^ *([0-9]+) passing'
uvu='^ *Passed: +([0-9]+)'
pytest='^=+ (.*[ ,])?([0-9]+) passed'
# grep first: a runner may print a line per assertion, and bash reads lines slowly.
grep -aE 'pass|Pass' "$output" >"$output.summary"
while IFS= read -r line; do
  line=\${line//$'\\e'\\[*([0-9;])m/}
  if [[ $line =~ $tap || $line =~ $mocha || $line =~ $uvu ]]; then passed=$((passed + BASH_REMATCH[1]));
  elif [[ $line =~ $pytest ]]; then passed=$((passed + BASH_REMATCH[2])); fi
done <"$output.summary"
rm -f "$output.summary"`,
};

/**
 * The verifier. `expected` is the number of tests the untouched package passed at build time;
 * `restore` the tree paths it puts back from `tests/files/` first.
 */
export function testScript(command: string, timeoutSec: number, expected: number, restore: string[]): string {
  const kind = reportOf(command).kind;
  return `#!/bin/bash
# The verifier: puts the package's own test files back as they shipped (an edit to them gains
# nothing), runs the package's tests, and scores 1 when they exit 0 with at least as many passing
# as the untouched package had when this task was built.
tree=\${TASK_TREE:-/workspace}
tests=\${TASK_TESTS:-/tests}
logs=\${TASK_LOGS:-/logs/verifier}
expected=${expected}
mkdir -p "$logs"
rm -f "$logs/reward.txt" "$logs/reward.json"
score() { echo "$1" >"$logs/reward.txt"; exit 0; }
cd "$tree" || score 0
for path in ${restore.map(sq).join(" ")}; do
  rm -rf -- "$path"
  mkdir -p -- "$(dirname -- "$path")"
  cp -R -- "$tests/files/$path" "$path" || score 0
done
export PYTHONDONTWRITEBYTECODE=1
# Named at verify time, so nothing in the tree can know where the runner's report goes.
nonce=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')
report="$logs/report-$nonce"
output="$logs/output-$nonce"
${runLine(command, timeoutSec)}
passed=0
${COUNTERS[kind]}
rm -f "$output"
echo "sextant-verifier: the tests exited $status with $passed passing; $expected passing needed"
if [ "$status" -eq 0 ] && [ "$passed" -ge "$expected" ]; then score 1; else score 0; fi
`;
}

/** The reference solution: the mutated files as the package shipped them. */
export function solveScript(files: string[]): string {
  return `#!/bin/bash
# The reference solution: puts back the file(s) as the package shipped them.
set -euo pipefail
solution=\${TASK_SOLUTION:-/solution}
cd "\${TASK_TREE:-/workspace}"
${files.map((f) => `cp -- "$solution/files/"${sq(f)} ${sq(f)}`).join("\n")}
`;
}

export interface TomlFacts {
  split: "train" | "heldout";
  /** Bytes of the task's starting tree: the sandbox's disk is sized from it. */
  treeBytes: number;
}

export function taskToml(def: TaskDef, facts: TomlFacts): string {
  const mb = Math.ceil(facts.treeBytes / 2 ** 20);
  return `${stringifyToml({
    version: "1.0",
    metadata: {
      id: def.id,
      package: def.source.package,
      version: def.source.version,
      ecosystem: def.source.ecosystem,
      language: def.language,
      split: facts.split,
      source_sha256: def.source.sha256,
      mutation: def.mutation.kind,
      ...(def.mutation.kind === "reverted-fix" ? { upstream: def.mutation.upstream } : {}),
    },
    // Room for the restore and the runner's start beside the tests' own limit.
    verifier: { timeout_sec: def.test.timeoutSec + 60 },
    agent: { timeout_sec: 1800 },
    // Room for the tree, a copy of it, and what the tests write.
    environment: { cpus: 1, memory_mb: 2048, storage_mb: Math.max(512, 4 * mb + 256) },
  })}\n`;
}

export function dockerfile(def: TaskDef): string {
  const image = def.language === "python" ? "python:3.11-slim-bookworm" : "node:20-bookworm-slim";
  return `# The sandbox runs on a Debian bookworm system with ${def.language === "python" ? "Python 3.11 and pytest" : "Node 20"}: this image is the same for Docker.
FROM ${image}
WORKDIR /workspace
COPY . /workspace
`;
}

export function instruction(def: TaskDef): string {
  return `${def.statement.trim()}\n\nThe project is in /workspace. Its own tests run with \`${def.test.command}\`.\n`;
}
