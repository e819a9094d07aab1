/**
 * Eval runs (`/v1/evals/runs`): every chosen task of a task set played `attempts` times (by a model,
 * or by the task's reference solution or nobody, to check the set), each attempt verified, and the
 * run reported task by task with pass@1, pass@k, cost and why each failure failed. `compare` puts two
 * runs side by side with `protocol/evals/stats.ts`, the math the edge and the CLI use.
 */
import {
  EvalReport,
  EvalRun,
  EvalRunList,
  type CreateEvalRunRequest,
  type EvalAttempt,
  type EvalSummary,
  type EvalTaskReport,
} from "../../protocol/evals/api.js";
import type { RolloutEvent } from "../../protocol/envs/rollouts.js";
import { compareRuns, type CompareOptions, type RunComparison } from "../../protocol/evals/stats.js";
import type { HttpClient } from "./http.js";
import { followRun, type RunStreamOptions } from "./run-events.js";

export type { CreateEvalRunRequest, EvalAttempt, EvalReport, EvalRun, EvalSummary, EvalTaskReport, RunComparison };

export interface EvalStreamOptions extends RunStreamOptions {
  /** Told the run as soon as the edge made it, before any event: its id is what resumes it. */
  onRun?: (id: string, run: EvalRun) => void;
}

/** Two runs' reports and their comparison (b against a). */
export interface EvalComparison {
  a: EvalReport;
  b: EvalReport;
  comparison: RunComparison;
}

const runPath = (id: string, rest = "") => `/v1/evals/runs/${encodeURIComponent(id)}${rest}`;

/**
 * `sextant.evals`.
 *
 * @example
 * let id = "";
 * for await (const event of sextant.evals.run({ taskset, model, attempts: 5 }, { onRun: (runId) => (id = runId) })) {
 *   if (event.type === "rollout.ended") console.log(event.data.task.index, event.data.reward);
 * }
 * const report = await sextant.evals.get(id);
 * console.log(report.summary.passAt1, report.summary.passAtK.value);
 */
export class Evals {
  constructor(private readonly http: HttpClient) {}

  /**
   * Makes a run and yields its events (its rollout run's: each attempt's start and end, each task's
   * group, the summary), each once. The run is made once, when iteration starts (an answer lost on
   * the way is not asked again: that would make a second run); its events are then followed, and a
   * broken stream reopened from the last event yielded.
   */
  run(body: CreateEvalRunRequest, options: EvalStreamOptions = {}): AsyncIterable<RolloutEvent> {
    const { http } = this;
    return {
      [Symbol.asyncIterator]: async function* () {
        const run = await http.request({
          method: "POST",
          path: "/v1/evals/runs",
          body,
          schema: EvalRun,
          ...(options.signal ? { signal: options.signal } : {}),
        });
        options.onRun?.(run.id, run);
        yield* followRun({ http, eventsPath: (id) => runPath(id, "/events"), id: run.id, after: 0, options });
      },
    };
  }

  /** A run's events after `after` (0: all of them), each once, through its `summary`: how a run is reattached. */
  events(id: string, options: RunStreamOptions & { after?: number } = {}): AsyncIterable<RolloutEvent> {
    return {
      [Symbol.asyncIterator]: () =>
        followRun({
          http: this.http,
          eventsPath: (run) => runPath(run, "/events"),
          id,
          after: options.after ?? 0,
          options,
        }),
    };
  }

  /** The run's report: its settings, every task's attempts so far, broken tasks marked, and the summary. */
  get(id: string, opts: { signal?: AbortSignal } = {}): Promise<EvalReport> {
    return this.http.request({ method: "GET", path: runPath(id), schema: EvalReport, ...opts });
  }

  /** The org's runs, newest first; of one task set when `taskset` is given. */
  async list(q: { taskset?: string; limit?: number; signal?: AbortSignal } = {}): Promise<EvalRun[]> {
    const { runs } = await this.http.request({
      method: "GET",
      path: "/v1/evals/runs",
      query: { taskset: q.taskset, limit: q.limit === undefined ? undefined : String(q.limit) },
      schema: EvalRunList,
      ...(q.signal ? { signal: q.signal } : {}),
    });
    return runs;
  }

  /**
   * Run `b` against run `a` on the tasks both played (matched by archive SHA-256): wins, losses and
   * ties by pass@1, the pass@1 difference (b − a) with a paired bootstrap interval, repeatable by
   * `seed`, and the cost and time per attempt of b over a's.
   */
  async compare(a: string, b: string, opts: CompareOptions & { signal?: AbortSignal } = {}): Promise<EvalComparison> {
    const { signal, ...options } = opts;
    const [reportA, reportB] = await Promise.all([this.get(a, { signal }), this.get(b, { signal })]);
    return { a: reportA, b: reportB, comparison: compareRuns(reportA, reportB, options) };
  }
}
