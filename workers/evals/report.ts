/**
 * An eval run's report, as a pure function of its manifest, its rollout run's ended attempts and
 * the task set's broken tasks: every task of the run with its attempts, and the summary over the
 * tasks that count (`protocol/evals/stats.ts`, the same figures the CLI and the dashboard show).
 */
import type {
  BrokenTask,
  EvalAttempt,
  EvalReport,
  EvalRun,
  EvalSummary,
  EvalTaskReport,
  FailureCounts,
} from "../../protocol/evals/api.js";
import { evalAttempt } from "../../protocol/evals/attempt.js";
import { summarize } from "../../protocol/evals/stats.js";
import type { EvalAttempts } from "../../durable-objects/env-run/eval-rows.js";

/** Each of the run's tasks (by its place in the run) with its ended attempts, in attempt order. */
function byTask(run: EvalRun, played: EvalAttempts): EvalAttempt[][] {
  const tasks: EvalAttempt[][] = played.tasks.map(() => []);
  // Members are numbered task by task: member m is attempt m mod k of the run's task m div k.
  for (const m of played.attempts) tasks[Math.floor(m.member / played.groupSize)]?.push(evalAttempt(m, run.price));
  for (const t of tasks) t.sort((a, b) => a.attempt - b.attempt);
  return tasks;
}

/** Each task's mean reward by its index in the set (null when an attempt of it has none): what marks a set's broken tasks. */
export function taskRewards(played: EvalAttempts): Record<string, number | null> {
  const sums = new Map<number, { sum: number; n: number; unscored: boolean }>();
  for (const m of played.attempts) {
    const t = sums.get(m.task.index) ?? { sum: 0, n: 0, unscored: false };
    if (m.reward === null) t.unscored = true;
    else t.sum += m.reward;
    t.n += 1;
    sums.set(m.task.index, t);
  }
  const out: Record<string, number | null> = {};
  for (const [index, t] of [...sums].sort((a, b) => a[0] - b[0])) out[index] = t.unscored ? null : t.sum / t.n;
  return out;
}

/**
 * Which tasks of a set are broken, from what its latest oracle and noop runs scored each: the
 * reference solution below 1, or the untouched tree above 0 (a task either could not score is
 * broken too). Tasks neither run shows broken are absent.
 */
export function brokenTasks(
  oracle: Record<string, number | null> | null,
  noop: Record<string, number | null> | null,
): Map<number, BrokenTask> {
  const broken = new Map<number, BrokenTask>();
  const indexes = new Set([...Object.keys(oracle ?? {}), ...Object.keys(noop ?? {})].map(Number));
  for (const index of indexes) {
    const o = oracle && String(index) in oracle ? oracle[index]! : undefined;
    const n = noop && String(index) in noop ? noop[index]! : undefined;
    const bad = (o !== undefined && (o === null || o < 1)) || (n !== undefined && (n === null || n > 0));
    if (bad) broken.set(index, { ...(o !== undefined ? { oracle: o } : {}), ...(n !== undefined ? { noop: n } : {}) });
  }
  return broken;
}

function failures(tasks: EvalTaskReport[]): FailureCounts {
  const counts: FailureCounts = { tests: 0, budget: 0, error: 0, quota: 0 };
  for (const t of tasks) if (!t.broken) for (const a of t.attempts) if (a.failureKind) counts[a.failureKind] += 1;
  return counts;
}

export function evalSummary(tasks: EvalTaskReport[], k: number): EvalSummary {
  const s = summarize(
    tasks.map((t) => ({ index: t.index, sha256: t.sha256, broken: t.broken !== null, attempts: t.attempts })),
    k,
  );
  return { ...s, passAtK: { k, value: s.passAtK }, failures: failures(tasks) };
}

export function evalReport(run: EvalRun, played: EvalAttempts, broken: Map<number, BrokenTask>): EvalReport {
  const attempts = byTask(run, played);
  const tasks: EvalTaskReport[] = played.tasks.map((task, i) => ({
    index: task.index,
    sha256: task.sha256,
    broken: broken.get(task.index) ?? null,
    attempts: attempts[i]!,
  }));
  return { ...run, tasks, summary: evalSummary(tasks, run.attempts) };
}
