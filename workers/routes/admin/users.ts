import { Hono } from "hono";
import { z } from "zod";
import type { AppEnv } from "../../app-env.js";
import { findUserByEmail } from "../../db/accounts.js";
import { database } from "../../db/client.js";
import { ApiError } from "../../problem.js";

const Lookup = z.object({ email: z.email().transform((e) => e.toLowerCase()) });

/** Finds a user by email across orgs: how operators and `npm start` locate an existing account. */
export const adminUsers = new Hono<AppEnv>().get("/", async (c) => {
  const query = Lookup.safeParse(c.req.query());
  if (!query.success) throw new ApiError("invalid_request", "Give a valid `email` query parameter.");
  const user = await findUserByEmail(database(c.env.DB), query.data.email);
  return c.json({ data: user ? [user] : [] });
});
