/**
 * Eval runs through `npm start` (the sandbox host and each simulated backend in a process of their
 * own, bubblewrap sandboxes where bubblewrap runs), on the repository's Harbor task set
 * (test/fixtures/env-tasks, 25 tasks) and its scripted policy (scripts.json on the simulator's
 * scripted agent model). At each concurrency, in rounds, one eval run and one bare rollout run of
 * the same tasks, attempts and concurrency, which goes first alternating from round to round:
 *
 * - attempts a minute: an eval run of every task x `attempts`, from `POST /v1/evals/runs` to the
 *   summary on `GET /v1/evals/runs/{id}/events`;
 * - the harness's overhead per attempt: the eval run's time per attempt against the rollout run's
 *   (`POST /v1/envs/rollouts` with `group_size = attempts`, from the request to the summary on its
 *   stream), as the ratio of their medians over the rounds and round by round, and each attempt's
 *   own time (its member's start to its end, from the runs' `rollout.ended` events) in both;
 * - the report read: `GET /v1/evals/runs/{id}` after each eval run ends, the first read apart (it
 *   settles the run's manifest) from the ones after it.
 *
 * Each member destroys its sandbox once it has reported; what is left of a run's is removed once it
 * has ended, untimed (`releaseSandboxes`).
 *
 *   npx tsx bench/evals.ts   # BENCH_EVAL_ATTEMPTS=4 BENCH_EVAL_ROUNDS=6 BENCH_EVAL_CONCURRENCY=8,32 BENCH_EVAL_READS=5
 */
import { pathToFileURL } from "node:url";
import { EvalReport } from "../protocol/evals/api.js";
import type { RolloutEvent, RunSummary } from "../protocol/envs/rollouts.js";
import { LOCAL_MODELS } from "../scripts/local-gateway.js";
import { savedLocalEdge } from "../test/support/local-edge.js";
import { expectStatus, readRunToSummary, rolloutRun, startEnvStack, type EnvStack } from "./env-fixture.js";
import { fmt, median, quantile, quantileInterval } from "./stats.js";

export interface EvalBenchOptions {
  /** Tasks of the set each run plays (the first ones, by name). */
  tasks?: number;
  /** Attempts per task (the rollout run's group size). */
  attempts?: number;
  /** Rounds of one eval run and one rollout run, at each concurrency. */
  rounds?: number;
  concurrency?: number[];
  /** Report reads after each eval run ends. */
  reads?: number;
}

export type RunKind = "eval" | "rollouts";

export interface TimedRun {
  kind: RunKind;
  id: string;
  /** The rollout run that played it (the eval run's own, or the rollout run itself). */
  rolloutRun: string;
  /** From the request that makes the run to its summary event. */
  ms: number;
  summary: RunSummary;
  /** Each ended attempt's own time, from its `rollout.ended` event. */
  attemptMs: number[];
}

export interface EvalRound {
  /** Which ran first. */
  order: RunKind[];
  eval: TimedRun;
  rollouts: TimedRun;
  /** The eval run's report, as the first read after its end gave it. */
  report: EvalReport;
  /** The first read after the run ended, and the reads after it. */
  firstReadMs: number;
  readMs: number[];
}

export interface EvalBenchResult {
  driver: string;
  settings: Required<EvalBenchOptions>;
  byConcurrency: { concurrency: number; rounds: EvalRound[] }[];
}

function authHeaders(env: EnvStack, json: boolean): Record<string, string> {
  return {
    Authorization: `Bearer ${savedLocalEdge(env.stack.edge).apiKey}`,
    ...(json ? { "Content-Type": "application/json" } : {}),
  };
}

/** An event handler that keeps each attempt's time, from its end event. */
function attemptTimes(into: number[]) {
  return (event: RolloutEvent) => {
    if (event.type === "rollout.ended" && event.data.durationMs !== null) into.push(event.data.durationMs);
  };
}

/** What both kinds of run share: the task set, its tasks, the model, sampling and concurrency. */
interface RunShape {
  tasks: number[];
  attempts: number;
  concurrency: number;
}

/** An eval run, from its POST to the summary on its event stream. */
export async function timedEvalRun(env: EnvStack, shape: RunShape): Promise<TimedRun> {
  const started = performance.now();
  const created = await fetch(`${env.stack.edge.baseURL}/v1/evals/runs`, {
    method: "POST",
    headers: authHeaders(env, true),
    body: JSON.stringify({
      taskset: env.taskset,
      tasks: shape.tasks,
      model: LOCAL_MODELS.chat,
      attempts: shape.attempts,
      concurrency: shape.concurrency,
      sampling: { seed: 0 },
    }),
  });
  if (created.status !== 201) throw new Error(`starting an eval run: ${created.status} ${await created.text()}`);
  const { id, rolloutRun } = (await created.json()) as { id: string; rolloutRun: string };
  const events = await fetch(`${env.stack.edge.baseURL}/v1/evals/runs/${id}/events`, {
    headers: { ...authHeaders(env, false), Accept: "text/event-stream" },
  });
  if (!events.ok) throw new Error(`following eval run ${id}: ${events.status} ${await events.text()}`);
  const attemptMs: number[] = [];
  const { ms, summary } = await readRunToSummary(events, started, attemptTimes(attemptMs));
  return { kind: "eval", id, rolloutRun, ms, summary, attemptMs };
}

/** A bare rollout run of the same shape, from its POST to the summary on the stream it answers with. */
export async function timedRolloutRun(env: EnvStack, shape: RunShape): Promise<TimedRun> {
  const attemptMs: number[] = [];
  const run = await rolloutRun(
    env,
    {
      tasks: shape.tasks,
      policy: { model: LOCAL_MODELS.chat },
      group_size: shape.attempts,
      concurrency: shape.concurrency,
      sampling: { seed: 0 },
    },
    attemptTimes(attemptMs),
  );
  return { kind: "rollouts", rolloutRun: run.id, ...run, attemptMs };
}

/**
 * Removes what is left of a timed run's sandboxes on the host (each rollout's sandbox is named by
 * its rollout id, `<run>-<member>`). A rollout destroys its own once it has reported, just after its
 * run hears of its end, so most are gone (404) or going; this makes sure none plays beside the next run.
 */
async function releaseSandboxes(env: EnvStack, run: TimedRun): Promise<void> {
  const ids = Array.from({ length: run.summary.rollouts }, (_, m) => `${run.rolloutRun}-${m}`);
  const worker = async () => {
    for (let id = ids.pop(); id !== undefined; id = ids.pop()) {
      const removed = await env.host("DELETE", `/v1/sandboxes/${id}`);
      expectStatus(removed, removed.status === 404 ? 404 : 204, `removing sandbox ${id}`);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

/** `GET /v1/evals/runs/{id}`: its time to the whole body, then the body checked. */
async function readReport(env: EnvStack, id: string): Promise<{ ms: number; report: EvalReport }> {
  const started = performance.now();
  const r = await env.edge("GET", `/v1/evals/runs/${id}`);
  const ms = performance.now() - started;
  expectStatus(r, 200, `reading eval run ${id}`);
  return { ms, report: EvalReport.parse(r.json) };
}

export async function runEvalBench(options: EvalBenchOptions = {}): Promise<EvalBenchResult> {
  const settings = {
    tasks: options.tasks ?? 25,
    attempts: options.attempts ?? 4,
    rounds: options.rounds ?? 6,
    concurrency: options.concurrency ?? [8, 32],
    reads: options.reads ?? 5,
  };
  if (!(Number.isInteger(settings.rounds) && settings.rounds >= 1)) throw new RangeError(`rounds: ${settings.rounds}`);
  if (!(Number.isInteger(settings.reads) && settings.reads >= 1)) throw new RangeError(`reads: ${settings.reads}`);
  if (!settings.concurrency.length || settings.concurrency.some((c) => !(Number.isInteger(c) && c >= 1)))
    throw new RangeError(`concurrency: ${settings.concurrency.join(",")}`);
  const env = await startEnvStack(settings.tasks);
  // The set has as many tasks as the fixture holds, however many were asked for.
  settings.tasks = env.tasks.length;
  try {
    const tasks = env.tasks.map((t) => t.index);
    // One small run of each kind untimed: the first runs pay for loading the edge's and the host's code.
    const warm = { tasks: [0], attempts: 1, concurrency: 1 };
    await releaseSandboxes(env, await timedEvalRun(env, warm));
    await releaseSandboxes(env, await timedRolloutRun(env, warm));

    const byConcurrency: EvalBenchResult["byConcurrency"] = settings.concurrency.map((concurrency) => ({
      concurrency,
      rounds: [],
    }));
    for (let round = 0; round < settings.rounds; round++)
      for (const [i, at] of byConcurrency.entries()) {
        const shape = { tasks, attempts: settings.attempts, concurrency: at.concurrency };
        // Alternating by round and by concurrency, so that neither kind always follows the other's tail.
        const order: RunKind[] = (round + i) % 2 === 0 ? ["eval", "rollouts"] : ["rollouts", "eval"];
        const runs = {} as Record<RunKind, TimedRun>;
        for (const kind of order) {
          runs[kind] = kind === "eval" ? await timedEvalRun(env, shape) : await timedRolloutRun(env, shape);
          // Before the next run, so that neither plays beside the other's idle sandboxes.
          await releaseSandboxes(env, runs[kind]);
        }
        const first = await readReport(env, runs.eval.id);
        const readMs: number[] = [];
        for (let r = 1; r < settings.reads; r++) readMs.push((await readReport(env, runs.eval.id)).ms);
        at.rounds.push({
          order,
          eval: runs.eval,
          rollouts: runs.rollouts,
          report: first.report,
          firstReadMs: first.ms,
          readMs,
        });
      }
    return { driver: env.driver, settings, byConcurrency };
  } finally {
    await env.stop();
  }
}

const bound = (x: number) => (Number.isFinite(x) && x > 0 ? x.toFixed(2) : "-");
const interval = (values: number[], q: number, unit = (x: number) => fmt(x)) => {
  const { lo, hi } = quantileInterval(values, q);
  return `[${Number.isFinite(lo) ? unit(lo) : "-"}, ${Number.isFinite(hi) ? unit(hi) : "-"}]`;
};
/** A ratio of two medians and the bounds their 95% intervals allow. */
function ratioInterval(num: number[], den: number[]): string {
  const n = quantileInterval(num, 0.5);
  const d = quantileInterval(den, 0.5);
  return `${(median(num) / median(den)).toFixed(2)}x [${bound(n.lo / d.hi)}, ${bound(n.hi / d.lo)}]`;
}
const perMinute = (r: TimedRun) => r.summary.rollouts / (r.ms / 60_000);
const perAttempt = (r: TimedRun) => r.ms / r.summary.rollouts;
const seconds = (ms: number) => (ms / 1000).toFixed(1);
const list = (values: number[], digits = 1) => values.map((x) => x.toFixed(digits)).join(", ");

export function reportEvalBench(r: EvalBenchResult): string {
  const s = r.settings;
  const total = s.tasks * s.attempts;
  const lines = [
    `Evals (${r.driver} sandboxes, the sandbox host and each simulated backend in a process of its own; the fixture task set's first ${s.tasks} tasks, the simulator's scripted policy):`,
    `  settings: ${s.tasks} tasks x ${s.attempts} attempt${s.attempts === 1 ? "" : "s"} = ${total} attempts a run; at concurrency ${s.concurrency.join(" and ")}, ${s.rounds} round${s.rounds === 1 ? "" : "s"} each of one eval run (POST /v1/evals/runs to the summary on its event stream) and one rollout run (POST /v1/envs/rollouts, group_size ${s.attempts}, to the summary on its stream), which first alternating; the eval run's report read ${s.reads} time${s.reads === 1 ? "" : "s"} after each`,
  ];
  const allReads: number[] = [];
  const firstReads: number[] = [];
  for (const { concurrency, rounds } of r.byConcurrency) {
    const evals = rounds.map((x) => x.eval);
    const bare = rounds.map((x) => x.rollouts);
    const evalRates = evals.map(perMinute);
    const bareRates = bare.map(perMinute);
    const evalPer = evals.map(perAttempt);
    const barePer = bare.map(perAttempt);
    const roundRatios = rounds.map((x) => perAttempt(x.eval) / perAttempt(x.rollouts));
    const evalOwn = evals.flatMap((x) => x.attemptMs);
    const bareOwn = bare.flatMap((x) => x.attemptMs);
    const finished = rounds.every(
      (x) =>
        x.eval.summary.ended === total &&
        x.rollouts.summary.ended === total &&
        x.report.tasks.reduce((n, t) => n + t.attempts.length, 0) === total,
    );
    const ratioBounds = quantileInterval(roundRatios, 0.5);
    lines.push(
      `  concurrency ${concurrency}: attempts a minute, eval runs ${list(evalRates)} (median ${median(evalRates).toFixed(1)}), rollout runs ${list(bareRates)} (median ${median(bareRates).toFixed(1)})`,
      `    run time per attempt: eval p50 ${fmt(median(evalPer))} ms, rollouts p50 ${fmt(median(barePer))} ms over ${rounds.length} runs each; eval/rollouts ${(median(evalPer) / median(barePer)).toFixed(2)}x, round by round ${list(roundRatios, 2)} (median ${median(roundRatios).toFixed(2)}x [${bound(ratioBounds.lo)}, ${bound(ratioBounds.hi)}]); harness overhead per attempt p50 ${fmt(median(rounds.map((x) => perAttempt(x.eval) - perAttempt(x.rollouts))))} ms`,
      `    an attempt's own time: eval p50 ${seconds(median(evalOwn))} s ${interval(evalOwn, 0.5, seconds)}, p95 ${seconds(quantile(evalOwn, 0.95))} s; rollouts p50 ${seconds(median(bareOwn))} s ${interval(bareOwn, 0.5, seconds)}, p95 ${seconds(quantile(bareOwn, 0.95))} s (${evalOwn.length} and ${bareOwn.length} attempts); eval/rollouts ${ratioInterval(evalOwn, bareOwn)}`,
      `    ${finished ? `every run finished all ${total} attempts` : "NOT every run finished all its attempts"}; eval pass@1 ${list(
        rounds.map((x) => x.report.summary.passAt1 ?? Number.NaN),
        2,
      )}, pass@${s.attempts} ${list(
        rounds.map((x) => x.report.summary.passAtK.value ?? Number.NaN),
        2,
      )}; mean reward eval ${list(
        evals.map((x) => x.summary.meanReward ?? Number.NaN),
        2,
      )}, rollouts ${list(
        bare.map((x) => x.summary.meanReward ?? Number.NaN),
        2,
      )}`,
    );
    firstReads.push(...rounds.map((x) => x.firstReadMs));
    allReads.push(...rounds.flatMap((x) => x.readMs));
  }
  lines.push(
    `  report read (GET /v1/evals/runs/{id}, ${s.tasks} tasks x ${s.attempts} attempts): first after the run's end p50 ${fmt(median(firstReads))} ms ${interval(firstReads, 0.5)} over ${firstReads.length}${allReads.length ? `; after it p50 ${fmt(median(allReads))} ms ${interval(allReads, 0.5)}, p95 ${fmt(quantile(allReads, 0.95))} ms over ${allReads.length}` : ""}`,
  );
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const env = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
  const result = await runEvalBench({
    tasks: env("BENCH_EVAL_TASKS"),
    attempts: env("BENCH_EVAL_ATTEMPTS"),
    rounds: env("BENCH_EVAL_ROUNDS"),
    concurrency: process.env.BENCH_EVAL_CONCURRENCY?.split(",").map((c) => Number(c.trim())),
    reads: env("BENCH_EVAL_READS"),
  });
  console.log(reportEvalBench(result));
}
