/**
 * Validates the task set the way an eval checks one: builds it (`npm run bench:tasks`' build, with
 * its host check), pushes it to `npm start`'s edge as `sextant envs push` does, with the sandbox
 * host (bubblewrap) in a process of its own, and runs two eval runs through the edge: `agent:
 * "oracle"` (each task's reference solution, then its verifier) and `agent: "noop"` (the verifier
 * on the untouched tree). Prints one line per task (oracle reward, noop reward, and whether the
 * edge's report marks it broken), the time of each phase and the total; exits 1 when any task is
 * broken or any run did not score every task.
 *
 * `validate.ts` checks a built set on a sandbox host alone and prints the verifier's log of a task
 * that fails; this script checks it through the eval routes, where the log is sealed to the org.
 *
 *   npx tsx bench/tasks/validate-all.ts [--out dir] [--no-build] [--only id1,id2] [--concurrency 4] [--cache dir]
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { tarballCacheDir } from "../../eval/fetch.js";
import { pushTaskSet, type TaskSetMap } from "../../client/envs/task-set.js";
import type { EvalAgent, EvalAttempt, EvalReport } from "../../protocol/evals/api.js";
import { startAgentStack, type AgentStack } from "../../test/support/agent-stack.js";
import { startAgentProcesses } from "../agent-processes.js";
import { buildTasks } from "./build.js";
import { DEFS_DIR } from "./def.js";

export interface TaskVerdict {
  /** The task's name in the set (`<split>/<id>`). */
  name: string;
  index: number;
  oracle: number | null;
  noop: number | null;
  /** As the edge's report of the later run marks it: oracle below 1 or noop above 0. */
  broken: boolean;
  /** Why an attempt did not score what it should: its outcome and failure kind. */
  why?: string;
}

export interface EdgeValidation {
  taskset: string;
  map: TaskSetMap;
  oracle: EvalReport;
  noop: EvalReport;
  rows: TaskVerdict[];
  /** Seconds each phase took. */
  seconds: { start: number; push: number; oracle: number; noop: number };
}

const since = (t: number) => (performance.now() - t) / 1000;

/** Makes an eval run, follows its events to the summary, and reads its report. */
async function evalRun(
  stack: AgentStack,
  taskset: string,
  agent: Exclude<EvalAgent, "model">,
  concurrency: number,
): Promise<EvalReport> {
  let id = "";
  let ended = 0;
  for await (const event of stack.sdk.evals.run(
    { taskset, agent, attempts: 1, concurrency },
    { onRun: (runId) => (id = runId) },
  ))
    if (event.type === "rollout.ended") ended++;
  const report = await stack.sdk.evals.get(id);
  if (ended !== report.tasks.length)
    throw new Error(`${agent} run ${id}: ${ended} of its ${report.tasks.length} attempts ended`);
  return report;
}

const attemptOf = (report: EvalReport, index: number): EvalAttempt | undefined =>
  report.tasks.find((t) => t.index === index)?.attempts[0];

/**
 * Pushes the built set under `dir` to a fresh edge and sandbox host, runs it with the oracle and
 * then with noop, and reads each task's verdict from the reports (the later one's `broken` reads
 * both runs).
 */
export async function validateOnEdge(
  dir: string,
  options: { concurrency?: number; log?: (line: string) => void } = {},
): Promise<EdgeValidation> {
  const log = options.log ?? (() => {});
  const concurrency = options.concurrency ?? 4;
  let t = performance.now();
  const processes = await startAgentProcesses();
  const stack = await startAgentStack({ vars: processes.vars }).catch(async (err: unknown) => {
    await processes.stop();
    throw err;
  });
  try {
    const start = since(t);
    t = performance.now();
    const { map } = await pushTaskSet(stack.sdk.envs, dir, stack.edge.baseURL);
    const push = since(t);
    log(`pushed ${Object.keys(map.tasks).length} tasks as ${map.id} (${push.toFixed(1)} s)`);
    t = performance.now();
    const oracleFirst = await evalRun(stack, map.id, "oracle", concurrency);
    const oracleSeconds = since(t);
    log(`oracle run ${oracleFirst.id} ended (${oracleSeconds.toFixed(1)} s)`);
    t = performance.now();
    const noop = await evalRun(stack, map.id, "noop", concurrency);
    const noopSeconds = since(t);
    log(`noop run ${noop.id} ended (${noopSeconds.toFixed(1)} s)`);
    // Read again: the oracle run's broken marks now read the noop run too.
    const oracle = await stack.sdk.evals.get(oracleFirst.id);
    const rows = Object.entries(map.tasks).map(([name, { index }]): TaskVerdict => {
      const o = attemptOf(oracle, index);
      const n = attemptOf(noop, index);
      const broken = noop.tasks.find((x) => x.index === index)?.broken ?? null;
      const why = [
        o && o.reward !== 1 ? `oracle ${o.outcome}${o.failureKind ? ` (${o.failureKind})` : ""}` : "",
        n && n.reward !== 0 ? `noop ${n.outcome}${n.failureKind ? ` (${n.failureKind})` : ""}` : "",
        o ? "" : "oracle: no attempt",
        n ? "" : "noop: no attempt",
      ].filter(Boolean);
      return {
        name,
        index,
        oracle: o?.reward ?? null,
        noop: n?.reward ?? null,
        broken: broken !== null || !o || !n,
        ...(why.length ? { why: why.join("; ") } : {}),
      };
    });
    return {
      taskset: map.id,
      map,
      oracle,
      noop,
      rows,
      seconds: { start, push, oracle: oracleSeconds, noop: noopSeconds },
    };
  } finally {
    await stack.edge.stop();
    await processes.stop();
  }
}

const reward = (r: number | null) => (r === null ? "-" : String(r));

export function formatVerdicts(rows: TaskVerdict[]): string {
  const width = Math.max(4, ...rows.map((r) => r.name.length));
  return [
    `${"task".padEnd(width)}  oracle  noop  verdict`,
    ...rows.map(
      (r) =>
        `${r.name.padEnd(width)}  ${reward(r.oracle).padStart(6)}  ${reward(r.noop).padStart(4)}  ${r.broken ? `BROKEN${r.why ? `: ${r.why}` : ""}` : "ok"}`,
    ),
  ].join("\n");
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      out: { type: "string" },
      "no-build": { type: "boolean", default: false },
      only: { type: "string" },
      concurrency: { type: "string", default: "4" },
      cache: { type: "string", default: join(dirname(tarballCacheDir()), "tasks") },
    },
  });
  const concurrency = Number(values.concurrency);
  if (!(Number.isInteger(concurrency) && concurrency >= 1)) {
    console.error("--concurrency must be a positive integer.");
    process.exit(2);
  }
  if (values["no-build"] && !values.out) {
    console.error("--no-build validates a set built before: name it with --out.");
    process.exit(2);
  }
  const out = resolve(values.out ?? mkdtempSync(join(tmpdir(), "sextant-tasks-")));
  const started = performance.now();
  let buildSeconds = 0;
  let skipped: string[] = [];
  if (!values["no-build"]) {
    const built = await buildTasks({
      out,
      defsDir: DEFS_DIR,
      ...(values.only ? { only: values.only.split(",").map((s) => s.trim()) } : {}),
      check: true,
      cacheDir: resolve(values.cache),
      log: (line) => console.error(line),
    });
    skipped = built.skipped;
    buildSeconds = since(started);
    console.error(`built ${built.built.length}, skipped ${skipped.length} (${buildSeconds.toFixed(1)} s, into ${out})`);
  }
  const result = await validateOnEdge(out, { concurrency, log: (line) => console.error(line) });
  const broken = result.rows.filter((r) => r.broken);
  const total = since(started);
  console.log(formatVerdicts(result.rows));
  const s = result.seconds;
  console.log(
    `${result.rows.length} tasks, ${result.rows.length - broken.length} valid, ${broken.length} broken` +
      `${skipped.length ? `; ${skipped.length} defs skipped by the build (${skipped.join(", ")})` : ""}` +
      ` (${total.toFixed(1)} s in all: build ${buildSeconds.toFixed(1)} s, edge and sandbox host start ${s.start.toFixed(1)} s,` +
      ` push ${s.push.toFixed(1)} s, oracle run ${s.oracle.toFixed(1)} s, noop run ${s.noop.toFixed(1)} s; ${concurrency} attempts at once)`,
  );
  process.exit(result.rows.length > 0 && broken.length === 0 && skipped.length === 0 ? 0 : 1);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
