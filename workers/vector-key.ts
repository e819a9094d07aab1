import type { Context } from "hono";
import { VECTOR_KEY_HEADER } from "../protocol/sync.js";
import { VectorKey } from "../protocol/vector-key.js";
import { BUILTIN_DIMS } from "../protocol/embedder/builtin.js";
import type { AppEnv } from "./app-env.js";
import { ApiError } from "./problem.js";

/**
 * The client's vector key, from its header. It lives only in this request's memory: never stored,
 * never logged, never passed to the Durable Object, which sees vectors already transformed.
 */
export function vectorKey(c: Context<AppEnv>): VectorKey {
  const value = c.req.header(VECTOR_KEY_HEADER);
  if (!value)
    throw new ApiError("invalid_request", `Send the workspace's vector key in the ${VECTOR_KEY_HEADER} header.`);
  if (!/^[A-Za-z0-9_-]{43}$/.test(value)) {
    throw new ApiError("invalid_request", `${VECTOR_KEY_HEADER} must be 32 bytes, base64url.`);
  }
  const bytes = Uint8Array.from(atob(value.replace(/-/g, "+").replace(/_/g, "/") + "="), (ch) => ch.charCodeAt(0));
  return new VectorKey(bytes, BUILTIN_DIMS);
}
