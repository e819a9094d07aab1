/**
 * Rollout runs (`/v1/envs/rollouts`): a policy (a model or pool the gateway serves) plays tasks of
 * a task set in groups, or (`agent: "oracle"` or `"noop"`) each task's reference solution or nothing
 * does, each play an agent task of kind `rollout` verified when it ends, and the run
 * streams each start, each end with its reward, each group's advantages and a final summary as
 * server-sent events (resumable with `Last-Event-ID`). A run is an `EnvRun` object named by the
 * run's id, which also keeps the org that owns it: another org's run answers 404 as a missing one.
 */
import { Hono, type Context } from "hono";
import { CreateRolloutsRequest } from "../../protocol/envs/rollouts.js";
import type { AppEnv } from "../app-env.js";
import { eventStream, prepareRun, resumeAfter, RUN_ID, runStubOf, settled } from "../envs/rollout-runs.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

const what = (id: string) => `rollout run \`${id}\``;

/** The run's object, for an id that can be one (anything else is missing without asking an object). */
function runStub(c: Context<AppEnv>) {
  const id = c.req.param("id")!;
  if (!RUN_ID.test(id)) throw new ApiError("not_found", `No ${what(id)} in your org.`);
  return { id, stub: runStubOf(c, id) };
}

export const envRollouts = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("index"))
  .post("/", async (c) => {
    const body = await jsonBody(c, CreateRolloutsRequest);
    const { run } = await prepareRun(c, {
      taskset: body.taskset,
      tasks: body.tasks,
      agent: body.agent,
      // A run played without a model (oracle, noop) is labelled with its agent.
      policy: body.policy ?? { model: body.agent },
      groupSize: body.group_size,
      sampling: body.sampling,
      limits: body.limits,
      concurrency: body.concurrency,
    });
    const stub = runStubOf(c, run.id);
    await stub.create(run);
    c.header("Location", `/v1/envs/rollouts/${run.id}`);
    return eventStream(c, stub, 0, what(run.id));
  })
  .get("/:id", async (c) => {
    const { id, stub } = runStub(c);
    return c.json(settled(await stub.get(c.get("principal").org.id), what(id)));
  })
  .get("/:id/events", async (c) => {
    const after = resumeAfter(c);
    const { id, stub } = runStub(c);
    return eventStream(c, stub, after, what(id));
  });
