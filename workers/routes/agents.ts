/**
 * The agent task API (`/v1/agents/tasks`): start a coding-agent task, fill its sandbox, follow its
 * events (SSE, resumable with `Last-Event-ID`), steer, cancel, and take its diff. Each task is an
 * `AgentTask` object; D1 records only which org owns it.
 */
import { and, desc, eq } from "drizzle-orm";
import { Hono, type Context } from "hono";
import { stream } from "hono/streaming";
import { z } from "zod";
import {
  CreateTaskRequest,
  TaskLimits,
  TaskMessageRequest,
  UploadTaskFilesRequest,
  type Task,
  type TaskEvent,
} from "../../protocol/agents/task.js";
import { archiveUrlRefusal } from "../../protocol/agents/archive-url.js";
import { newId } from "../../protocol/ids.js";
import { allowedArchiveOrigins } from "../../durable-objects/agent-task/archive.js";
import type { TaskResult } from "../../durable-objects/agent-task/result.js";
import { sandboxHost } from "../../durable-objects/agent-task/sandbox-client.js";
import { reserveAgentQuota } from "../agents/quota.js";
import type { AppEnv } from "../app-env.js";
import { ConfigError } from "../config.js";
import { database } from "../db/client.js";
import { agentTasks } from "../db/schema.js";
import { getWorkspace } from "../db/workspaces.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

/** The chat model a task uses when it names none. */
const DEFAULT_AGENT_MODEL = "chat-simulated";
/** Seconds between SSE comments while a task is quiet, so proxies keep the stream open. */
const KEEPALIVE_MS = 15_000;

const AgentSettings = z.object({
  AGENT_MODEL: z.string().min(1).optional(),
  /**
   * Why this edge has no sandbox host, said to whoever creates a task in place of the bare fact:
   * `npm start` sets it when it runs none (no working bubblewrap), with how to fix that.
   */
  SANDBOX_UNAVAILABLE: z.string().min(1).optional(),
});

const stubOf = (c: Context<AppEnv>, id: string) => c.env.AGENT_TASK.get(c.env.AGENT_TASK.idFromName(id));

/** The caller's task, or 404: another org's task is indistinguishable from a missing one. */
async function ownTask(c: Context<AppEnv>) {
  const id = c.req.param("id")!;
  const [row] = await database(c.env.DB)
    .select({ id: agentTasks.id })
    .from(agentTasks)
    .where(and(eq(agentTasks.id, id), eq(agentTasks.orgId, c.get("principal").org.id), eq(agentTasks.kind, "agent")))
    .limit(1);
  if (!row) throw new ApiError("not_found", `No agent task \`${id}\` in your org.`);
  return stubOf(c, id);
}

function settled<T>(result: TaskResult<T>): T {
  if (result.ok) return result.value;
  throw new ApiError(
    result.code,
    result.message,
    result.code === "unavailable" ? { headers: { "Retry-After": "5" } } : {},
  );
}

/** Where an event stream resumes: `Last-Event-ID` (what EventSource sends on reconnect), else `?after=`. */
function resumeAfter(c: Context<AppEnv>): number {
  const raw = c.req.header("Last-Event-ID") ?? c.req.query("after") ?? "0";
  const after = Number(raw);
  if (!/^\d{1,15}$/.test(raw.trim()) || !Number.isSafeInteger(after))
    throw new ApiError("invalid_request", "`Last-Event-ID` (or `after`) must be an event id: a whole number.");
  return after;
}

export const agents = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("index"))
  .post("/", async (c) => {
    const body = await jsonBody(c, CreateTaskRequest);
    const settings = AgentSettings.safeParse(c.env);
    if (!settings.success)
      throw new ConfigError(
        `Invalid agent settings: ${settings.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
      );
    // Before anything is made for the task: the task object checks again at every redirect.
    const refusal = body.archive && archiveUrlRefusal(new URL(body.archive.url), allowedArchiveOrigins(c.env));
    if (refusal)
      throw new ApiError("invalid_request", `The request body is invalid: archive.url: ${refusal}`, {
        errors: [{ path: "archive.url", message: refusal }],
      });
    const { org, user, key } = c.get("principal");
    if (body.workspace && !(await getWorkspace(database(c.env.DB), org.id, body.workspace.id)))
      throw new ApiError("not_found", `No workspace \`${body.workspace.id}\` in your org.`);
    const id = newId("task");
    const host = sandboxHost(c.env, id);
    if (typeof host === "string") throw new ApiError("unavailable", settings.data.SANDBOX_UNAVAILABLE ?? host);
    const model = body.model ?? settings.data.AGENT_MODEL ?? DEFAULT_AGENT_MODEL;
    const limits = TaskLimits.parse(body.limits);
    // The reservation outlives the task's wall time by an hour: it may sit uploading before it starts.
    const quota = await reserveAgentQuota(c, id, limits);
    // The row first: a task object nobody can list would be unreachable.
    await database(c.env.DB).insert(agentTasks).values({ id, orgId: org.id, userId: user.id, model });
    const result = await stubOf(c, id)
      .create({
        id,
        orgId: org.id,
        userId: user.id,
        keyId: key.id,
        prompt: body.prompt,
        model,
        limits,
        waitForUpload: body.source === "upload",
        workspace: body.workspace,
        archiveUrl: body.archive?.url,
      })
      .catch(async (err: unknown) => {
        await quota.settle(id, 0);
        throw err;
      });
    if (!result.ok) await quota.settle(id, 0);
    const task = settled(result);
    return c.json(task satisfies Task, 201, { Location: `/v1/agents/tasks/${id}` });
  })
  .get("/", async (c) => {
    const rows = await database(c.env.DB)
      .select({ id: agentTasks.id })
      .from(agentTasks)
      // Sessions and rollouts are AgentTask objects too; each has its own API.
      .where(and(eq(agentTasks.orgId, c.get("principal").org.id), eq(agentTasks.kind, "agent")))
      .orderBy(desc(agentTasks.createdAt))
      .limit(50);
    const tasks = await Promise.all(rows.map(async (r) => (await stubOf(c, r.id).get()) as TaskResult<Task>));
    return c.json({ data: tasks.flatMap((t) => (t.ok ? [t.value] : [])) });
  })
  .get("/:id", async (c) => c.json(settled(await (await ownTask(c)).get())))
  .post("/:id/files", async (c) => {
    const body = await jsonBody(c, UploadTaskFilesRequest);
    return c.json(settled(await (await ownTask(c)).upload(body.files)));
  })
  .post("/:id/start", async (c) => c.json(settled(await (await ownTask(c)).start())))
  .post("/:id/messages", async (c) => {
    const { content } = await jsonBody(c, TaskMessageRequest);
    return c.json(settled(await (await ownTask(c)).message(content)));
  })
  .post("/:id/cancel", async (c) => c.json(settled(await (await ownTask(c)).cancel())))
  .get("/:id/diff", async (c) => c.json(settled(await (await ownTask(c)).diff())))
  .get("/:id/events", async (c) => {
    const after = resumeAfter(c);
    const stub = await ownTask(c);
    // A missing or unreadable task fails here, as a problem document, before the stream starts.
    const first = settled((await stub.events(after)) as TaskResult<{ events: TaskEvent[]; ended: boolean }>);
    c.header("Content-Type", "text/event-stream; charset=utf-8");
    c.header("Cache-Control", "no-cache, no-transform");
    c.header("X-Accel-Buffering", "no");
    return stream(c, async (out) => {
      let page: { events: TaskEvent[]; ended: boolean } = first;
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
        const next = (await stub.events(last)) as TaskResult<{ events: TaskEvent[]; ended: boolean }>;
        if (!next.ok) {
          await out.write(`event: error\ndata: ${JSON.stringify({ code: next.code, detail: next.message })}\n\n`);
          return;
        }
        page = next.value;
        if (page.events.length === 0 && !page.ended) await out.write(": keepalive\n\n");
      }
    });
  });
