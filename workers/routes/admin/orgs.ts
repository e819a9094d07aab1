import { Hono } from "hono";
import { CreateOrgRequest, CreateUserRequest, UpdateOrgRequest } from "../../../protocol/schemas.js";
import type { AppEnv } from "../../app-env.js";
import { keyCache } from "../../auth/authenticate.js";
import { createOrg, createUser, findUserByEmail, getOrg, listOrgs, listUsers, updateOrg } from "../../db/accounts.js";
import { database } from "../../db/client.js";
import { jsonBody } from "../../middleware/json-body.js";
import { ApiError } from "../../problem.js";

const orgNotFound = (id: string) => new ApiError("not_found", `No org \`${id}\`.`);

export const adminOrgs = new Hono<AppEnv>()
  .post("/", async (c) => {
    const body = await jsonBody(c, CreateOrgRequest);
    return c.json(await createOrg(database(c.env.DB), body), 201);
  })
  .get("/", async (c) => c.json({ data: await listOrgs(database(c.env.DB)) }))
  .get("/:orgId", async (c) => {
    const org = await getOrg(database(c.env.DB), c.req.param("orgId"));
    if (!org) throw orgNotFound(c.req.param("orgId"));
    return c.json(org);
  })
  .patch("/:orgId", async (c) => {
    const body = await jsonBody(c, UpdateOrgRequest);
    const org = await updateOrg(database(c.env.DB), c.req.param("orgId"), body);
    if (!org) throw orgNotFound(c.req.param("orgId"));
    keyCache(c.get("config")).evict({ orgId: org.id });
    return c.json(org);
  })
  .post("/:orgId/users", async (c) => {
    const body = await jsonBody(c, CreateUserRequest);
    const db = database(c.env.DB);
    const org = await getOrg(db, c.req.param("orgId"));
    if (!org) throw orgNotFound(c.req.param("orgId"));
    if (await findUserByEmail(db, body.email)) {
      throw new ApiError("conflict", `A user with email ${body.email} already exists.`);
    }
    try {
      return c.json(await createUser(db, org.id, body), 201);
    } catch (err) {
      // A concurrent create of the same email loses the race on the unique index.
      if (String(err).includes("UNIQUE constraint failed")) {
        throw new ApiError("conflict", `A user with email ${body.email} already exists.`);
      }
      throw err;
    }
  })
  .get("/:orgId/users", async (c) => {
    const db = database(c.env.DB);
    const org = await getOrg(db, c.req.param("orgId"));
    if (!org) throw orgNotFound(c.req.param("orgId"));
    return c.json({ data: await listUsers(db, org.id) });
  });
