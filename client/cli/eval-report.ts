/**
 * How `sextant eval` shows a run and a comparison: a row per task, the run's summary, the tasks left
 * out as broken, the tasks an oracle or noop run found wrong, failed attempts' verifier logs, and two
 * runs side by side. Each function returns text, so the command only writes it.
 */
import type { BrokenTask, EvalAttempt, EvalReport, EvalRun, EvalTaskReport } from "../../protocol/evals/api.js";
import { taskStats, type RunComparison, type TaskStats } from "../../protocol/evals/stats.js";
import type { AttemptLog } from "../envs/eval-logs.js";
import { formatTable } from "./output.js";

const short = (sha256: string) => sha256.slice(0, 12);
const fixed = (n: number | null, digits = 3) => (n === null ? "-" : n.toFixed(digits));
const signed = (n: number, digits = 3) => `${n >= 0 ? "+" : ""}${n.toFixed(digits)}`;
export const usd = (n: number | null) => (n === null ? "-" : `$${n < 1 ? n.toFixed(4) : n.toFixed(2)}`);
export const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const ratio = (n: number | null) => (n === null ? "-" : `${n.toFixed(2)}x`);
const count = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
const taskName = (t: { index: number; sha256: string }) => `task ${t.index} (${short(t.sha256)})`;

/** Why a task's attempts failed, as "tests 2, budget 1". */
export function failureText(attempts: EvalAttempt[]): string {
  const kinds = new Map<string, number>();
  for (const a of attempts) if (a.failureKind) kinds.set(a.failureKind, (kinds.get(a.failureKind) ?? 0) + 1);
  return [...kinds].map(([kind, n]) => `${kind} ${n}`).join(", ");
}

/** A broken mark as "oracle 0, noop 1" (a score the run had none of shows as "-"). */
export function brokenLabel(mark: BrokenTask): string {
  const parts: string[] = [];
  if (mark.oracle !== undefined) parts.push(`oracle ${mark.oracle === null ? "-" : mark.oracle}`);
  if (mark.noop !== undefined) parts.push(`noop ${mark.noop === null ? "-" : mark.noop}`);
  return parts.join(", ");
}

export const reportStats = (report: EvalReport): TaskStats[] => report.tasks.map((t) => taskStats(t, report.attempts));

/** The table: one row per task. */
export function taskTable(report: EvalReport): string {
  const rows = report.tasks.map((task) => ({ task, stats: taskStats(task, report.attempts) }));
  return formatTable(rows, [
    ["task", (r) => String(r.task.index)],
    ["sha256", (r) => short(r.task.sha256)],
    ["passed", (r) => `${r.stats.passed}/${r.stats.attempts}`],
    ["pass@1", (r) => fixed(r.stats.passAt1)],
    [`pass@${report.attempts}`, (r) => fixed(r.stats.passAtK)],
    ["reward", (r) => fixed(r.stats.meanReward)],
    ["tokens", (r) => String(r.stats.tokens)],
    ["cost", (r) => usd(r.stats.costUsd)],
    ["time", (r) => seconds(r.stats.wallMs)],
    ["failures", (r) => (r.task.broken ? "broken" : failureText(r.task.attempts))],
  ]);
}

const playedBy = (run: EvalRun) =>
  run.agent === "model" ? `${run.model}${run.checkpoint ? ` (${run.checkpoint})` : ""}` : `the ${run.agent} agent`;

/** The summary under the table, broken tasks listed apart. */
export function summaryText(report: EvalReport): string {
  const s = report.summary;
  const failures = Object.entries(s.failures)
    .map(([kind, n]) => `${kind} ${n}`)
    .join(", ");
  const lines = [
    `Eval ${report.id}: ${playedBy(report)} on ${report.taskset}, ${report.status}`,
    `${count(s.tasks, "task")} (${s.counted} counted), ${count(s.attempts, "attempt")}, ${s.passed} passed`,
    `pass@1 ${fixed(s.passAt1)}  pass@${s.passAtK.k} ${fixed(s.passAtK.value)}  mean reward ${fixed(s.meanReward)}`,
    `${s.tokens} tokens, cost ${usd(s.costUsd)}, attempts' time ${seconds(s.wallMs)}`,
    `Failures: ${failures}`,
  ];
  // Grouped by what the oracle and noop runs scored, so a set with many broken tasks stays short.
  const broken = new Map<string, EvalTaskReport[]>();
  for (const t of report.tasks)
    if (t.broken) broken.set(brokenLabel(t.broken), [...(broken.get(brokenLabel(t.broken)) ?? []), t]);
  for (const [label, tasks] of broken) lines.push(`broken (${label}): ${tasks.map(taskName).join(", ")}`);
  return lines.join("\n") + "\n";
}

/** A task an oracle or noop run scored other than it should (1 solved, 0 untouched). */
export interface ValidationFailure {
  index: number;
  sha256: string;
  rewards: (number | null)[];
}

/** For an oracle or noop run, the tasks it found wrong; null for a model's run. */
export function validationFailures(report: EvalReport): ValidationFailure[] | null {
  if (report.agent === "model") return null;
  const wrong = (r: number | null) => r === null || (report.agent === "oracle" ? r < 1 : r > 0);
  return report.tasks
    .filter((t) => t.attempts.length === 0 || t.attempts.some((a) => wrong(a.reward)))
    .map((t) => ({ index: t.index, sha256: t.sha256, rewards: t.attempts.map((a) => a.reward) }));
}

export function validationText(report: EvalReport): string {
  const failures = validationFailures(report);
  if (failures === null) return "";
  const should = report.agent === "oracle" ? 1 : 0;
  if (failures.length === 0) return `Validation (${report.agent}): every task scored ${should}.\n`;
  const scored = (f: ValidationFailure) =>
    f.rewards.length === 0 ? "not played" : `scored ${f.rewards.map((r) => (r === null ? "-" : r)).join(", ")}`;
  return (
    `Validation (${report.agent}): ${failures.length} of ${count(report.tasks.length, "task")} failed (each should score ${should}):\n` +
    failures.map((f) => `  ${taskName(f)} ${scored(f)}\n`).join("")
  );
}

/** ANSI escapes and control characters other than tab and newline, which a log may hold and a terminal would act on. */
const CONTROL = /\u001b\[[0-9;?]*[ -/]*[@-~]|[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

export function logsText(logs: AttemptLog[], lines: number): string {
  if (logs.length === 0) return "";
  const out = [`Verifier logs of failed attempts (last ${lines} lines):`];
  for (const l of logs) {
    out.push(`${taskName(l)}, attempt ${l.attempt}${l.failureKind ? ` (${l.failureKind})` : ""}:`);
    if (l.log === null) {
      out.push(`  (no log: ${l.missing ?? "none kept"})`);
      continue;
    }
    const text = l.log.replace(CONTROL, "").replace(/\r\n?/g, "\n").replace(/\n+$/, "");
    for (const line of text.split("\n").slice(-lines)) out.push(`  | ${line}`);
  }
  return out.join("\n") + "\n";
}

/** `eval list`: one row per run. */
export function runsTable(runs: EvalRun[]): string {
  return formatTable(runs, [
    ["id", (r) => r.id],
    ["taskset", (r) => r.taskset],
    ["agent", (r) => r.agent],
    ["model", (r) => r.model],
    ["checkpoint", (r) => r.checkpoint],
    ["attempts", (r) => String(r.attempts)],
    ["status", (r) => r.status],
    ["created", (r) => r.createdAt.replace("T", " ").slice(0, 16)],
  ]);
}

/** `eval compare`: the tasks side by side, then wins and losses, the difference and its interval, the ratios. */
export function comparisonText(a: EvalRun, b: EvalRun, c: RunComparison): string {
  const table = formatTable(c.tasks, [
    ["sha256", (t) => short(t.sha256)],
    ["task a", (t) => String(t.indexA)],
    ["task b", (t) => String(t.indexB)],
    ["pass@1 a", (t) => fixed(t.passAt1A)],
    ["pass@1 b", (t) => fixed(t.passAt1B)],
    ["diff", (t) => (t.difference === null ? null : signed(t.difference))],
    ["result", (t) => t.result ?? `not counted: ${t.excluded}`],
  ]);
  const lines = [
    `b ${b.id} (${playedBy(b)}) against a ${a.id} (${playedBy(a)}): ${count(c.counted, "task")} compared`,
    `Wins ${c.wins}, losses ${c.losses}, ties ${c.ties} (b against a, by pass@1)`,
  ];
  if (c.difference !== null && c.interval !== null) {
    const { low, high, confidence, resamples, seed } = c.interval;
    lines.push(
      `pass@1 ${fixed(c.passAt1A)} -> ${fixed(c.passAt1B)}: difference ${signed(c.difference)} ` +
        `(${Math.round(confidence * 100)}% CI ${signed(low)} to ${signed(high)}; paired bootstrap over tasks, ${resamples} resamples, seed ${seed})`,
    );
  } else lines.push("pass@1 difference: - (no task both runs count)");
  lines.push(`Cost per attempt ${ratio(c.costRatio)}, time per attempt ${ratio(c.timeRatio)} (b over a)`);
  if (c.onlyA.length) lines.push(`Only in a: ${c.onlyA.map(taskName).join(", ")}`);
  if (c.onlyB.length) lines.push(`Only in b: ${c.onlyB.map(taskName).join(", ")}`);
  return table + lines.join("\n") + "\n";
}
