/**
 * The environment API (`/v1/envs`): task archives (passed to the sandbox host, stored nowhere on the
 * edge), task sets (a manifest in D1: hashes, sizes, settings) and sessions, in which a client's own
 * model drives the production agent's tools on one task step by step and asks for its reward. A
 * session is an `AgentTask` object of kind `env`; D1 records only which org owns it.
 */
import { and, eq, sql } from "drizzle-orm";
import { Hono, type Context } from "hono";
import {
  ArchiveSha256,
  CreateSessionRequest,
  CreateTaskSetRequest,
  ManifestSettings,
  MAX_ARCHIVE_BYTES,
  StepRequest,
  type CreatedSession,
  type Session,
  type StepResponse,
  type TaskSet,
  type VerifyResponse,
} from "../../protocol/envs/api.js";
import { taskArchiveUrlRefusal } from "../../protocol/envs/archive-url.js";
import { newId } from "../../protocol/ids.js";
import { allowedArchiveOrigins } from "../../durable-objects/agent-task/archive.js";
import type { TaskResult } from "../../durable-objects/agent-task/result.js";
import { archiveInfo, putArchive, sandboxHost } from "../../durable-objects/agent-task/sandbox-client.js";
import type { AppEnv } from "../app-env.js";
import { reserveAgentQuota } from "../agents/quota.js";
import { database } from "../db/client.js";
import { agentTasks, taskSets } from "../db/schema.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

const stubOf = (c: Context<AppEnv>, id: string) => c.env.AGENT_TASK.get(c.env.AGENT_TASK.idFromName(id));

/** The caller's session, or 404: another org's session (or an agent task) is indistinguishable from a missing one. */
async function ownSession(c: Context<AppEnv>) {
  const id = c.req.param("id")!;
  const [row] = await database(c.env.DB)
    .select({ id: agentTasks.id })
    .from(agentTasks)
    .where(and(eq(agentTasks.id, id), eq(agentTasks.orgId, c.get("principal").org.id), eq(agentTasks.kind, "env")))
    .limit(1);
  if (!row) throw new ApiError("not_found", `No session \`${id}\` in your org.`);
  return stubOf(c, id);
}

interface ManifestEntry {
  sha256: string;
  bytes: number;
  /** The archive's public location, as the client chose it (`taskArchiveUrlRefusal`). */
  url?: string;
  settings: ManifestSettings;
}

async function ownTaskSet(c: Context<AppEnv>, id: string) {
  const [row] = await database(c.env.DB)
    .select()
    .from(taskSets)
    .where(and(eq(taskSets.id, id), eq(taskSets.orgId, c.get("principal").org.id)))
    .limit(1);
  if (!row) throw new ApiError("not_found", `No task set \`${id}\` in your org.`);
  return { ...row, manifest: JSON.parse(row.manifest) as ManifestEntry[] };
}

function settled<T>(result: TaskResult<T>): T {
  if (result.ok) return result.value;
  throw new ApiError(
    result.code,
    result.message,
    result.code === "unavailable" ? { headers: { "Retry-After": "5" } } : {},
  );
}

const containers = (c: Context<AppEnv>) => (c.env as { SANDBOX_HOSTS?: string }).SANDBOX_HOSTS === "containers";

/** The sandbox host an edge sends archives to, or a 503 saying why there is none. */
function archiveHost(c: Context<AppEnv>) {
  if (containers(c))
    throw new ApiError(
      "unavailable",
      "This edge runs a container per session, with no shared sandbox host to send archives to: " +
        "push the task set with archive URLs (`sextant envs push --archive-base-url`) and each session's container fetches its task.",
    );
  const host = sandboxHost(c.env, "archives");
  if (typeof host === "string") throw new ApiError("unavailable", host);
  return host;
}

export const envs = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("index"))
  .get("/archives/:sha256", async (c) => {
    const sha = ArchiveSha256.safeParse(c.req.param("sha256"));
    if (!sha.success)
      throw new ApiError("invalid_request", "The archive's name is its SHA-256: 64 lowercase hex digits.");
    const missing = () => new ApiError("not_found", `No archive ${sha.data} for your org: send it with PUT.`);
    // The host's cache is shared by every org, so whether it holds a hash is asked only for a hash
    // already in one of the caller's task sets: another org's archive is not found without the host
    // being asked, and an archive the org named that the host has since evicted is not found either.
    const [named] = await database(c.env.DB)
      .select({ id: taskSets.id })
      .from(taskSets)
      .where(
        and(
          eq(taskSets.orgId, c.get("principal").org.id),
          sql`instr(${taskSets.manifest}, ${`"sha256":"${sha.data}"`}) > 0`,
        ),
      )
      .limit(1);
    if (!named) throw missing();
    const held = await archiveInfo(archiveHost(c), sha.data).catch((err: Error) => {
      throw new ApiError("unavailable", err.message, { headers: { "Retry-After": "5" } });
    });
    if (!held) throw missing();
    return c.json(held);
  })
  .put("/archives/:sha256", async (c) => {
    const sha = ArchiveSha256.safeParse(c.req.param("sha256"));
    if (!sha.success)
      throw new ApiError("invalid_request", "The archive's name is its SHA-256: 64 lowercase hex digits.");
    if (!/^application\/(gzip|x-gzip|octet-stream)\s*(;|$)/i.test(c.req.header("Content-Type") ?? ""))
      throw new ApiError("unsupported_media_type", "Send the archive as `Content-Type: application/gzip`.");
    const bytes = Number(c.req.header("Content-Length"));
    if (!Number.isSafeInteger(bytes) || bytes < 1)
      throw new ApiError("invalid_request", "An archive is sent with its `Content-Length`.");
    if (bytes > MAX_ARCHIVE_BYTES)
      throw new ApiError("payload_too_large", `An archive is at most ${MAX_ARCHIVE_BYTES} bytes.`);
    const host = archiveHost(c);
    const answer = await putArchive(host, sha.data, c.req.raw.body!, bytes);
    const detail =
      (answer.body as { message?: string } | undefined)?.message ?? `The sandbox host answered ${answer.status}.`;
    if (answer.status === 200 || answer.status === 201) return c.json(answer.body as object, 201);
    if (answer.status === 400) throw new ApiError("invalid_request", detail);
    if (answer.status === 413) throw new ApiError("payload_too_large", detail);
    if (answer.status === 429 || answer.status === 503)
      throw new ApiError("unavailable", detail, { headers: { "Retry-After": "5" } });
    throw new ApiError("upstream_failure", detail);
  })
  .post("/tasksets", async (c) => {
    const body = await jsonBody(c, CreateTaskSetRequest);
    const { org, user } = c.get("principal");
    const id = newId("tset");
    const origins = allowedArchiveOrigins(c.env);
    body.tasks.forEach((t, index) => {
      const refusal = t.url === undefined ? undefined : taskArchiveUrlRefusal(t.url, origins);
      if (refusal) throw new ApiError("invalid_request", `Task ${index}'s archive URL ${refusal}.`);
    });
    // A URL is kept in the clear: it is where the client published the archive, a public location.
    const manifest: ManifestEntry[] = body.tasks.map((t) => ({
      sha256: t.sha256,
      bytes: t.bytes,
      ...(t.url !== undefined ? { url: t.url } : {}),
      settings: t.settings,
    }));
    await database(c.env.DB)
      .insert(taskSets)
      .values({ id, orgId: org.id, userId: user.id, manifest: JSON.stringify(manifest), tasks: manifest.length });
    return c.json({ id, tasks: manifest.length }, 201, { Location: `/v1/envs/tasksets/${id}` });
  })
  .get("/tasksets/:id", async (c) => {
    const set = await ownTaskSet(c, c.req.param("id"));
    return c.json({
      id: set.id,
      tasks: set.manifest.map((t, index) => ({ index, ...t })),
      createdAt: set.createdAt.toISOString(),
    } satisfies TaskSet);
  })
  .post("/sessions", async (c) => {
    const body = await jsonBody(c, CreateSessionRequest);
    const set = await ownTaskSet(c, body.taskset);
    const taskIndex = typeof body.task === "number" ? body.task : set.manifest.findIndex((t) => t.sha256 === body.task);
    const task = set.manifest[taskIndex];
    if (!task) throw new ApiError("not_found", `Task set \`${set.id}\` has no task ${JSON.stringify(body.task)}.`);
    if (containers(c) && !task.url)
      throw new ApiError(
        "conflict",
        `This edge runs a container per session, which fetches its task from the archive's URL, and task ${taskIndex} of \`${set.id}\` has none: ` +
          "push the set with `sextant envs push --archive-base-url`.",
      );
    const { org, user, key } = c.get("principal");
    const id = newId("sess");
    const host = sandboxHost(c.env, id);
    if (typeof host === "string") throw new ApiError("unavailable", host);
    const { idleSeconds, ...limits } = body.limits;
    const quota = await reserveAgentQuota(c, id, limits);
    await database(c.env.DB)
      .insert(agentTasks)
      .values({ id, orgId: org.id, userId: user.id, model: "client", kind: "env" });
    const result = await stubOf(c, id)
      .openSession({
        kind: "env",
        id,
        orgId: org.id,
        userId: user.id,
        keyId: key.id,
        taskSetId: set.id,
        taskIndex,
        sha256: task.sha256,
        archiveUrl: task.url,
        seed: body.seed,
        limits,
        idleSeconds,
      })
      .catch(async (err: unknown) => {
        await quota.settle(id, 0);
        throw err;
      });
    if (!result.ok) {
      await quota.settle(id, 0);
      await database(c.env.DB).delete(agentTasks).where(eq(agentTasks.id, id));
    }
    return c.json(settled(result) as CreatedSession, 201, { Location: `/v1/envs/sessions/${id}` });
  })
  .get("/sessions/:id", async (c) => c.json(settled(await (await ownSession(c)).session()) as Session))
  .post("/sessions/:id/step", async (c) => {
    const body = await jsonBody(c, StepRequest);
    return c.json(settled(await (await ownSession(c)).step(body)) as StepResponse);
  })
  .post("/sessions/:id/verify", async (c) => c.json(settled(await (await ownSession(c)).verify()) as VerifyResponse))
  .get("/sessions/:id/diff", async (c) => c.json(settled(await (await ownSession(c)).sessionDiff())))
  .delete("/sessions/:id", async (c) => {
    settled(await (await ownSession(c)).closeSession());
    return c.body(null, 204);
  });
