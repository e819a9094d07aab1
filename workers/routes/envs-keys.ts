import { Hono } from "hono";
import { fromBase64url } from "../../protocol/base64.js";
import { keyFingerprint, PutOrgKeyRequest, type OrgKey } from "../../protocol/envs/capture.js";
import type { AppEnv } from "../app-env.js";
import { database } from "../db/client.js";
import { getOrgKey, putOrgKey } from "../envs/keys.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";

const answer = (row: { keyId: string; publicKey: string; createdAt: Date }): OrgKey => ({
  keyId: row.keyId,
  publicKey: row.publicKey,
  createdAt: row.createdAt.toISOString(),
});

/**
 * The org's public key that rollout content is sealed to. Any member may read it; only an owner may
 * set it, since whoever holds the matching private key reads every rollout sealed after.
 */
export const envKeys = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("admin"))
  .get("/", async (c) => {
    const row = await getOrgKey(database(c.env.DB), c.get("principal").org.id);
    if (!row) throw new ApiError("not_found", "Your org has no sealing key: set one with `sextant envs keygen`.");
    return c.json(answer(row));
  })
  .put("/", async (c) => {
    const body = await jsonBody(c, PutOrgKeyRequest);
    const { org, user } = c.get("principal");
    if (user.role !== "owner") throw new ApiError("forbidden", "Only an org owner can set the org's sealing key.");
    const keyId = body.keyId ?? (await keyFingerprint(fromBase64url(body.publicKey)));
    const row = await putOrgKey(database(c.env.DB), {
      orgId: org.id,
      userId: user.id,
      keyId,
      publicKey: body.publicKey,
    });
    return c.json(answer(row));
  });
