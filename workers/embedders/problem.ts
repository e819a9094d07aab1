import type { ErrorCode } from "../../protocol/errors.js";
import { ApiError } from "../problem.js";
import type { EmbeddingError, EmbeddingFailure } from "./embedder.js";

/**
 * Each embedding failure's problem code. A 429 from the service becomes 503 `unavailable`, not
 * 429 `rate_limited`: the caller hit no limit of its own (its plan's limits answer 429), a
 * dependency of the edge is shedding load, and `unavailable` says exactly that, with Retry-After.
 * A refused key or request is the edge's dependency failing the caller, so 502, like a 5xx.
 */
const CODES = {
  timeout: "upstream_timeout",
  rate_limited: "unavailable",
  unavailable: "upstream_failure",
  rejected: "upstream_failure",
  invalid_response: "upstream_failure",
  misconfigured: "internal",
} as const satisfies Record<EmbeddingFailure, ErrorCode>;

/** Retry-After for a rate-limited embedding, in seconds, when the service did not say. */
const DEFAULT_RETRY_AFTER = 10;
/** The Sextant client honours Retry-After up to this long. */
const MAX_RETRY_AFTER = 60;

/** The problem a failed embedding answers with; the failure is logged without texts or key. */
export function embeddingProblem(err: EmbeddingError, requestId: string, model: string): ApiError {
  console.error(
    JSON.stringify({
      level: "error",
      requestId,
      message: "embedding failed",
      failure: err.failure,
      model,
      ...(err.status !== undefined ? { status: err.status } : {}),
    }),
  );
  const code = CODES[err.failure];
  if (code !== "unavailable") return new ApiError(code, err.message);
  const wait = Math.min(MAX_RETRY_AFTER, Math.max(1, Math.ceil(err.retryAfterSeconds ?? DEFAULT_RETRY_AFTER)));
  return new ApiError(code, `${err.message} Retry after ${wait} s.`, { headers: { "Retry-After": String(wait) } });
}
