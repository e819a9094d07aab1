/**
 * Environments through `npm start` (the sandbox host and each simulated backend in a process of
 * their own, bubblewrap sandboxes where bubblewrap runs), on the repository's Harbor task set
 * (test/fixtures/env-tasks, 25 tasks) and its scripted policy (scripts.json on the simulator's
 * scripted agent model):
 *
 * - session start to first step: from `POST /v1/envs/sessions` to the answer of step 1 (one
 *   read_file), against the bare floor: the same task's sandbox made straight on the host
 *   (`POST /v1/sandboxes` with the archive) and the same call sent to it; one of each per task in
 *   turn, which goes first alternating;
 * - step overhead: one tool call as a session's step through the edge against the same call sent
 *   straight to the session's sandbox (`POST /v1/sandboxes/{id}/calls/{callId}`), pair by pair,
 *   which goes first alternating, for read_file and for run_terminal `true`;
 * - rollouts a minute: `POST /v1/envs/rollouts` over the tasks, a group of `group` each, `concurrency`
 *   members at once, from the request to the summary;
 * - tab beside rollouts: tab completions' p95 time to first token alone and while a rollout run has
 *   `concurrency` members in flight (the `background` class), in rounds that take turns (alone first
 *   in even rounds, beside rollouts first in odd ones). Each turn beside rollouts starts a run, times
 *   tab once the run has all its slots busy, stops timing when its tail leaves slots empty or the
 *   turn's time is up, and lets the run end before tab runs alone again.
 *
 *   npx tsx bench/envs.ts   # BENCH_ENV_STARTS=30 BENCH_ENV_STEPS=200 BENCH_ENV_RUNS=2 BENCH_ENV_GROUP=4 BENCH_ENV_CONCURRENCY=32 BENCH_FLOOD_SECONDS=20 BENCH_FLOOD_ROUNDS=4
 */
import { pathToFileURL } from "node:url";
import OpenAI from "openai";
import { LOCAL_MODELS } from "../scripts/local-gateway.js";
import { savedLocalEdge } from "../test/support/local-edge.js";
import { expectStatus, rolloutRun, startEnvStack, type EnvStack, type RunOutcome } from "./env-fixture.js";
import { closedLoop, streamCompletion } from "./gateway-fixture.js";
import { fmt, median, quantile, quantileInterval } from "./stats.js";

export interface EnvBenchOptions {
  /** Sessions started (and bare sandboxes made), one of each per task in turn. */
  starts?: number;
  /** Steps (and bare calls) per tool. */
  steps?: number;
  /** Tasks of the set the rollout runs play (the first ones, by name). */
  tasks?: number;
  group?: number;
  concurrency?: number;
  /** Timed rollout runs, tab not running. */
  runs?: number;
  /** Tab's time alone, and again beside rollouts, over all rounds. */
  floodSeconds?: number;
  floodRounds?: number;
}

export type TabPhase = "alone" | "beside rollouts";

export interface EnvBenchResult {
  driver: string;
  settings: Required<EnvBenchOptions> & { tabClients: number };
  start: { sessionMs: number[]; bareMs: number[] };
  step: Record<StepTool, { edgeMs: number[]; bareMs: number[] }>;
  /** The timed runs, and each of their rollouts' time from its start to its end. */
  rollouts: { runs: RunOutcome[]; rolloutMs: number[] };
  tab: {
    aloneTtftMs: number[];
    besideTtftMs: number[];
    aloneErrors: number;
    besideErrors: number;
    phases: TabPhase[];
    /** Seconds tab was timed beside rollouts, over all rounds. */
    besideSeconds: number;
    /** The flood's runs, each started for a turn beside rollouts. */
    floodRuns: RunOutcome[];
  };
}

type StepTool = "read_file" | "run_terminal";
const STEP_TOOLS: StepTool[] = ["read_file", "run_terminal"];
const TAB_CLIENTS = 8;
const args = (tool: StepTool, file: string) => (tool === "read_file" ? { path: file } : { command: "true" });
const toolCall = (id: string, name: string, a: unknown) => ({
  id,
  type: "function" as const,
  function: { name, arguments: JSON.stringify(a) },
});

async function elapsed(fn: () => Promise<void>): Promise<number> {
  const started = performance.now();
  await fn();
  return performance.now() - started;
}

/** A session on task `index`, created and stepped once (read_file); ms from the create to the step's answer. */
async function sessionToFirstStep(env: EnvStack, index: number): Promise<number> {
  const task = env.tasks[index]!;
  let id = "";
  const ms = await elapsed(async () => {
    const created = await env.edge("POST", "/v1/envs/sessions", { taskset: env.taskset, task: task.index });
    expectStatus(created, 201, "creating a session");
    id = created.json.id;
    const step = await env.edge("POST", `/v1/envs/sessions/${id}/step`, {
      index: 1,
      tool_calls: [toolCall("c1", "read_file", { path: task.file })],
    });
    expectStatus(step, 200, "a session's first step");
  });
  expectStatus(await env.edge("DELETE", `/v1/envs/sessions/${id}`), 204, "deleting a session");
  return ms;
}

/** The same, straight on the host: a sandbox from the task's archive and the same read_file. */
async function bareToFirstCall(env: EnvStack, index: number): Promise<number> {
  const task = env.tasks[index]!;
  const id = `bench-${crypto.randomUUID()}`;
  const ms = await elapsed(async () => {
    expectStatus(
      await env.host("POST", "/v1/sandboxes", { id, task: { archive: task.sha256 } }),
      201,
      "creating a sandbox",
    );
    expectStatus(
      await env.host("POST", `/v1/sandboxes/${id}/calls/c1`, { tool: "read_file", args: { path: task.file } }),
      200,
      "a bare call",
    );
  });
  const deleted = await env.host("DELETE", `/v1/sandboxes/${id}`);
  if (deleted.status !== 204 && deleted.status !== 200) expectStatus(deleted, 204, "deleting a sandbox");
  return ms;
}

async function measureStarts(env: EnvStack, starts: number): Promise<EnvBenchResult["start"]> {
  // One of each untimed first: the host's and the edge's first requests pay for loading code.
  await sessionToFirstStep(env, 0);
  await bareToFirstCall(env, 0);
  const sessionMs: number[] = [];
  const bareMs: number[] = [];
  for (let i = 0; i < starts; i++) {
    const index = i % env.tasks.length;
    const pair = [
      async () => sessionMs.push(await sessionToFirstStep(env, index)),
      async () => bareMs.push(await bareToFirstCall(env, index)),
    ];
    for (const run of i % 2 === 0 ? pair : pair.reverse()) await run();
  }
  return { sessionMs, bareMs };
}

async function measureSteps(env: EnvStack, steps: number): Promise<EnvBenchResult["step"]> {
  const task = env.tasks[0]!;
  const out = {} as EnvBenchResult["step"];
  for (const tool of STEP_TOOLS) {
    const created = await env.edge("POST", "/v1/envs/sessions", {
      taskset: env.taskset,
      task: task.index,
      limits: { turns: steps + 2, wallSeconds: 86_400, idleSeconds: 3600 },
    });
    expectStatus(created, 201, "creating a session");
    const id: string = created.json.id;
    const edgeMs: number[] = [];
    const bareMs: number[] = [];
    // Step 1 and a bare call untimed: the session's first step and the host's first call of the tool.
    const step = async (index: number) =>
      elapsed(async () => {
        const r = await env.edge("POST", `/v1/envs/sessions/${id}/step`, {
          index,
          tool_calls: [toolCall(`c${index}`, tool, args(tool, task.file))],
        });
        expectStatus(r, 200, `step ${index}`);
        if (r.json.done) throw new Error(`the session ended at step ${index}: ${r.json.reason}`);
      });
    const bare = async (index: number) =>
      elapsed(async () => {
        const r = await env.host("POST", `/v1/sandboxes/${id}/calls/bare-${index}`, {
          tool,
          args: args(tool, task.file),
        });
        expectStatus(r, 200, "a bare call");
      });
    await step(1);
    await bare(1);
    for (let i = 2; i < steps + 2; i++) {
      if (i % 2 === 0) {
        edgeMs.push(await step(i));
        bareMs.push(await bare(i));
      } else {
        bareMs.push(await bare(i));
        edgeMs.push(await step(i));
      }
    }
    expectStatus(await env.edge("DELETE", `/v1/envs/sessions/${id}`), 204, "deleting a session");
    out[tool] = { edgeMs, bareMs };
  }
  return out;
}

export async function runEnvBench(options: EnvBenchOptions = {}): Promise<EnvBenchResult> {
  const settings = {
    starts: options.starts ?? 30,
    steps: options.steps ?? 200,
    tasks: options.tasks ?? 25,
    group: options.group ?? 4,
    concurrency: options.concurrency ?? 32,
    runs: options.runs ?? 2,
    floodSeconds: options.floodSeconds ?? 20,
    floodRounds: options.floodRounds ?? 4,
    tabClients: TAB_CLIENTS,
  };
  const { floodRounds } = settings;
  if (!(Number.isInteger(floodRounds) && floodRounds >= 1)) throw new RangeError(`floodRounds: ${floodRounds}`);
  if (settings.steps + 2 > 500) throw new RangeError("steps: at most 498 (a session's turns are at most 500)");
  const env = await startEnvStack(settings.tasks);
  // The set has as many tasks as the fixture holds, however many were asked for.
  settings.tasks = env.tasks.length;
  try {
    const start = await measureStarts(env, settings.starts);
    const step = await measureSteps(env, settings.steps);

    const run = (onEvent?: Parameters<typeof rolloutRun>[2]) =>
      rolloutRun(
        env,
        {
          policy: { model: LOCAL_MODELS.chat },
          group_size: settings.group,
          sampling: { seed: 0 },
          concurrency: settings.concurrency,
        },
        onEvent,
      );
    const runs: RunOutcome[] = [];
    const rolloutMs: number[] = [];
    for (let i = 0; i < settings.runs; i++)
      runs.push(
        await run((e) => {
          if (e.type === "rollout.ended" && e.data.durationMs !== null) rolloutMs.push(e.data.durationMs);
        }),
      );

    const openai = new OpenAI({
      baseURL: `${env.stack.edge.baseURL}/v1`,
      apiKey: savedLocalEdge(env.stack.edge).apiKey,
      maxRetries: 0,
    });
    const tab = async (more: () => boolean, into: number[]) => {
      let errors = 0;
      await closedLoop(TAB_CLIENTS, more, async () => {
        const r = await streamCompletion(openai, {
          model: LOCAL_MODELS.tab,
          prompt: "def add(a, b):\n    ",
          max_tokens: 4,
        });
        if (r.error || r.ttftMs === undefined) errors++;
        else into.push(r.ttftMs);
      });
      return errors;
    };
    const roundMs = (settings.floodSeconds * 1000) / floodRounds;
    const result: EnvBenchResult["tab"] = {
      aloneTtftMs: [],
      besideTtftMs: [],
      aloneErrors: 0,
      besideErrors: 0,
      phases: [],
      besideSeconds: 0,
      floodRuns: [],
    };
    const beside = async () => {
      // Members started and in flight, from the run's own events.
      let startedMembers = 0;
      let inFlight = 0;
      let full: () => void;
      const filled = new Promise<void>((resolve) => (full = resolve));
      const total = env.tasks.length * settings.group;
      const slots = Math.min(settings.concurrency, total);
      let ended = false;
      const flood = run((e) => {
        if (e.type === "rollout.started") {
          startedMembers++;
          inFlight++;
        }
        if (e.type === "rollout.ended") inFlight--;
        if (inFlight >= slots) full();
      }).finally(() => {
        ended = true;
        full();
      });
      await filled;
      if (!ended) {
        const until = performance.now() + roundMs;
        const started = performance.now();
        // Between one member's end and the next one's start a slot is empty for a moment; the run's
        // tail begins only once every member has started.
        const busy = () => startedMembers < total || inFlight >= slots;
        result.besideErrors += await tab(() => !ended && busy() && performance.now() < until, result.besideTtftMs);
        result.besideSeconds += (performance.now() - started) / 1000;
      }
      result.floodRuns.push(await flood);
    };
    // Untimed: the gateway's first tab requests pay for its cold start.
    const warm = performance.now() + 1000;
    await tab(() => performance.now() < warm, []);
    for (let round = 0; round < floodRounds; round++) {
      const order: TabPhase[] = round % 2 === 0 ? ["alone", "beside rollouts"] : ["beside rollouts", "alone"];
      for (const phase of order) {
        result.phases.push(phase);
        if (phase === "beside rollouts") await beside();
        else {
          const until = performance.now() + roundMs;
          result.aloneErrors += await tab(() => performance.now() < until, result.aloneTtftMs);
        }
      }
    }
    return { driver: env.driver, settings, start, step, rollouts: { runs, rolloutMs }, tab: result };
  } finally {
    await env.stop();
  }
}

const interval = (values: number[], q: number) => {
  const { lo, hi } = quantileInterval(values, q);
  return `[${Number.isFinite(lo) ? fmt(lo) : "-"}, ${Number.isFinite(hi) ? fmt(hi) : "-"}]`;
};
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
/** A ratio of two quantiles and the bounds their intervals allow (each at 95%). */
function ratioInterval(num: number[], den: number[], q: number): string {
  const n = quantileInterval(num, q);
  const d = quantileInterval(den, q);
  const bound = (x: number) => (Number.isFinite(x) && x > 0 ? x.toFixed(2) : "-");
  return `${ratio(quantile(num, q), quantile(den, q))} [${bound(n.lo / d.hi)}, ${bound(n.hi / d.lo)}]`;
}
const perMinute = (r: RunOutcome) => r.summary.rollouts / (r.ms / 60_000);

export function reportEnvBench(r: EnvBenchResult): string {
  const s = r.settings;
  const lines = [
    `Environments (${r.driver} sandboxes, the sandbox host and each simulated backend in a process of its own; the fixture task set's first ${s.tasks} tasks, the simulator's scripted policy):`,
    `  settings: ${s.starts} session starts and ${s.starts} bare sandboxes (one of each per task in turn, which first alternating); ${s.steps} steps and ${s.steps} bare calls per tool, pair by pair; ${s.runs} rollout run${s.runs === 1 ? "" : "s"} of ${s.tasks} tasks x group ${s.group} at concurrency ${s.concurrency}; tab from ${s.tabClients} closed-loop clients, ${s.floodSeconds} s alone in ${s.floodRounds} round${s.floodRounds === 1 ? "" : "s"} and up to as long beside a rollout run each round (alone first in even rounds, beside rollouts first in odd ones; timed while the run has all ${Math.min(s.concurrency, s.tasks * s.group)} slots busy)`,
  ];
  const { sessionMs, bareMs } = r.start;
  lines.push(
    `  session start to first step: p50 ${fmt(median(sessionMs))} ms ${interval(sessionMs, 0.5)} over ${sessionMs.length} sessions; bare sandbox from the archive to its first call p50 ${fmt(median(bareMs))} ms ${interval(bareMs, 0.5)} over ${bareMs.length}; ${ratioInterval(sessionMs, bareMs, 0.5)} the bare floor`,
  );
  for (const tool of STEP_TOOLS) {
    const { edgeMs, bareMs: b } = r.step[tool];
    const what = tool === "read_file" ? "read_file" : "run_terminal `true`";
    lines.push(
      `  step overhead, ${what}: step p50 ${fmt(median(edgeMs))} ms ${interval(edgeMs, 0.5)}, p99 ${fmt(quantile(edgeMs, 0.99))} ms ${interval(edgeMs, 0.99)}; bare call p50 ${fmt(median(b))} ms ${interval(b, 0.5)}, p99 ${fmt(quantile(b, 0.99))} ms ${interval(b, 0.99)} (${edgeMs.length} of each); overhead p50 ${fmt(median(edgeMs) - median(b))} ms (${ratioInterval(edgeMs, b, 0.5)}), p99 ${fmt(quantile(edgeMs, 0.99) - quantile(b, 0.99))} ms (${ratioInterval(edgeMs, b, 0.99)})`,
    );
  }
  const rates = r.rollouts.runs.map(perMinute);
  const run = (x: RunOutcome) =>
    `${x.summary.rollouts} in ${(x.ms / 1000).toFixed(1)} s (${perMinute(x).toFixed(1)}/min, mean reward ${x.summary.meanReward?.toFixed(2) ?? "-"}, ${x.summary.turns} turns, outcomes ${JSON.stringify(x.summary.outcomes)})`;
  lines.push(
    `  rollouts a minute at concurrency ${s.concurrency}: ${rates.map((x) => x.toFixed(1)).join(", ")}${rates.length >= 3 ? ` (median ${median(rates).toFixed(1)})` : ""} over ${rates.length} run${rates.length === 1 ? "" : "s"}: ${r.rollouts.runs.map(run).join("; ")}; a rollout's own time p50 ${(median(r.rollouts.rolloutMs) / 1000).toFixed(1)} s, p95 ${(quantile(r.rollouts.rolloutMs, 0.95) / 1000).toFixed(1)} s over ${r.rollouts.rolloutMs.length}`,
  );
  const t = r.tab;
  const p95 = (v: number[]) => (v.length ? fmt(quantile(v, 0.95)) : "-");
  lines.push(
    `  tab p95 time to first token: ${p95(t.aloneTtftMs)} ms ${interval(t.aloneTtftMs, 0.95)} alone (${t.aloneTtftMs.length} requests), ${p95(t.besideTtftMs)} ms ${interval(t.besideTtftMs, 0.95)} beside rollouts (${t.besideTtftMs.length} requests over ${t.besideSeconds.toFixed(1)} s): ${t.besideTtftMs.length && t.aloneTtftMs.length ? ratioInterval(t.besideTtftMs, t.aloneTtftMs, 0.95) : "-"} (target <= 1.2x); tab errors: ${t.aloneErrors} alone, ${t.besideErrors} beside rollouts; the flood's runs: ${t.floodRuns.map((x) => `${perMinute(x).toFixed(1)}/min`).join(", ")}`,
  );
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const env = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
  const result = await runEnvBench({
    starts: env("BENCH_ENV_STARTS"),
    steps: env("BENCH_ENV_STEPS"),
    tasks: env("BENCH_ENV_TASKS"),
    group: env("BENCH_ENV_GROUP"),
    concurrency: env("BENCH_ENV_CONCURRENCY"),
    runs: env("BENCH_ENV_RUNS"),
    floodSeconds: env("BENCH_FLOOD_SECONDS"),
    floodRounds: env("BENCH_FLOOD_ROUNDS"),
  });
  console.log(reportEnvBench(result));
}
