import { Hono } from "hono";
import type { Me } from "../../protocol/schemas.js";
import type { AppEnv } from "../app-env.js";
import { requireApiKey } from "../middleware/auth.js";

export const me = new Hono<AppEnv>().use(requireApiKey).get("/", (c) => {
  const { org, user, key } = c.var.principal;
  return c.json({ org, user, key } satisfies Me);
});
