/**
 * `sextant eval`: run a task set through a model (or its reference solutions, or nothing, to check
 * the set) and report pass@1, pass@k, cost and why each failure failed; show, list and compare runs.
 * A run lives on the edge and carries on if the CLI goes away: `eval run` prints its id first, and
 * `eval run --resume <id>` reattaches to it.
 */
import { Option, type Command } from "commander";
import { CreateEvalRunRequest, type EvalReport } from "../../../protocol/evals/api.js";
import type { RolloutEvent } from "../../../protocol/envs/rollouts.js";
import { failedAttemptLogs } from "../../envs/eval-logs.js";
import type { Sextant } from "../../sdk/client.js";
import { EnvCapture } from "../../sdk/env-capture.js";
import { SextantError } from "../../sdk/errors.js";
import { client, UsageError, type GlobalOptions } from "../context.js";
import {
  comparisonText,
  logsText,
  reportStats,
  runsTable,
  summaryText,
  taskTable,
  validationFailures,
  validationText,
} from "../eval-report.js";
import { printJson } from "../output.js";
import { progress } from "../progress.js";
import { readKeyFile, type KeyFile } from "./env-capture.js";
import { parseTasks } from "./env-rollouts.js";

/** An oracle or noop run that found tasks scoring other than they should: exit code 1, after the report. */
export class ValidationFailedError extends SextantError {
  override name = "ValidationFailedError";
}

interface RunOptions {
  model?: string;
  agent?: "model" | "oracle" | "noop";
  attempts?: string;
  concurrency?: string;
  checkpoint?: string;
  tasks?: string;
  resume?: string;
  key?: string;
  logLines: string;
}

function whole(flag: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d{1,9}$/.test(value.trim())) throw new UsageError(`${flag} takes a whole number, not "${value}".`);
  return Number(value);
}

/** The run's request from `eval run`'s arguments, checked against the edge's own schema before anything is sent. */
export function evalRequest(taskset: string | undefined, opts: RunOptions): CreateEvalRunRequest {
  if (taskset === undefined) throw new UsageError("eval run takes a task set (sextant envs push prints its id).");
  const agent = opts.agent ?? "model";
  if (agent === "model" && opts.model === undefined)
    throw new UsageError("eval run needs --model <model>, or --agent oracle|noop to check the task set.");
  if (agent !== "model" && opts.model !== undefined)
    throw new UsageError(`--agent ${agent} plays without a model: leave out --model.`);
  if (agent !== "model" && opts.checkpoint !== undefined)
    throw new UsageError(`--agent ${agent} plays without a model: leave out --checkpoint.`);
  const request = {
    taskset,
    agent,
    ...(opts.model !== undefined ? { model: opts.model } : {}),
    ...(opts.checkpoint !== undefined ? { checkpoint: opts.checkpoint } : {}),
    ...(opts.tasks !== undefined ? { tasks: parseTasks(opts.tasks) } : {}),
    ...(opts.attempts !== undefined ? { attempts: whole("--attempts", opts.attempts) } : {}),
    ...(opts.concurrency !== undefined ? { concurrency: whole("--concurrency", opts.concurrency) } : {}),
  };
  const parsed = CreateEvalRunRequest.safeParse(request);
  if (!parsed.success) {
    const flag: Record<string, string> = { attempts: "--attempts", concurrency: "--concurrency", tasks: "--tasks" };
    const issues = parsed.error.issues.map((i) => {
      const name = flag[String(i.path[0])] ?? (i.path.length ? i.path.join(".") : "");
      return name ? `${name}: ${i.message}` : i.message;
    });
    throw new UsageError(`eval run: ${issues.join("; ")}.`);
  }
  return request;
}

/** `--resume` reattaches to a run as it was made: it takes none of a new run's settings. */
function checkResume(taskset: string | undefined, opts: RunOptions): void {
  const given = (["model", "agent", "attempts", "concurrency", "checkpoint", "tasks"] as const).filter(
    (k) => opts[k] !== undefined,
  );
  if (taskset !== undefined || given.length > 0)
    throw new UsageError(
      `--resume reattaches to a run with the settings it was made with: leave out ${
        taskset !== undefined ? "the task set" : `--${given[0]}`
      }.`,
    );
}

interface Shown {
  json: boolean;
  key: KeyFile | undefined;
  logLines: number;
}

/** The org's `eval_attempts` rows of the run: one lake hour, the run's creation (every row's time). */
async function attemptRows(sextant: Sextant, report: EvalReport) {
  const capture = new EnvCapture(sextant.http);
  const day = report.createdAt.slice(0, 10);
  const hour = report.createdAt.slice(11, 13);
  return (await capture.rows("eval_attempts", { day, hour, run: report.rolloutRun })).rows;
}

/** The report as a table and summary (or one JSON document); exit 1 when a validation run found wrong tasks. */
async function show(sextant: Sextant, report: EvalReport, shown: Shown): Promise<void> {
  const logs = shown.key ? await failedAttemptLogs(report, await attemptRows(sextant, report), shown.key) : null;
  const validation = validationFailures(report);
  if (shown.json) printJson({ report, stats: reportStats(report), validation, logs });
  else {
    process.stdout.write(taskTable(report) + "\n" + summaryText(report) + validationText(report));
    if (logs) process.stdout.write("\n" + logsText(logs, shown.logLines));
  }
  if (validation?.length)
    throw new ValidationFailedError(
      `${validation.length} task${validation.length === 1 ? "" : "s"} failed validation (${report.agent}).`,
    );
}

/** Follows the run's events to its summary with a bar of ended attempts. */
async function follow(
  sextant: Sextant,
  json: boolean,
  events: (announce: (id: string) => void) => AsyncIterable<RolloutEvent>,
) {
  const bar = progress(!json);
  let id: string | undefined;
  let total: number | undefined;
  let ended = 0;
  const announce = (runId: string) => {
    id = runId;
    if (json) process.stderr.write(`${runId}\n`);
    else process.stdout.write(`Eval run ${runId} (reattach: sextant eval run --resume ${runId})\n`);
  };
  try {
    for await (const event of events(announce)) {
      if (total === undefined && (event.type === "rollout.started" || event.type === "rollout.ended")) {
        const run = await sextant.evals.get(id!);
        total = (await sextant.envs.rollouts.get(run.rolloutRun)).members.length;
      }
      if (event.type === "rollout.ended") bar.update("attempts", ++ended, total);
    }
  } finally {
    bar.stop();
  }
  return id!;
}

export function evalCommands(program: Command): void {
  const evals = program
    .command("eval")
    .description(
      "Evals: play a task set with a model, k attempts a task, and report pass@1, pass@k, cost and failures",
    );

  evals
    .command("run")
    .description("Run every task of a task set k times and print a row per task and the run's summary")
    .argument("[taskset]", "the task set (sextant envs push prints it)")
    .option("--model <model>", "the model or pool that plays (a model the gateway serves)")
    .addOption(
      new Option(
        "--agent <agent>",
        "oracle plays each task's reference solution, noop nothing; both check the set",
      ).choices(["model", "oracle", "noop"]),
    )
    .option("--attempts <k>", "attempts per task, 1 to 100 (default 1): pass@k is for this k")
    .option("--concurrency <n>", "attempts in flight at once (default 8)")
    .option("--checkpoint <label>", "a label of the model's weights, kept with each attempt")
    .option("--tasks <list>", "a comma list of task indexes or archive SHA-256s (default: every task)")
    .option("--resume <id>", "reattach to a run: its progress so far, then the same table")
    .option("--key <file>", "the org's private key (sextant envs keygen): show failed attempts' verifier logs")
    .option("--log-lines <n>", "lines of each failed attempt's log shown with --key", "20")
    .action(async (taskset: string | undefined, opts: RunOptions, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      if (opts.resume !== undefined) checkResume(taskset, opts);
      const request = opts.resume === undefined ? evalRequest(taskset, opts) : undefined;
      const logLines = whole("--log-lines", opts.logLines)!;
      // Read before the run starts, so that a bad key file costs no run.
      const key = opts.key !== undefined ? readKeyFile(opts.key) : undefined;
      const { sextant } = await client(options);
      const json = Boolean(options.json);
      const id = await follow(sextant, json, (announce) => {
        if (request) return sextant.evals.run(request, { onRun: announce });
        const resumed = opts.resume!;
        return {
          async *[Symbol.asyncIterator]() {
            // The run is asked for first, so that an unknown id is "not found" before anything is printed.
            await sextant.evals.get(resumed);
            announce(resumed);
            yield* sextant.evals.events(resumed);
          },
        };
      });
      await show(sextant, await sextant.evals.get(id), { json, key, logLines });
    });

  evals
    .command("show")
    .description("A run's table and summary, so far if it still runs")
    .argument("<id>", "the eval run (eval_…)")
    .option("--key <file>", "the org's private key (sextant envs keygen): show failed attempts' verifier logs")
    .option("--log-lines <n>", "lines of each failed attempt's log shown with --key", "20")
    .action(async (id: string, opts: { key?: string; logLines: string }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const logLines = whole("--log-lines", opts.logLines)!;
      const key = opts.key !== undefined ? readKeyFile(opts.key) : undefined;
      const { sextant } = await client(options);
      await show(sextant, await sextant.evals.get(id), { json: Boolean(options.json), key, logLines });
    });

  evals
    .command("list")
    .description("The org's eval runs, newest first")
    .option("--taskset <id>", "only this task set's runs")
    .option("--limit <n>", "at most this many runs")
    .action(async (opts: { taskset?: string; limit?: string }, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const limit = whole("--limit", opts.limit);
      if (limit === 0) throw new UsageError("--limit takes a whole number of at least 1.");
      const { sextant } = await client(options);
      const runs = await sextant.evals.list({
        ...(opts.taskset !== undefined ? { taskset: opts.taskset } : {}),
        ...(limit !== undefined ? { limit } : {}),
      });
      if (options.json) return printJson({ runs });
      process.stdout.write(runsTable(runs));
    });

  evals
    .command("compare")
    .description(
      "Run b against run a, task by task: wins and losses, the pass@1 difference with a bootstrap CI, cost and time",
    )
    .argument("<a>", "the run compared against (eval_…)")
    .argument("<b>", "the run compared (eval_…)")
    .option("--seed <n>", "the bootstrap's seed: one seed, one interval (default 0)")
    .option("--resamples <n>", "bootstrap resamples (default 10000)")
    .option("--confidence <c>", "the interval's coverage, above 0 and below 1 (default 0.95)")
    .action(async (a: string, b: string, opts: { seed?: string; resamples?: string; confidence?: string }, cmd) => {
      const options = (cmd as Command).optsWithGlobals<GlobalOptions>();
      const seed = whole("--seed", opts.seed);
      const resamples = whole("--resamples", opts.resamples);
      if (resamples === 0) throw new UsageError("--resamples takes a whole number of at least 1.");
      const confidence = opts.confidence === undefined ? undefined : Number(opts.confidence);
      if (confidence !== undefined && !(confidence > 0 && confidence < 1))
        throw new UsageError(`--confidence takes a number above 0 and below 1, not "${opts.confidence}".`);
      const { sextant } = await client(options);
      const compared = await sextant.evals.compare(a, b, {
        ...(seed !== undefined ? { seed } : {}),
        ...(resamples !== undefined ? { resamples } : {}),
        ...(confidence !== undefined ? { confidence } : {}),
      });
      const manifest = ({ tasks: _tasks, ...run }: EvalReport) => run;
      if (options.json)
        return printJson({ a: manifest(compared.a), b: manifest(compared.b), comparison: compared.comparison });
      process.stdout.write(comparisonText(compared.a, compared.b, compared.comparison));
    });
}
