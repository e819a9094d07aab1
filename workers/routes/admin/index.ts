import { Hono } from "hono";
import type { AppEnv } from "../../app-env.js";
import { requireAdmin } from "../../middleware/auth.js";
import { adminAbuse } from "./abuse.js";
import { adminAgents } from "./agents.js";
import { adminDashboard } from "./dashboard.js";
import { adminGateway } from "./gateway.js";
import { adminKeys } from "./keys.js";
import { adminLake } from "./lake.js";
import { adminOrgs } from "./orgs.js";
import { adminUsers } from "./users.js";

/** The operator surface: orgs, users, keys, abuse throttles, the gateway's backends, agent tasks and the lake, behind `ADMIN_SECRET`. */
export const admin = new Hono<AppEnv>()
  // Before the bearer guard: the dashboard signs browsers in with a form and a session cookie.
  .route("/dashboard", adminDashboard)
  .use(requireAdmin)
  .route("/orgs", adminOrgs)
  .route("/users", adminUsers)
  .route("/keys", adminKeys)
  .route("/abuse", adminAbuse)
  .route("/gateway", adminGateway)
  .route("/agents", adminAgents)
  .route("/lake", adminLake);
