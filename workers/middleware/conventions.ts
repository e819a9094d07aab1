import { bodyLimit } from "hono/body-limit";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../app-env.js";
import { loadConfig } from "../config.js";
import { ApiError } from "../problem.js";

/** Validates the environment (once per isolate) and enforces the body size limit on every route. */
export const conventions = createMiddleware<AppEnv>(async (c, next) => {
  const config = loadConfig(c.env);
  c.set("config", config);
  return bodyLimit({
    maxSize: config.MAX_BODY_BYTES,
    onError: () => {
      throw new ApiError("payload_too_large", `Request bodies are limited to ${config.MAX_BODY_BYTES} bytes.`);
    },
  })(c, next);
});
