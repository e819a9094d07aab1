/**
 * The numbers of an eval run, shared by the edge, the CLI, the SDK and the dashboard so that each
 * shows the same figures: the unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large
 * Language Models Trained on Code"), a run's summary over the tasks it counts, and the comparison of
 * two runs task by task with a paired bootstrap interval on the pass@1 difference.
 *
 * A task marked broken (its reference solution does not score 1, or its untouched tree does not
 * score 0) measures the task, not the model: it is listed, never counted.
 */
import { uniformInt } from "pure-rand/distribution/uniformInt";
import { xoroshiro128plus } from "pure-rand/generator/xoroshiro128plus";

/** What the math reads of one attempt. */
export interface AttemptStats {
  /** Null when the attempt could not be verified: it scored nothing. */
  reward: number | null;
  passed: boolean;
  tokens: number;
  /** Null when no price is known for the model. */
  costUsd: number | null;
  /** Null when the attempt never started. */
  durationMs: number | null;
}

/** What the math reads of one task of a run: its ended attempts. */
export interface TaskStatsInput {
  index: number;
  sha256: string;
  /** Broken when true or an object (a report's mark of what the oracle and noop runs scored); null or false when not. */
  broken: boolean | object | null;
  attempts: AttemptStats[];
}

const isBroken = (t: TaskStatsInput) => t.broken !== null && t.broken !== false;

function wholeAtLeast(name: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min)
    throw new RangeError(`${name} must be a whole number of at least ${min}, not ${value}`);
}

/**
 * The unbiased estimate of pass@k from `n` attempts of which `c` passed: the chance that at least
 * one of `k` attempts drawn without replacement passes, 1 − C(n−c, k)/C(n, k). Computed as
 * 1 − ∏_{i=n−c+1}^{n} (1 − k/i), which never forms the binomials (C(200, 100) is past 2^53).
 * Undefined for k > n: a run of n attempts says nothing of k of them.
 */
export function passAtK(n: number, c: number, k: number): number {
  wholeAtLeast("n", n, 1);
  wholeAtLeast("c", c, 0);
  wholeAtLeast("k", k, 1);
  if (c > n) throw new RangeError(`c (${c}) must be at most n (${n})`);
  if (k > n) throw new RangeError(`pass@${k} is undefined for ${n} attempt${n === 1 ? "" : "s"}: k must be at most n`);
  // Fewer failures than k: every draw of k holds a pass.
  if (n - c < k) return 1;
  let none = 1;
  for (let i = n - c + 1; i <= n; i++) none *= 1 - k / i;
  return 1 - none;
}

/** One task's figures. */
export interface TaskStats {
  index: number;
  sha256: string;
  broken: boolean;
  attempts: number;
  passed: number;
  /** Null before the task has an ended attempt. */
  passAt1: number | null;
  /** Null while the task has fewer than k ended attempts. */
  passAtK: number | null;
  /** Over its attempts, an unverified attempt scoring 0; null before it has one. */
  meanReward: number | null;
  tokens: number;
  /** Null if any attempt's cost is unknown. */
  costUsd: number | null;
  /** The attempts' durations added up. */
  wallMs: number;
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);

function costOf(attempts: AttemptStats[]): number | null {
  let total = 0;
  for (const a of attempts) {
    if (a.costUsd === null) return null;
    total += a.costUsd;
  }
  return total;
}

export function taskStats(task: TaskStatsInput, k: number): TaskStats {
  wholeAtLeast("k", k, 1);
  const n = task.attempts.length;
  const passed = task.attempts.filter((a) => a.passed).length;
  return {
    index: task.index,
    sha256: task.sha256,
    broken: isBroken(task),
    attempts: n,
    passed,
    passAt1: n === 0 ? null : passAtK(n, passed, 1),
    passAtK: n < k ? null : passAtK(n, passed, k),
    meanReward: n === 0 ? null : sum(task.attempts.map((a) => a.reward ?? 0)) / n,
    tokens: sum(task.attempts.map((a) => a.tokens)),
    costUsd: costOf(task.attempts),
    wallMs: sum(task.attempts.map((a) => a.durationMs ?? 0)),
  };
}

/** A run's figures over the tasks it counts (those not broken). */
export interface RunSummary {
  /** Every task of the run, broken ones included. */
  tasks: number;
  /** Tasks not broken: the ones every figure below is over. */
  counted: number;
  attempts: number;
  passed: number;
  /** Mean of the counted tasks' pass@1; null if a counted task has no ended attempt (or none is counted). */
  passAt1: number | null;
  /** Mean of the counted tasks' pass@k; null if a counted task has fewer than k ended attempts. */
  passAtK: number | null;
  /** Over every counted attempt, an unverified attempt scoring 0. */
  meanReward: number | null;
  tokens: number;
  /** Null if any counted attempt's cost is unknown. */
  costUsd: number | null;
  /** The counted attempts' durations added up: the time attempts took, which concurrency does not shorten. */
  wallMs: number;
}

const meanOrNull = (values: (number | null)[]) =>
  values.length === 0 || values.some((v) => v === null) ? null : sum(values as number[]) / values.length;

export function summarize(tasks: TaskStatsInput[], k: number): RunSummary {
  wholeAtLeast("k", k, 1);
  const counted = tasks.filter((t) => !isBroken(t));
  const stats = counted.map((t) => taskStats(t, k));
  const attempts = counted.flatMap((t) => t.attempts);
  return {
    tasks: tasks.length,
    counted: counted.length,
    attempts: attempts.length,
    passed: attempts.filter((a) => a.passed).length,
    passAt1: meanOrNull(stats.map((s) => s.passAt1)),
    passAtK: meanOrNull(stats.map((s) => s.passAtK)),
    meanReward: attempts.length === 0 ? null : sum(attempts.map((a) => a.reward ?? 0)) / attempts.length,
    tokens: sum(attempts.map((a) => a.tokens)),
    costUsd: costOf(attempts),
    wallMs: sum(attempts.map((a) => a.durationMs ?? 0)),
  };
}

export interface CompareOptions {
  /** Bootstrap resamples; default 10,000. */
  resamples?: number;
  /** The interval's coverage, between 0 and 1; default 0.95. */
  confidence?: number;
  /** The resampling's seed: the same seed gives the same interval. Default 0. */
  seed?: number;
}

/** A task both runs played, matched by its archive's SHA-256. */
export interface ComparedTask {
  sha256: string;
  indexA: number;
  indexB: number;
  passAt1A: number | null;
  passAt1B: number | null;
  /** b's pass@1 less a's; null when the task is not counted. */
  difference: number | null;
  /** From b's side: "win" when b's pass@1 is higher. Null when the task is not counted. */
  result: "win" | "loss" | "tie" | null;
  /** Why the task is not counted (broken in a run, or no ended attempt in one); absent when counted. */
  excluded?: string;
}

export interface RunComparison {
  tasks: ComparedTask[];
  /** Tasks only one run played, by their index there. */
  onlyA: { index: number; sha256: string }[];
  onlyB: { index: number; sha256: string }[];
  /** Tasks both runs played, neither marks broken and both have attempts of: the ones compared. */
  counted: number;
  wins: number;
  losses: number;
  ties: number;
  /** Mean pass@1 of each run over the counted tasks. */
  passAt1A: number | null;
  passAt1B: number | null;
  /** b − a, the mean over counted tasks of the pass@1 difference; null when none is counted. */
  difference: number | null;
  /** A percentile bootstrap interval of `difference`, resampling the counted tasks with replacement. */
  interval: { low: number; high: number; confidence: number; resamples: number; seed: number } | null;
  /** b's cost per attempt over a's, on the counted tasks; null when either is unknown or a's is 0. */
  costRatio: number | null;
  /** b's time per attempt over a's, on the counted tasks; null when a's is 0. */
  timeRatio: number | null;
}

/** A run's tasks by archive, a task named twice in a set pooling its attempts. */
function byArchive(tasks: TaskStatsInput[]): Map<string, TaskStatsInput> {
  const out = new Map<string, TaskStatsInput>();
  for (const t of tasks) {
    const seen = out.get(t.sha256);
    out.set(
      t.sha256,
      seen
        ? { ...seen, broken: isBroken(seen) || isBroken(t), attempts: [...seen.attempts, ...t.attempts] }
        : { ...t, attempts: [...t.attempts] },
    );
  }
  return out;
}

/** The q-quantile of sorted values, interpolated between neighbours (Hyndman and Fan's type 7, R's default). */
function quantile(sorted: Float64Array, q: number): number {
  const at = (sorted.length - 1) * q;
  const lo = Math.floor(at);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (at - lo);
}

const ratio = (b: number | null, a: number | null) => (a === null || b === null || a === 0 ? null : b / a);

/**
 * Compares run `b` with run `a` task by task. The interval is repeatable: resampling is driven by a
 * seeded xoroshiro128+ generator, so one seed always gives one interval.
 */
export function compareRuns(
  a: { tasks: TaskStatsInput[] },
  b: { tasks: TaskStatsInput[] },
  options: CompareOptions = {},
): RunComparison {
  const resamples = options.resamples ?? 10_000;
  const confidence = options.confidence ?? 0.95;
  const seed = options.seed ?? 0;
  wholeAtLeast("resamples", resamples, 1);
  if (!(confidence > 0 && confidence < 1))
    throw new RangeError(`confidence must be between 0 and 1, not ${confidence}`);
  if (!Number.isSafeInteger(seed)) throw new RangeError(`seed must be a whole number, not ${seed}`);

  const tasksA = byArchive(a.tasks);
  const tasksB = byArchive(b.tasks);
  const tasks: ComparedTask[] = [];
  const differences: number[] = [];
  let wins = 0;
  let losses = 0;
  let ties = 0;
  let sumA = 0;
  let sumB = 0;
  const shared = { A: [] as AttemptStats[], B: [] as AttemptStats[] };
  for (const [sha256, ta] of tasksA) {
    const tb = tasksB.get(sha256);
    if (!tb) continue;
    const passAt1A = taskStats(ta, 1).passAt1;
    const passAt1B = taskStats(tb, 1).passAt1;
    const excluded = isBroken(ta)
      ? "broken in a"
      : isBroken(tb)
        ? "broken in b"
        : passAt1A === null
          ? "no ended attempt in a"
          : passAt1B === null
            ? "no ended attempt in b"
            : undefined;
    const base = { sha256, indexA: ta.index, indexB: tb.index, passAt1A, passAt1B };
    if (excluded !== undefined) {
      tasks.push({ ...base, difference: null, result: null, excluded });
      continue;
    }
    const difference = passAt1B! - passAt1A!;
    const result = difference > 0 ? "win" : difference < 0 ? "loss" : "tie";
    if (result === "win") wins++;
    else if (result === "loss") losses++;
    else ties++;
    tasks.push({ ...base, difference, result });
    differences.push(difference);
    sumA += passAt1A!;
    sumB += passAt1B!;
    shared.A.push(...ta.attempts);
    shared.B.push(...tb.attempts);
  }
  tasks.sort((x, y) => x.indexA - y.indexA);

  const m = differences.length;
  let interval: RunComparison["interval"] = null;
  if (m > 0) {
    const rng = xoroshiro128plus(seed);
    const means = new Float64Array(resamples);
    for (let r = 0; r < resamples; r++) {
      let total = 0;
      for (let i = 0; i < m; i++) total += differences[uniformInt(rng, 0, m - 1)]!;
      means[r] = total / m;
    }
    means.sort();
    const tail = (1 - confidence) / 2;
    interval = { low: quantile(means, tail), high: quantile(means, 1 - tail), confidence, resamples, seed };
  }

  const perAttempt = (total: number | null, attempts: AttemptStats[]) =>
    total === null || attempts.length === 0 ? null : total / attempts.length;
  const timeOf = (attempts: AttemptStats[]) => sum(attempts.map((x) => x.durationMs ?? 0));
  const only = (from: Map<string, TaskStatsInput>, other: Map<string, TaskStatsInput>) =>
    [...from.values()]
      .filter((t) => !other.has(t.sha256))
      .map((t) => ({ index: t.index, sha256: t.sha256 }))
      .sort((x, y) => x.index - y.index);

  return {
    tasks,
    onlyA: only(tasksA, tasksB),
    onlyB: only(tasksB, tasksA),
    counted: m,
    wins,
    losses,
    ties,
    passAt1A: m === 0 ? null : sumA / m,
    passAt1B: m === 0 ? null : sumB / m,
    difference: m === 0 ? null : sum(differences) / m,
    interval,
    costRatio: ratio(perAttempt(costOf(shared.B), shared.B), perAttempt(costOf(shared.A), shared.A)),
    timeRatio: ratio(perAttempt(timeOf(shared.B), shared.B), perAttempt(timeOf(shared.A), shared.A)),
  };
}
