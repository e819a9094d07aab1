import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../app-env.js";
import { loadConfig } from "../config.js";
import { drain, DRAIN_BYTES, guardedRequest, tooLarge } from "./request-body.js";

/**
 * Validates the environment (once per isolate) and bounds every route's request body: a declared
 * size over the limit is refused without being parsed (what the client still sends of it, up to
 * `DRAIN_BYTES`, is read and thrown away first, so it reads the 413), and the body itself is read
 * through a guard that holds it to the limit and to `BODY_TIMEOUT_SECONDS`.
 */
export const conventions = createMiddleware<AppEnv>(async (c, next) => {
  const config = loadConfig(c.env);
  c.set("config", config);
  const declared = Number(c.req.header("Content-Length"));
  if (declared > config.MAX_BODY_BYTES) {
    if (declared <= DRAIN_BYTES && c.req.raw.body)
      await drain(c.req.raw.body.getReader(), config.BODY_TIMEOUT_SECONDS * 1000);
    throw tooLarge(config.MAX_BODY_BYTES);
  }
  c.req.raw = guardedRequest(c.req.raw, {
    maxBytes: config.MAX_BODY_BYTES,
    timeoutMs: config.BODY_TIMEOUT_SECONDS * 1000,
  });
  await next();
});
