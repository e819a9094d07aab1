/**
 * Eval runs (`/v1/evals/runs`): every chosen task of a task set played `attempts` times by a model
 * (or by each task's reference solution, `oracle`, or by nothing, `noop`), as a rollout run with
 * `group_size = attempts`, plus a manifest in D1. The run carries on in its object whatever happens
 * to the caller; its events stream as the rollout run's do, and its report (each task's attempts,
 * why each failed, pass@1 and pass@k over the tasks that are not broken) is built from the run's
 * members whenever it is asked for. Another org's run, or task set, answers 404 as a missing one.
 */
import { eq } from "drizzle-orm";
import { Hono } from "hono";
import { z } from "zod";
import { CreateEvalRunRequest, type EvalRunList } from "../../protocol/evals/api.js";
import { newId } from "../../protocol/ids.js";
import type { AppEnv } from "../app-env.js";
import { database } from "../db/client.js";
import { evalRuns } from "../db/schema.js";
import { eventStream, prepareRun, resumeAfter, runStubOf } from "../envs/rollout-runs.js";
import { currentReport, evalRunOf, listEvalRuns, ownEvalRun } from "../evals/runs.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody, validated } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

const ListQuery = z.strictObject({
  taskset: z.string().min(1).max(64).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
});

export const evals = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("index"))
  .post("/runs", async (c) => {
    const body = await jsonBody(c, CreateEvalRunRequest);
    const checkpoint = body.checkpoint ? { checkpoint: body.checkpoint } : {};
    const { run, pool } = await prepareRun(c, {
      taskset: body.taskset,
      tasks: body.tasks,
      agent: body.agent,
      // Without a model, the run's policy is a label: the agent's name.
      policy: { model: body.model ?? body.agent, ...checkpoint },
      groupSize: body.attempts,
      sampling: body.sampling,
      limits: body.limits,
      concurrency: body.concurrency,
    });
    const id = newId("eval");
    const price = pool?.price ?? null;
    const db = database(c.env.DB);
    // The manifest first: a run whose manifest could not be written would play unseen.
    await db.insert(evalRuns).values({
      id,
      orgId: run.orgId,
      tasksetId: body.taskset,
      rolloutRunId: run.id,
      agent: body.agent,
      model: body.model ?? null,
      checkpoint: body.checkpoint ?? null,
      attempts: body.attempts,
      concurrency: body.concurrency,
      priceInput: price?.input ?? null,
      priceOutput: price?.output ?? null,
    });
    try {
      await runStubOf(c, run.id).create({ ...run, eval: { id, price } });
    } catch (err) {
      await db.delete(evalRuns).where(eq(evalRuns.id, id));
      throw err;
    }
    const row = await ownEvalRun(c, id);
    c.header("Location", `/v1/evals/runs/${id}`);
    return c.json(evalRunOf(row), 201);
  })
  .get("/runs", async (c) => {
    const query = validated(ListQuery, c.req.query(), "query");
    const body: EvalRunList = { runs: (await listEvalRuns(c, query)).map(evalRunOf) };
    return c.json(body);
  })
  .get("/runs/:id", async (c) => {
    const row = await ownEvalRun(c, c.req.param("id"));
    const report = await currentReport(c, row);
    if (!report) throw new ApiError("not_found", `No eval run \`${row.id}\` in your org.`);
    return c.json(report);
  })
  .get("/runs/:id/events", async (c) => {
    const after = resumeAfter(c);
    const row = await ownEvalRun(c, c.req.param("id"));
    return eventStream(c, runStubOf(c, row.rolloutRunId), after, `eval run \`${row.id}\``);
  });
