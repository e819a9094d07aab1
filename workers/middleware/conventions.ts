import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../app-env.js";
import { loadConfig } from "../config.js";
import { MAX_ARCHIVE_BYTES } from "../../protocol/envs/api.js";
import { drain, DRAIN_BYTES, guardedRequest, tooLarge } from "./request-body.js";

/** A task archive is passed to the sandbox host as it streams in: its own cap, not a JSON body's. */
const ARCHIVE_PUT = /^\/v1\/envs\/archives\/[^/]+$/;

/**
 * Validates the environment (once per isolate) and bounds every route's request body: a declared
 * size over the limit is refused without being parsed (what the client still sends of it, up to
 * `DRAIN_BYTES`, is read and thrown away first, so it reads the 413), and the body itself is read
 * through a guard that holds it to the limit and to `BODY_TIMEOUT_SECONDS`.
 */
export const conventions = createMiddleware<AppEnv>(async (c, next) => {
  const config = loadConfig(c.env);
  c.set("config", config);
  const maxBytes = c.req.method === "PUT" && ARCHIVE_PUT.test(c.req.path) ? MAX_ARCHIVE_BYTES : config.MAX_BODY_BYTES;
  const declared = Number(c.req.header("Content-Length"));
  if (declared > maxBytes) {
    if (declared <= DRAIN_BYTES && c.req.raw.body)
      await drain(c.req.raw.body.getReader(), config.BODY_TIMEOUT_SECONDS * 1000);
    throw tooLarge(maxBytes);
  }
  c.req.raw = guardedRequest(c.req.raw, {
    maxBytes,
    timeoutMs: config.BODY_TIMEOUT_SECONDS * 1000,
  });
  await next();
});
