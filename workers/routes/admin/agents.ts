import { eq } from "drizzle-orm";
import { Hono } from "hono";
import type { AppEnv } from "../../app-env.js";
import { database } from "../../db/client.js";
import { agentTasks } from "../../db/schema.js";
import { ApiError } from "../../problem.js";

/**
 * Operators' hold on agent tasks. `restart` drops a task object's memory (as an eviction or a crash
 * would) and has it carry on from its storage: for a task that looks stuck, and the way the durability
 * tests evict an object between turns.
 */
export const adminAgents = new Hono<AppEnv>().post("/tasks/:id/restart", async (c) => {
  const id = c.req.param("id");
  const [row] = await database(c.env.DB).select().from(agentTasks).where(eq(agentTasks.id, id)).limit(1);
  if (!row) throw new ApiError("not_found", `No agent task \`${id}\`.`);
  const stub = c.env.AGENT_TASK.get(c.env.AGENT_TASK.idFromName(id));
  // The object resets with the call in flight, so the call itself fails: that is the restart.
  await stub.restart().catch(() => undefined);
  return c.body(null, 202);
});
