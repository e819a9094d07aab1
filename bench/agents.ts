/**
 * Agent tasks through `npm start` (bubblewrap sandboxes where bubblewrap runs, the simulator's
 * scripted agent model, whose every turn takes the simulated backend's time to first token and its
 * 16 tokens):
 *
 * - start to first command: from `POST …/start` to the moment the task's first command begins in its
 *   sandbox (the command prints the clock), over `starts` tasks;
 * - tool-call round trip: from a call's `tool.call` event to its `tool.result` event, as the task
 *   object records them (sandbox host, sealing and storage included), over a task of `turns` reads;
 * - parallel reads: a turn of four `grep`s over 2,000 files against the slowest of the same four run
 *   one per turn (target: at most 1.3x);
 * - wall time: how long after its deadline a task whose command outlives it ends (target: within 1 s);
 * - flood: tab completions' p95 time to first token alone and with `flood` agent tasks running at
 *   once on the same simulated endpoints in the `background` class (target: at most 1.2x). The two
 *   take turns in rounds (alone then beside agents, then the other way round), so that whatever else
 *   the machine does meanwhile falls on both alike; each turn beside agents starts fresh tasks, is
 *   timed once every one has taken a turn, and ends them all before tab runs alone again.
 *
 *   npx tsx bench/agents.ts     # BENCH_AGENT_STARTS=50 BENCH_AGENT_TURNS=200 BENCH_AGENT_FLOOD=32 BENCH_FLOOD_SECONDS=20 BENCH_FLOOD_ROUNDS=4
 *   BENCH_YIELD=compare npx tsx bench/agents.ts   # the flood alone, background yield off then on (or BENCH_YIELD=off|on)
 *   BENCH_YIELD=on BENCH_YIELD_CONFIG='{"lagMs":1}' npx tsx bench/agents.ts   # the yield's settings for that run
 */
import { pathToFileURL } from "node:url";
import OpenAI from "openai";
import type { AgentScript } from "../gpu-backends/simulator/agent-script.js";
import type { Sextant } from "../client/sdk/client.js";
import { isTerminal, type TaskEvent, type TaskLimits } from "../protocol/agents/task.js";
import { LOCAL_MODELS } from "../scripts/local-gateway.js";
import { setAgentScripts, startAgentStack, taskEnded, taskEvents } from "../test/support/agent-stack.js";
import { processCpuSeconds, savedLocalEdge } from "../test/support/local-edge.js";
import { startAgentProcesses } from "./agent-processes.js";
import { closedLoop, streamCompletion } from "./gateway-fixture.js";
import { fmt, median, quantile, quantileInterval } from "./stats.js";
import type { YieldConfig } from "../workers/gateway/yield.js";

export interface AgentBenchOptions {
  starts?: number;
  turns?: number;
  flood?: number;
  /** Tab's time alone, and again beside the agent tasks, over all rounds. */
  floodSeconds?: number;
  /** Rounds the flood's time is split into, each with a turn alone and a turn beside the agents. */
  floodRounds?: number;
  /**
   * The sandbox host and each simulated backend in a process of its own (`bench/agent-processes.ts`),
   * rather than inside `npm start`'s process; `BENCH_AGENT_PROCESSES=separate`.
   */
  separateProcesses?: boolean;
  /**
   * Settings of the gateway's background yield (`workers/gateway/yield.ts`) over its defaults, `{ lagMs: 0 }`
   * to turn it off. Needs `separateProcesses`: the benchmark then writes the gateway's configuration.
   * `BENCH_YIELD_CONFIG` as JSON; `BENCH_YIELD=compare` runs the flood with it off, then on.
   */
  yieldConfig?: Partial<YieldConfig>;
  /** Only the flood: tab alone, then beside the agent tasks. */
  floodOnly?: boolean;
}

export interface AgentBenchResult {
  driver: string;
  settings: {
    starts: number;
    turns: number;
    flood: number;
    floodSeconds: number;
    floodRounds: number;
    tabClients: number;
  };
  /** The sandbox host and the simulated backends ran in processes of their own. */
  separateProcesses: boolean;
  yieldConfig?: Partial<YieldConfig> | undefined;
  startToCommandMs: number[];
  roundTripMs: number[];
  parallel: { together: number[]; alone: number[][] };
  tab: {
    aloneTtftMs: number[];
    floodedTtftMs: number[];
    aloneErrors: number;
    floodedErrors: number;
    /** The phases in the order they ran, one per round and side. */
    phases: TabPhase[];
    /** Each phase's own figures, in the same order. */
    byPhase: { phase: TabPhase; requests: number; p95: number; edgeCores?: number | undefined }[];
    /** Turns the agent tasks took while tab ran beside them. */
    agentTurns: number;
    /** The edge's workerd process's CPU seconds per second, tab alone and beside the agents; undefined without /proc. */
    edgeCoresAlone?: number | undefined;
    edgeCores?: number | undefined;
  };
  /** How long after its wall-time deadline each task over it had ended. */
  pastDeadlineMs: number[];
}

export type TabPhase = "alone" | "beside agents";

/** Tab's closed-loop clients. */
const TAB_CLIENTS = 8;

const GREPS = ["alpha", "beta", "gamma", "delta"].map((w) => ({ name: "grep", arguments: { pattern: `${w}[0-9]+x` } }));
/** 2,000 files of 200 lines each, made in the sandbox by its first command. */
const MAKE_FILES =
  "mkdir -p data && i=0; while [ $i -lt 2000 ]; do seq 1 200 | sed 's/^/alpha beta gamma delta /' > data/f$i.txt; i=$((i+1)); done";

function scripts(turns: number): AgentScript[] {
  return [
    {
      name: "bench-first-command",
      match: "(agent bench first command)",
      turns: [
        { toolCalls: [{ name: "run_terminal", arguments: { command: "date +%s%N" } }] },
        { toolCalls: [{ name: "finish", arguments: { summary: "done" } }] },
      ],
    },
    {
      name: "bench-round-trip",
      match: "(agent bench round trip)",
      turns: [
        ...Array.from({ length: turns }, () => ({
          toolCalls: [{ name: "read_file", arguments: { path: "README.md" } }],
        })),
        { toolCalls: [{ name: "finish", arguments: { summary: "done" } }] },
      ],
    },
    {
      name: "bench-parallel",
      match: "(agent bench parallel)",
      turns: [
        { toolCalls: [{ name: "run_terminal", arguments: { command: MAKE_FILES, timeoutMs: 300_000 } }] },
        // Each round: the four together, then each alone.
        ...Array.from({ length: 5 }, () => [{ toolCalls: GREPS }, ...GREPS.map((g) => ({ toolCalls: [g] }))]).flat(),
        { toolCalls: [{ name: "finish", arguments: { summary: "done" } }] },
      ],
    },
    {
      name: "bench-sleeper",
      match: "(agent bench sleeper)",
      turns: [{ toolCalls: [{ name: "run_terminal", arguments: { command: "sleep 60", timeoutMs: 120_000 } }] }],
    },
    {
      name: "bench-flood",
      match: "(agent bench flood)",
      turns: Array.from({ length: 400 }, () => ({
        toolCalls: [{ name: "read_file", arguments: { path: "README.md" } }],
      })),
    },
  ];
}

const README = [{ path: "README.md", content: Buffer.from("# Bench\n\nalpha1x beta2x\n").toString("base64") }];
/** Limits no benchmark run reaches. */
const ROOMY = { turns: 500, tokens: 50_000_000, wallSeconds: 3600 };

/** A task with the README, not started. */
async function created(sdk: Sextant, prompt: string, limits: Partial<TaskLimits> = {}): Promise<string> {
  const { id } = await sdk.agents.create({ prompt, limits: { ...ROOMY, ...limits } });
  await sdk.agents.uploadFiles(id, README);
  return id;
}

/** An ended task's events. */
async function endedEvents(sdk: Sextant, id: string): Promise<TaskEvent[]> {
  await taskEnded(sdk, id);
  return taskEvents(sdk, id);
}

/** Milliseconds from each call's `tool.call` event to its `tool.result`. */
function callTimes(events: TaskEvent[]): Map<string, { tool: string; ms: number }> {
  const calls = new Map<string, number>();
  const out = new Map<string, { tool: string; ms: number }>();
  for (const e of events) {
    const id = e.data?.callId as string | undefined;
    if (!id) continue;
    if (e.type === "tool.call") calls.set(id, Date.parse(e.at));
    if (e.type === "tool.result" && calls.has(id))
      out.set(id, { tool: String(e.data!.tool), ms: Date.parse(e.at) - calls.get(id)! });
  }
  return out;
}

export async function runAgentBench(options: AgentBenchOptions = {}): Promise<AgentBenchResult> {
  const starts = options.starts ?? 50;
  const turns = options.turns ?? 200;
  const flood = options.flood ?? 32;
  const floodSeconds = options.floodSeconds ?? 20;
  const floodRounds = options.floodRounds ?? 4;
  if (!(Number.isInteger(floodRounds) && floodRounds >= 1)) throw new RangeError(`floodRounds: ${floodRounds}`);
  const roundMs = (floodSeconds * 1000) / floodRounds;
  const { yieldConfig } = options;
  if (yieldConfig && !options.separateProcesses)
    throw new Error(
      "setting the background yield needs separateProcesses: the benchmark writes the gateway's configuration",
    );
  const processes = options.separateProcesses ? await startAgentProcesses() : undefined;
  if (processes && yieldConfig)
    processes.vars.GATEWAY_CONFIG = JSON.stringify({
      ...JSON.parse(processes.vars.GATEWAY_CONFIG!),
      backgroundYield: yieldConfig,
    });
  const stack = await startAgentStack(processes ? { vars: processes.vars } : {}).catch(async (err: unknown) => {
    await processes?.stop();
    throw err;
  });
  try {
    const driver =
      processes?.driver ?? /Agent tasks run in (\S+) sandboxes/.exec(stack.edge.output())?.[1] ?? "unknown";
    if (processes) await processes.setScripts(scripts(turns));
    else await setAgentScripts(stack.edge, scripts(turns));
    const { sdk } = stack;
    const startNow = async (prompt: string, limits: Partial<TaskLimits> = {}) => {
      const id = await created(sdk, prompt, limits);
      await sdk.agents.start(id);
      return id;
    };

    const startToCommandMs: number[] = [];
    const roundTripMs: number[] = [];
    const together: number[] = [];
    const alone: number[][] = [];
    const pastDeadlineMs: number[] = [];
    if (!options.floodOnly) {
      for (let i = 0; i < starts; i++) {
        const id = await created(sdk, "Go (agent bench first command)");
        const startedAt = Date.now();
        await sdk.agents.start(id);
        const result = (await endedEvents(sdk, id)).find((e) => e.type === "tool.result")!;
        const ns = BigInt(String((result.data!.result as { stdout: string }).stdout).trim());
        startToCommandMs.push(Number(ns / 1000n) / 1000 - startedAt);
      }

      const roundTrip = await endedEvents(sdk, await startNow("Go (agent bench round trip)"));
      roundTripMs.push(...[...callTimes(roundTrip).values()].map((c) => c.ms));

      const parallelEvents = await endedEvents(
        sdk,
        await startNow("Go (agent bench parallel)", { sandboxSeconds: 3600 }),
      );
      const greps = [...callTimes(parallelEvents).values()].filter((c) => c.tool === "grep");
      for (let round = 0; round < 5; round++) {
        const group = greps.slice(round * 8, round * 8 + 8);
        together.push(Math.max(...group.slice(0, 4).map((c) => c.ms)));
        alone.push(group.slice(4).map((c) => c.ms));
      }

      for (let i = 0; i < 3; i++) {
        const task = await taskEnded(
          sdk,
          await startNow("Go (agent bench sleeper)", { wallSeconds: 5, sandboxSeconds: 3600 }),
        );
        pastDeadlineMs.push(Date.parse(task.endedAt!) - (Date.parse(task.startedAt!) + 5000));
      }
    }

    const openai = new OpenAI({
      baseURL: `${stack.edge.baseURL}/v1`,
      apiKey: savedLocalEdge(stack.edge).apiKey,
      maxRetries: 0,
    });
    const tab = async (ms: number) => {
      const ttft: number[] = [];
      let errors = 0;
      const until = Date.now() + ms;
      await closedLoop(
        TAB_CLIENTS,
        () => Date.now() < until,
        async () => {
          const r = await streamCompletion(openai, {
            model: LOCAL_MODELS.tab,
            prompt: "def add(a, b):\n    ",
            max_tokens: 4,
          });
          if (r.error || r.ttftMs === undefined) errors++;
          else ttft.push(r.ttftMs);
        },
      );
      return { ttft, errors };
    };
    // The edge's workerd process's CPU seconds so far; undefined without /proc.
    const workerd = stack.edge.workerdPid();
    const edgeCpu = () => (workerd === undefined ? undefined : processCpuSeconds(workerd));
    const side = () => ({ ttft: [] as number[], errors: 0, cpuSeconds: 0 as number | undefined, ms: 0 });
    const sides: Record<TabPhase, ReturnType<typeof side>> = { alone: side(), "beside agents": side() };
    const byPhase: AgentBenchResult["tab"]["byPhase"] = [];
    const timedTab = async (phase: TabPhase) => {
      const into = sides[phase];
      const cpuBefore = edgeCpu();
      const started = performance.now();
      const t = await tab(roundMs);
      const cpuAfter = edgeCpu();
      const ms = performance.now() - started;
      into.ms += ms;
      into.cpuSeconds =
        into.cpuSeconds === undefined || cpuBefore === undefined || cpuAfter === undefined
          ? undefined
          : into.cpuSeconds + cpuAfter - cpuBefore;
      into.ttft.push(...t.ttft);
      into.errors += t.errors;
      byPhase.push({
        phase,
        requests: t.ttft.length,
        p95: t.ttft.length ? quantile(t.ttft, 0.95) : Number.NaN,
        edgeCores: cpuBefore === undefined || cpuAfter === undefined ? undefined : (cpuAfter - cpuBefore) / (ms / 1000),
      });
    };
    /** The tasks' turns so far, once every one of them has taken its first. */
    const turnsOnceRunning = async (ids: string[]) => {
      const until = Date.now() + 120_000;
      for (;;) {
        const tasks = await Promise.all(ids.map((id) => sdk.agents.get(id)));
        if (tasks.every((t) => t.usage.turns >= 1)) return tasks.reduce((n, t) => n + t.usage.turns, 0);
        if (Date.now() > until) throw new Error("the flood's agent tasks took no turn within 120 s");
        await new Promise((r) => setTimeout(r, 50));
      }
    };
    /**
     * Cancels the tasks; their turns. A task a cancel left running would load the next round's tab
     * alone, so the run stops there rather than measure it.
     */
    const cancelled = async (ids: string[]) => {
      const tasks = await Promise.all(ids.map((id) => sdk.agents.cancel(id)));
      const live = tasks.filter((t) => !isTerminal(t.status));
      if (live.length) throw new Error(`${live.length} of the flood's agent tasks did not end when cancelled`);
      return tasks.reduce((n, t) => n + t.usage.turns, 0);
    };
    const phases: TabPhase[] = [];
    let agentTurns = 0;
    for (let round = 0; round < floodRounds; round++) {
      // Alone first in even rounds, beside agents first in odd ones: a drift favours neither side.
      const order: TabPhase[] = round % 2 === 0 ? ["alone", "beside agents"] : ["beside agents", "alone"];
      for (const phase of order) {
        phases.push(phase);
        if (phase === "alone") {
          await timedTab(phase);
          continue;
        }
        const ids = await Promise.all(Array.from({ length: flood }, () => startNow("Go (agent bench flood)")));
        // Timed once every task runs: otherwise the more rounds, the more of the tasks' starts the
        // timed time would hold.
        const before = await turnsOnceRunning(ids);
        await timedTab(phase);
        agentTurns += (await cancelled(ids)) - before;
      }
    }
    const cores = ({ cpuSeconds, ms }: ReturnType<typeof side>) =>
      cpuSeconds === undefined ? undefined : cpuSeconds / (ms / 1000);
    return {
      driver,
      settings: { starts, turns, flood, floodSeconds, floodRounds, tabClients: TAB_CLIENTS },
      separateProcesses: processes !== undefined,
      yieldConfig,
      startToCommandMs,
      roundTripMs,
      parallel: { together, alone },
      tab: {
        aloneTtftMs: sides.alone.ttft,
        floodedTtftMs: sides["beside agents"].ttft,
        aloneErrors: sides.alone.errors,
        floodedErrors: sides["beside agents"].errors,
        phases,
        byPhase,
        agentTurns,
        edgeCoresAlone: cores(sides.alone),
        edgeCores: cores(sides["beside agents"]),
      },
      pastDeadlineMs,
    };
  } finally {
    await stack.edge.stop();
    await processes?.stop();
  }
}

const interval = (values: number[], q: number) => {
  const { lo, hi } = quantileInterval(values, q);
  return `[${Number.isFinite(lo) ? fmt(lo) : "-"}, ${Number.isFinite(hi) ? fmt(hi) : "-"}]`;
};

export function reportAgentBench(r: AgentBenchResult): string {
  const ratios = r.parallel.together.map((t, i) => t / Math.max(...r.parallel.alone[i]!));
  const p95 = (v: number[]) => quantile(v, 0.95);
  const tabRatio = p95(r.tab.floodedTtftMs) / p95(r.tab.aloneTtftMs);
  const off = r.yieldConfig?.lagMs === 0;
  const yieldSettings = r.yieldConfig && !off ? ` ${JSON.stringify(r.yieldConfig)}` : "";
  const { starts, turns, flood, floodSeconds, floodRounds, tabClients } = r.settings;
  const settings = `  settings: ${r.startToCommandMs.length === 0 ? "" : `${starts} starts, ${turns} read_file turns; `}tab from ${tabClients} closed-loop clients, ${floodSeconds} s alone and ${floodSeconds} s beside ${flood} agent tasks, taking turns in ${floodRounds} round${floodRounds === 1 ? "" : "s"} of ${+(floodSeconds / floodRounds).toFixed(2)} s a side (alone first in even rounds, beside agents first in odd ones; fresh agent tasks each round, timed once each has taken a turn, and ended before the next phase)`;
  const tab = `  tab p95 time to first token, background yield ${off ? "off" : "on"}${yieldSettings}: ${fmt(p95(r.tab.aloneTtftMs))} ms ${interval(r.tab.aloneTtftMs, 0.95)} alone (${r.tab.aloneTtftMs.length} requests), ${fmt(p95(r.tab.floodedTtftMs))} ms ${interval(r.tab.floodedTtftMs, 0.95)} beside agent tasks (${r.tab.floodedTtftMs.length} requests, ${r.tab.agentTurns} agent turns): ${tabRatio.toFixed(2)}x (target <= 1.2x); tab errors: ${r.tab.aloneErrors} alone, ${r.tab.floodedErrors} beside agents${r.tab.edgeCores === undefined || r.tab.edgeCoresAlone === undefined ? "" : `; the edge's workerd used ${r.tab.edgeCoresAlone.toFixed(2)} cores alone, ${r.tab.edgeCores.toFixed(2)} beside agents`}`;
  const title = `Agent tasks (${r.driver} sandboxes, the simulator's scripted model${r.separateProcesses ? "; the sandbox host and each simulated backend in a process of its own" : ""}):`;
  if (r.startToCommandMs.length === 0) return [title, settings, tab].join("\n");
  return [
    title,
    settings,
    `  start to first command: p50 ${fmt(median(r.startToCommandMs))} ms ${interval(r.startToCommandMs, 0.5)}, p95 ${fmt(p95(r.startToCommandMs))} ms over ${r.startToCommandMs.length} tasks (goal: p50 <= 1000 ms)`,
    `  tool-call round trip (read_file): p50 ${fmt(median(r.roundTripMs))} ms ${interval(r.roundTripMs, 0.5)}, p99 ${fmt(quantile(r.roundTripMs, 0.99))} ms ${interval(r.roundTripMs, 0.99)} over ${r.roundTripMs.length} calls`,
    `  four greps in one turn vs the slowest alone: ${ratios.map((x) => `${x.toFixed(2)}x`).join(", ")} (median ${median(ratios).toFixed(2)}x; target <= 1.3x); together ${r.parallel.together.map(fmt).join(", ")} ms, the slowest alone ${r.parallel.alone.map((a) => fmt(Math.max(...a))).join(", ")} ms`,
    `  a task over its wall time ended ${r.pastDeadlineMs.map(fmt).join(", ")} ms after its deadline (target: within 1000 ms)`,
    tab,
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const env = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
  const options: AgentBenchOptions = {
    starts: env("BENCH_AGENT_STARTS"),
    turns: env("BENCH_AGENT_TURNS"),
    flood: env("BENCH_AGENT_FLOOD"),
    floodSeconds: env("BENCH_FLOOD_SECONDS"),
    floodRounds: env("BENCH_FLOOD_ROUNDS"),
    separateProcesses: process.env.BENCH_AGENT_PROCESSES === "separate",
    yieldConfig: process.env.BENCH_YIELD_CONFIG ? JSON.parse(process.env.BENCH_YIELD_CONFIG) : undefined,
  };
  const flood = { ...options, separateProcesses: true, floodOnly: true };
  const mode = process.env.BENCH_YIELD;
  // The flood alone with the gateway's background yield off, on, or off then on in one run.
  if (mode === "off" || mode === "compare")
    console.log(reportAgentBench(await runAgentBench({ ...flood, yieldConfig: { lagMs: 0 } })));
  if (mode === "on" || mode === "compare") console.log(reportAgentBench(await runAgentBench(flood)));
  if (!mode) console.log(reportAgentBench(await runAgentBench(options)));
}
