/**
 * `sextant envs rollouts`: starts a rollout run (a policy plays task-set tasks in groups), shows its
 * progress, prints each group's rewards and advantages as the group ends, and the run's summary.
 */
import type { Command } from "commander";
import type { CreateRolloutsRequest, GroupEnded, RunSummary } from "../../../protocol/envs/rollouts.js";
import { client, UsageError, type GlobalOptions } from "../context.js";
import { printJson } from "../output.js";
import { progress } from "../progress.js";

interface RolloutOptions {
  taskset: string;
  model: string;
  groupSize: string;
  tasks?: string;
  temperature?: string;
  topP?: string;
  maxTokens?: string;
  seed?: string;
  checkpoint?: string;
  concurrency?: string;
}

function number(flag: string, value: string | undefined, whole: boolean): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || (whole && !Number.isSafeInteger(n)))
    throw new UsageError(`${flag} takes ${whole ? "a whole number" : "a number"}, not "${value}".`);
  return n;
}

/** `--tasks 0,1,<sha256>` as the request's task list. */
export function parseTasks(value: string): (number | string)[] {
  const items = value.split(",").map((t) => t.trim());
  return items.map((t) => {
    if (/^\d{1,9}$/.test(t)) return Number(t);
    if (/^[0-9a-f]{64}$/.test(t)) return t;
    throw new UsageError(`--tasks takes a comma list of task indexes or archive SHA-256s, not "${t}".`);
  });
}

export function rolloutRequest(opts: RolloutOptions): CreateRolloutsRequest {
  const groupSize = number("--group-size", opts.groupSize, true)!;
  const sampling = {
    ...(opts.temperature !== undefined ? { temperature: number("--temperature", opts.temperature, false) } : {}),
    ...(opts.topP !== undefined ? { top_p: number("--top-p", opts.topP, false) } : {}),
    ...(opts.maxTokens !== undefined ? { max_tokens: number("--max-tokens", opts.maxTokens, true) } : {}),
    ...(opts.seed !== undefined ? { seed: number("--seed", opts.seed, true) } : {}),
  };
  return {
    taskset: opts.taskset,
    policy: { model: opts.model, ...(opts.checkpoint ? { checkpoint: opts.checkpoint } : {}) },
    group_size: groupSize,
    ...(opts.tasks !== undefined ? { tasks: parseTasks(opts.tasks) } : {}),
    sampling,
    ...(opts.concurrency !== undefined ? { concurrency: number("--concurrency", opts.concurrency, true) } : {}),
  };
}

const signed = (a: number | null) => (a === null ? "-" : `${a >= 0 ? "+" : ""}${a.toFixed(2)}`);

export const groupLine = (g: GroupEnded) =>
  `task ${g.task.index} (${g.task.sha256.slice(0, 12)}): rewards ${g.rewards.map((r) => (r === null ? "-" : String(r))).join(" ")}` +
  `  advantages ${g.advantages.map(signed).join(" ")}`;

export function summaryLines(id: string, s: RunSummary): string[] {
  const outcomes = Object.entries(s.outcomes)
    .map(([k, n]) => `${k} ${n}`)
    .join(", ");
  return [
    `Run ${id}: ${s.rollouts} rollouts over ${s.groups} tasks, ${s.verified} verified`,
    `Mean reward ${s.meanReward === null ? "-" : s.meanReward.toFixed(3)}, solved ${s.solved}/${s.verified}`,
    `Outcomes: ${outcomes || "none"}; ${s.turns} turns, ${s.tokens} tokens` +
      (s.durationMs === null ? "" : ` in ${(s.durationMs / 1000).toFixed(1)} s`),
  ];
}

/** Adds `rollouts` to the `envs` command group (made here if no other command made it first). */
export function envRollouts(program: Command): void {
  const envs =
    program.commands.find((c) => c.name() === "envs") ??
    program.command("envs").description("Environments: task sets, sessions and rollouts for training");
  envs
    .command("rollouts")
    .description("Play tasks of a task set in groups with a model, verify each play, and print rewards and advantages")
    .requiredOption("--taskset <id>", "the task set (sextant envs push prints it)")
    .requiredOption("--model <model>", "the policy: a model or pool the gateway serves")
    .requiredOption("--group-size <n>", "plays of each task")
    .option("--tasks <list>", "a comma list of task indexes or archive SHA-256s (default: every task)")
    .option("--temperature <t>", "sampling temperature")
    .option("--top-p <p>", "nucleus sampling")
    .option("--max-tokens <n>", "completion tokens per model call")
    .option("--seed <n>", "member i of a group is sampled with seed + i")
    .option("--checkpoint <label>", "a label of the policy's weights, kept with each rollout")
    .option("--concurrency <n>", "plays in flight at once (default 32)")
    .action(async (opts: RolloutOptions, cmd: Command) => {
      const options = cmd.optsWithGlobals<GlobalOptions>();
      const request = rolloutRequest(opts);
      const { sextant } = await client(options);
      const rollouts = sextant.envs.rollouts;
      const bar = progress(!options.json);
      let id = "";
      let total: number | undefined;
      let ended = 0;
      const groups: GroupEnded[] = [];
      let summary: RunSummary | undefined;
      try {
        for await (const event of rollouts.run(request, { onRun: (runId) => (id = runId) })) {
          if (event.type === "rollout.started" && total === undefined) total = (await rollouts.get(id)).members.length;
          if (event.type === "rollout.ended") bar.update("rollouts", ++ended, total);
          if (event.type === "group.ended") {
            groups.push(event.data);
            if (!options.json) {
              bar.stop();
              process.stdout.write(groupLine(event.data) + "\n");
            }
          }
          if (event.type === "summary") summary = event.data;
        }
      } finally {
        bar.stop();
      }
      if (options.json) return printJson({ id, groups, summary });
      process.stdout.write(summaryLines(id, summary!).join("\n") + "\n");
    });
}
