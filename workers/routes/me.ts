import { Hono } from "hono";
import type { Me } from "../../protocol/schemas.js";
import type { AppEnv } from "../app-env.js";
import { limit } from "../limits/enforce.js";
import { requireApiKey } from "../middleware/auth.js";

export const me = new Hono<AppEnv>()
  .use(requireApiKey)
  .use(limit("admin"))
  .get("/", (c) => {
    const { org, user, key } = c.get("principal");
    return c.json({ org, user, key } satisfies Me);
  });
