/**
 * Making and streaming rollout runs, for the two APIs that make them: rollout runs themselves
 * (`/v1/envs/rollouts`) and eval runs (`/v1/evals/runs`), which are rollout runs with a manifest.
 * Both check a request the same way (the org's task set and tasks, a sandbox host, a model the
 * gateway serves unless no model plays), make the run's `EnvRun` object from the same settings and
 * stream its events as the same server-sent events, resumable with `Last-Event-ID`.
 */
import { and, eq } from "drizzle-orm";
import type { Context } from "hono";
import { stream } from "hono/streaming";
import { z } from "zod";
import { AGENT_PLAN_LIMITS, type TaskLimits } from "../../protocol/agents/task.js";
import type { Policy, RolloutAgent, RolloutEvent, RunTask, Sampling } from "../../protocol/envs/rollouts.js";
import { newId } from "../../protocol/ids.js";
import type { CreateRun, RunResult } from "../../durable-objects/env-run/env-run.js";
import { sandboxHost } from "../../durable-objects/agent-task/sandbox-client.js";
import { AgentLimitsSetting } from "../agents/quota.js";
import type { AppEnv } from "../app-env.js";
import { ConfigError } from "../config.js";
import { database } from "../db/client.js";
import { taskSets } from "../db/schema.js";
import type { ResolvedPool } from "../gateway/config.js";
import { gatewayRuntime } from "../gateway/runtime.js";
import { ApiError } from "../problem.js";

/** Seconds between SSE comments while a run is quiet, so proxies keep the stream open. */
const KEEPALIVE_MS = 15_000;
export const RUN_ID = /^run_[0-9a-z]{20}$/;

const RunSettings = z.object({
  AGENT_LIMITS: AgentLimitsSetting,
});

export const runStubOf = (c: Context<AppEnv>, id: string) => c.env.ENV_RUN.get(c.env.ENV_RUN.idFromName(id));
type RunStub = ReturnType<typeof runStubOf>;

/** The run's tasks as the request names them (by index or archive hash), in the request's order. */
async function runTasks(c: Context<AppEnv>, tasksetId: string, wanted: (number | string)[] | undefined) {
  const [row] = await database(c.env.DB)
    .select({ id: taskSets.id, manifest: taskSets.manifest })
    .from(taskSets)
    .where(and(eq(taskSets.id, tasksetId), eq(taskSets.orgId, c.get("principal").org.id)))
    .limit(1);
  if (!row) throw new ApiError("not_found", `No task set \`${tasksetId}\` in your org.`);
  const manifest = JSON.parse(row.manifest) as { sha256: string; url?: string }[];
  const tasks: RunTask[] = [];
  const archiveUrls: (string | null)[] = [];
  const missing: string[] = [];
  for (const ref of wanted ?? manifest.map((_, i) => i)) {
    const index = typeof ref === "number" ? ref : manifest.findIndex((t) => t.sha256 === ref);
    const task = manifest[index];
    if (task) {
      tasks.push({ index, sha256: task.sha256 });
      archiveUrls.push(task.url ?? null);
    } else missing.push(JSON.stringify(ref));
  }
  if (missing.length)
    throw new ApiError("not_found", `Task set \`${tasksetId}\` has no task ${missing.slice(0, 5).join(", ")}.`);
  return { tasks, archiveUrls };
}

/** A run as a request asks for it. */
export interface RunRequest {
  taskset: string;
  tasks?: (number | string)[];
  agent: RolloutAgent;
  /** The model that plays when `agent` is `model`; otherwise a label kept with the run. */
  policy: Policy;
  groupSize: number;
  sampling: Sampling;
  limits: Partial<TaskLimits>;
  concurrency: number;
}

/**
 * A run checked and ready to make: its settings, and the gateway pool that serves its model (null
 * when no model plays). Every refusal (another org's or a missing task set or task, no sandbox host,
 * a model the gateway does not serve) comes before anything is made.
 */
export async function prepareRun(
  c: Context<AppEnv>,
  request: RunRequest,
): Promise<{ run: CreateRun; pool: ResolvedPool | null }> {
  const settings = RunSettings.safeParse(c.env);
  if (!settings.success)
    throw new ConfigError(`Invalid agent settings: ${settings.error.issues.map((i) => i.message).join("; ")}`);
  const { tasks, archiveUrls } = await runTasks(c, request.taskset, request.tasks);
  const host = sandboxHost(c.env, "rollouts");
  if (typeof host === "string") throw new ApiError("unavailable", host);
  let pool: ResolvedPool | null = null;
  // A model the gateway does not serve would fail every member's first turn. A run played without a
  // model (oracle, noop) asks the gateway nothing: its policy is a label.
  if (request.agent === "model") {
    pool = gatewayRuntime(c.env)?.gateway.poolFor("chat", request.policy.model) ?? null;
    if (!pool)
      throw new ApiError(
        "not_found",
        `No model named ${request.policy.model} is served here; GET /v1/models lists them.`,
      );
  }
  const { org, user, key } = c.get("principal");
  // A run's id has a task id's form, so its members' ids (`<run>-<n>`) are valid sandbox ids.
  const id = `run_${newId("task").slice("task_".length)}`;
  return {
    run: {
      id,
      orgId: org.id,
      userId: user.id,
      keyId: key.id,
      taskset: request.taskset,
      tasks,
      archiveUrls,
      policy: request.policy,
      agent: request.agent,
      groupSize: request.groupSize,
      sampling: request.sampling,
      limits: request.limits,
      concurrency: request.concurrency,
      orgLimits: settings.data.AGENT_LIMITS?.[org.plan] ?? AGENT_PLAN_LIMITS[org.plan],
    },
    pool,
  };
}

/** An object's answer, or the 404 of a run that is missing or another org's. */
export function settled<T>(result: RunResult<T>, what: string): T {
  if (result.ok) return result.value;
  throw new ApiError("not_found", `No ${what} in your org.`);
}

/** Where an event stream resumes: `Last-Event-ID` (what EventSource sends on reconnect), else `?after=`. */
export function resumeAfter(c: Context<AppEnv>): number {
  const raw = c.req.header("Last-Event-ID") ?? c.req.query("after") ?? "0";
  const after = Number(raw);
  if (!/^\d{1,15}$/.test(raw.trim()) || !Number.isSafeInteger(after))
    throw new ApiError("invalid_request", "`Last-Event-ID` (or `after`) must be an event id: a whole number.");
  return after;
}

type Page = { events: RolloutEvent[]; ended: boolean };

/**
 * The run's events after `after` as SSE, until its summary (or the client leaves). A missing run
 * fails before the stream starts, as a problem document naming `what`.
 */
export async function eventStream(c: Context<AppEnv>, stub: RunStub, after: number, what: string) {
  const orgId = c.get("principal").org.id;
  const first = settled((await stub.events(orgId, after)) as RunResult<Page>, what);
  c.header("Content-Type", "text/event-stream; charset=utf-8");
  c.header("Cache-Control", "no-cache, no-transform");
  c.header("X-Accel-Buffering", "no");
  return stream(c, async (out) => {
    let page = first;
    let last = after;
    for (;;) {
      for (const e of page.events) {
        await out.write(`id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`);
        last = e.id;
      }
      if (page.ended || out.aborted) return;
      if (page.events.length === 0) {
        await stub.waitForChange(KEEPALIVE_MS);
        if (out.aborted) return;
      }
      const next = (await stub.events(orgId, last)) as RunResult<Page>;
      if (!next.ok) {
        await out.write(`event: error\ndata: ${JSON.stringify({ code: next.code, detail: next.message })}\n\n`);
        return;
      }
      page = next.value;
      if (page.events.length === 0 && !page.ended) await out.write(": keepalive\n\n");
    }
  });
}
