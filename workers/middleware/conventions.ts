import { bodyLimit } from "hono/body-limit";
import { createMiddleware } from "hono/factory";
import type { MiddlewareHandler } from "hono";
import type { AppEnv } from "../app-env.js";
import { loadConfig, type Config } from "../config.js";
import { ApiError } from "../problem.js";

/** The body size limit, built once per configuration rather than on every request. */
const limits = new WeakMap<Config, MiddlewareHandler>();

function limitFor(config: Config): MiddlewareHandler {
  let limit = limits.get(config);
  if (!limit)
    limits.set(
      config,
      (limit = bodyLimit({
        maxSize: config.MAX_BODY_BYTES,
        onError: () => {
          throw new ApiError("payload_too_large", `Request bodies are limited to ${config.MAX_BODY_BYTES} bytes.`);
        },
      })),
    );
  return limit;
}

/** Validates the environment (once per isolate) and enforces the body size limit on every route. */
export const conventions = createMiddleware<AppEnv>(async (c, next) => {
  const config = loadConfig(c.env);
  c.set("config", config);
  return limitFor(config)(c, next);
});
