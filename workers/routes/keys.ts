import { Hono } from "hono";
import { CreateKeyRequest } from "../../protocol/schemas.js";
import type { AppEnv } from "../app-env.js";
import { keyCache } from "../auth/authenticate.js";
import { createApiKey, getApiKey, listApiKeys, revokeApiKey } from "../db/accounts.js";
import { database } from "../db/client.js";
import { keyCreationVelocity, limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

/**
 * Self-service keys. Owners see and revoke every key of their org; members only their own.
 * Another org's key is reported as missing, never as forbidden, so ids cannot be probed.
 */
export const keys = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("admin"))
  .get("/", async (c) => {
    const { org, user } = c.get("principal");
    const all = await listApiKeys(database(c.env.DB), org.id);
    return c.json({ data: user.role === "owner" ? all : all.filter((k) => k.userId === user.id) });
  })
  .post("/", async (c) => {
    const body = await jsonBody(c, CreateKeyRequest);
    await keyCreationVelocity(c);
    const { org, user } = c.get("principal");
    const created = await createApiKey(database(c.env.DB), { orgId: org.id, userId: user.id, ...body });
    return c.json(created, 201);
  })
  .delete("/:id", async (c) => {
    const { org, user } = c.get("principal");
    const db = database(c.env.DB);
    const key = await getApiKey(db, c.req.param("id"));
    if (!key || key.orgId !== org.id) throw new ApiError("not_found", "No such API key in your org.");
    if (user.role !== "owner" && key.userId !== user.id) {
      throw new ApiError("forbidden", "Only an org owner can revoke another member's key.");
    }
    const revoked = await revokeApiKey(db, key.id);
    keyCache(c.get("config")).evict({ keyId: key.id });
    return c.json(revoked);
  });
