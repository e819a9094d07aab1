/**
 * Rollout runs (`/v1/envs/rollouts`): a policy (a model or pool the gateway serves) plays tasks of
 * a task set in groups, or (`agent: "oracle"` or `"noop"`) each task's reference solution or nothing
 * does, each play an agent task of kind `rollout` verified when it ends, and the run
 * streams each start, each end with its reward, each group's advantages and a final summary as
 * server-sent events (resumable with `Last-Event-ID`). A run is an `EnvRun` object named by the
 * run's id, which also keeps the org that owns it: another org's run answers 404 as a missing one.
 */
import { and, eq } from "drizzle-orm";
import { Hono, type Context } from "hono";
import { stream } from "hono/streaming";
import { z } from "zod";
import { AGENT_PLAN_LIMITS } from "../../protocol/agents/task.js";
import { CreateRolloutsRequest, type RolloutEvent, type RunTask } from "../../protocol/envs/rollouts.js";
import { newId } from "../../protocol/ids.js";
import type { RunResult } from "../../durable-objects/env-run/env-run.js";
import { sandboxHost } from "../../durable-objects/agent-task/sandbox-client.js";
import { AgentLimitsSetting } from "../agents/quota.js";
import type { AppEnv } from "../app-env.js";
import { ConfigError } from "../config.js";
import { database } from "../db/client.js";
import { taskSets } from "../db/schema.js";
import { gatewayRuntime } from "../gateway/runtime.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

/** Seconds between SSE comments while a run is quiet, so proxies keep the stream open. */
const KEEPALIVE_MS = 15_000;
const RUN_ID = /^run_[0-9a-z]{20}$/;

const RunSettings = z.object({
  AGENT_LIMITS: AgentLimitsSetting,
});

const stubOf = (c: Context<AppEnv>, id: string) => c.env.ENV_RUN.get(c.env.ENV_RUN.idFromName(id));

/** The run's object, for an id that can be one (anything else is missing without asking an object). */
function runStub(c: Context<AppEnv>) {
  const id = c.req.param("id")!;
  if (!RUN_ID.test(id)) throw new ApiError("not_found", `No rollout run \`${id}\` in your org.`);
  return { id, stub: stubOf(c, id) };
}

function settled<T>(result: RunResult<T>, id: string): T {
  if (result.ok) return result.value;
  throw new ApiError("not_found", `No rollout run \`${id}\` in your org.`);
}

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

/** Where an event stream resumes: `Last-Event-ID` (what EventSource sends on reconnect), else `?after=`. */
function resumeAfter(c: Context<AppEnv>): number {
  const raw = c.req.header("Last-Event-ID") ?? c.req.query("after") ?? "0";
  const after = Number(raw);
  if (!/^\d{1,15}$/.test(raw.trim()) || !Number.isSafeInteger(after))
    throw new ApiError("invalid_request", "`Last-Event-ID` (or `after`) must be an event id: a whole number.");
  return after;
}

type Page = { events: RolloutEvent[]; ended: boolean };

/** The run's events after `after` as SSE, until its summary (or the client leaves). */
function eventStream(c: Context<AppEnv>, stub: ReturnType<typeof stubOf>, orgId: string, after: number, first: Page) {
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

export const envRollouts = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("index"))
  .post("/", async (c) => {
    const body = await jsonBody(c, CreateRolloutsRequest);
    const settings = RunSettings.safeParse(c.env);
    if (!settings.success)
      throw new ConfigError(`Invalid agent settings: ${settings.error.issues.map((i) => i.message).join("; ")}`);
    const { tasks, archiveUrls } = await runTasks(c, body.taskset, body.tasks);
    const host = sandboxHost(c.env, "rollouts");
    if (typeof host === "string") throw new ApiError("unavailable", host);
    // Before anything is made: a policy the gateway does not serve would fail every member's first turn.
    // A run played without a model (oracle, noop) asks the gateway nothing: its policy is a label.
    const policy = body.policy ?? { model: body.agent };
    const runtime = gatewayRuntime(c.env);
    if (body.agent === "model" && !runtime?.gateway.poolFor("chat", policy.model))
      throw new ApiError("not_found", `No model named ${policy.model} is served here; GET /v1/models lists them.`);
    const { org, user, key } = c.get("principal");
    // A run's id has a task id's form, so its members' ids (`<run>-<n>`) are valid sandbox ids.
    const id = `run_${newId("task").slice("task_".length)}`;
    const stub = stubOf(c, id);
    await stub.create({
      id,
      orgId: org.id,
      userId: user.id,
      keyId: key.id,
      taskset: body.taskset,
      tasks,
      archiveUrls,
      policy,
      agent: body.agent,
      groupSize: body.group_size,
      sampling: body.sampling,
      limits: body.limits,
      concurrency: body.concurrency,
      orgLimits: settings.data.AGENT_LIMITS?.[org.plan] ?? AGENT_PLAN_LIMITS[org.plan],
    });
    c.header("Location", `/v1/envs/rollouts/${id}`);
    const first = settled((await stub.events(org.id, 0)) as RunResult<Page>, id);
    return eventStream(c, stub, org.id, 0, first);
  })
  .get("/:id", async (c) => {
    const { id, stub } = runStub(c);
    return c.json(settled(await stub.get(c.get("principal").org.id), id));
  })
  .get("/:id/events", async (c) => {
    const after = resumeAfter(c);
    const { id, stub } = runStub(c);
    const orgId = c.get("principal").org.id;
    // A missing run fails here, as a problem document, before the stream starts.
    const first = settled((await stub.events(orgId, after)) as RunResult<Page>, id);
    return eventStream(c, stub, orgId, after, first);
  });
