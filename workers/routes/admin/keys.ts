import { Hono } from "hono";
import { z } from "zod";
import { AdminCreateKeyRequest } from "../../../protocol/schemas.js";
import type { AppEnv } from "../../app-env.js";
import { keyCache } from "../../auth/authenticate.js";
import { createApiKey, getApiKey, getOrg, getUser, listApiKeys, revokeApiKey } from "../../db/accounts.js";
import { database } from "../../db/client.js";
import { jsonBody } from "../../middleware/json-body.js";
import { ApiError } from "../../problem.js";

const ListQuery = z.object({ orgId: z.string().min(1).max(64) });

export const adminKeys = new Hono<AppEnv>()
  .post("/", async (c) => {
    const { userId, ...body } = await jsonBody(c, AdminCreateKeyRequest);
    const db = database(c.env.DB);
    const user = await getUser(db, userId);
    if (!user) throw new ApiError("not_found", `No user \`${userId}\`.`);
    return c.json(await createApiKey(db, { orgId: user.orgId, userId: user.id, ...body }), 201);
  })
  .get("/", async (c) => {
    const query = ListQuery.safeParse(c.req.query());
    if (!query.success) throw new ApiError("invalid_request", "Give the `orgId` query parameter.");
    const db = database(c.env.DB);
    if (!(await getOrg(db, query.data.orgId))) throw new ApiError("not_found", `No org \`${query.data.orgId}\`.`);
    return c.json({ data: await listApiKeys(db, query.data.orgId) });
  })
  .delete("/:keyId", async (c) => {
    const db = database(c.env.DB);
    const key = await getApiKey(db, c.req.param("keyId"));
    if (!key) throw new ApiError("not_found", `No API key \`${c.req.param("keyId")}\`.`);
    const revoked = await revokeApiKey(db, key.id);
    keyCache(c.get("config")).evict({ keyId: key.id });
    return c.json(revoked);
  });
