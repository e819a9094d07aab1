import { Hono } from "hono";
import { VERSION } from "../../protocol/version.js";
import type { Health } from "../../protocol/schemas.js";
import type { AppEnv } from "../app-env.js";

/** Liveness only: it touches no dependency, so a D1 blip never takes the edge out of rotation. */
export const health = new Hono<AppEnv>().get("/healthz", (c) =>
  c.json({ status: "ok", version: VERSION, time: new Date().toISOString() } satisfies Health),
);
