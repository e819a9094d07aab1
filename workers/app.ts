import { Hono } from "hono";
import type { AppEnv } from "./app-env.js";
import { conventions } from "./middleware/conventions.js";
import { requestId } from "./middleware/request-id.js";
import { ApiError, problemResponse, thrownAsErrors, toApiError } from "./problem.js";
import { recordRefusal } from "./lake/refusals.js";
import { admin } from "./routes/admin/index.js";
import { agents } from "./routes/agents.js";
import { envKeys } from "./routes/envs-keys.js";
import { envRows } from "./routes/envs-rows.js";
import { envRollouts } from "./routes/env-rollouts.js";
import { envs } from "./routes/envs.js";
import { errors } from "./routes/errors.js";
import { evals } from "./routes/evals.js";
import { events } from "./routes/events.js";
import { gateway } from "./gateway/routes.js";
import { health } from "./routes/health.js";
import { keys } from "./routes/keys.js";
import { me } from "./routes/me.js";
import { openenv, type Dispatch } from "./routes/openenv.js";
import { usage } from "./routes/usage.js";
import { workspaces } from "./routes/workspaces.js";

const app = new Hono<AppEnv>()
  .use(requestId)
  .use(thrownAsErrors)
  .use(conventions)
  .route("/", health)
  .route("/errors", errors)
  .route("/v1/me", me)
  .route("/v1/keys", keys)
  .route("/v1/usage", usage)
  .route("/v1/workspaces", workspaces)
  .route("/v1/agents/tasks", agents)
  .route("/v1/envs/keys", envKeys)
  .route("/v1/envs/rows", envRows)
  // Before `/v1/envs`, whose key check covers every path under it: OpenEnv's client sends no header.
  .route("/v1/envs/openenv", openenv(dispatch))
  .route("/v1/envs/rollouts", envRollouts)
  .route("/v1/envs", envs)
  .route("/v1/evals", evals)
  .route("/v1/events", events)
  .route("/v1", gateway)
  .route("/admin", admin);

/** The app itself, for the OpenEnv front's session requests (declared so its type does not wait on the app's). */
function dispatch(...args: Parameters<Dispatch>): ReturnType<Dispatch> {
  return app.fetch(...args);
}

app.notFound((c) => problemResponse(c, new ApiError("not_found", `No route for ${c.req.method} ${c.req.path}.`)));
app.onError((err, c) => {
  const error = toApiError(err, c.get("requestId") ?? "unknown");
  if (error.code === "rate_limited" || error.code === "unavailable") recordRefusal(c, error);
  return problemResponse(c, error);
});

export default app;
