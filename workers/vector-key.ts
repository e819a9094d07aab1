import type { Context } from "hono";
import { VECTOR_KEY_HEADER } from "../protocol/sync.js";
import { fromBase64url } from "../protocol/base64.js";
import { TermKey } from "../protocol/keyed-terms.js";
import { VectorKey } from "../protocol/vector-key.js";
import type { AppEnv } from "./app-env.js";
import { ApiError } from "./problem.js";

/**
 * The client's vector key, from its header, or 400. Read before any embedding, so a request that
 * would be refused spends nothing. It lives only in this request's memory: never stored, never
 * logged, never passed to the Durable Object, which sees vectors already transformed and terms
 * already keyed.
 */
export function vectorKeyBytes(c: Context<AppEnv>): Uint8Array {
  const value = c.req.header(VECTOR_KEY_HEADER);
  if (!value)
    throw new ApiError("invalid_request", `Send the workspace's vector key in the ${VECTOR_KEY_HEADER} header.`);
  if (!/^[A-Za-z0-9_-]{43}$/.test(value)) {
    throw new ApiError("invalid_request", `${VECTOR_KEY_HEADER} must be 32 bytes, base64url.`);
  }
  return fromBase64url(value);
}

/**
 * The rotation for the embedder's `dims` (the rotation is derived per size, so the same key
 * rotates a 512- and a 2048-dimensional index differently) and the term key.
 */
export function vectorKey(bytes: Uint8Array, dims: number): { rotation: VectorKey; terms: TermKey } {
  return { rotation: new VectorKey(bytes, dims), terms: new TermKey(bytes) };
}
