import { Hono } from "hono";
import { z } from "zod";
import type { AbuseThrottle } from "../../../protocol/schemas.js";
import type { AppEnv } from "../../app-env.js";
import { activePrefixThrottle, liftThrottle, listThrottles } from "../../db/abuse.js";
import { database, type Db } from "../../db/client.js";
import { ApiError } from "../../problem.js";
import { validated } from "../../middleware/json-body.js";

const ListQuery = z.strictObject({
  all: z
    .enum(["true", "false"])
    .transform((all) => all === "true")
    .default(false),
});

/**
 * A prefix's limiter object holds one throttle: after a lift it carries the newest throttle still
 * active on that prefix, if another one is, and none otherwise.
 */
async function syncPrefixLimiter(env: Env, db: Db, lifted: AbuseThrottle, now: number) {
  const limiter = env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(`ip:${lifted.subject}`));
  const still = await activePrefixThrottle(db, lifted.subject, now);
  if (still) await limiter.setThrottle(still.reason, Date.parse(still.expiresAt));
  else await limiter.setThrottle(null);
}

/** Abuse throttles: what was throttled and why, and lifting a throttle before it expires. */
export const adminAbuse = new Hono<AppEnv>()
  .get("/", async (c) => {
    const { all } = validated(ListQuery, c.req.query(), "query");
    return c.json({ data: await listThrottles(database(c.env.DB), { all }) });
  })
  .post("/:id/lift", async (c) => {
    const id = c.req.param("id");
    const db = database(c.env.DB);
    const now = Date.now();
    const lifted = await liftThrottle(db, id, now);
    if (!lifted) throw new ApiError("not_found", `No abuse throttle \`${id}\`.`);
    // An account throttle reaches requests through the key cache, within its TTL; a prefix's
    // throttle lives in the prefix's limiter object.
    if (lifted.kind === "prefix") await syncPrefixLimiter(c.env, db, lifted, now);
    return c.json(lifted);
  });
