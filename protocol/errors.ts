/**
 * The closed set of error codes Sextant answers with, and the HTTP status of each.
 * Every non-2xx response is an RFC 9457 problem document whose `code` is one of these.
 */
export const ERROR_CODES = {
  invalid_request: {
    status: 400,
    title: "Invalid request",
    description: "The body, a parameter or a header is malformed or fails validation; `errors` lists each field.",
  },
  unauthenticated: {
    status: 401,
    title: "Authentication required",
    description: "No API key, or one that is malformed, unknown, revoked or expired.",
  },
  forbidden: {
    status: 403,
    title: "Forbidden",
    description: "The credentials are valid but do not allow this action.",
  },
  not_found: {
    status: 404,
    title: "Not found",
    description:
      "No such route, or no such resource in the caller's org (another org's resources are reported as missing).",
  },
  request_timeout: {
    status: 408,
    title: "Request timeout",
    description:
      "The request body did not arrive in full within `BODY_TIMEOUT_SECONDS` of the edge starting to read it.",
  },
  conflict: {
    status: 409,
    title: "Conflict",
    description: "The resource already exists, changed concurrently, or cannot take the change in its current state.",
  },
  payload_too_large: {
    status: 413,
    title: "Payload too large",
    description: "The request body exceeds the edge's limit (`MAX_BODY_BYTES`).",
  },
  unsupported_media_type: {
    status: 415,
    title: "Unsupported media type",
    description: "The body is not `application/json`.",
  },
  rate_limited: {
    status: 429,
    title: "Rate limited",
    description: "A rate limit or quota was hit; retry after `Retry-After` seconds; `limit` names the policy.",
  },
  internal: {
    status: 500,
    title: "Internal error",
    description: "An unexpected failure on the edge; quote the request id.",
  },
  upstream_failure: { status: 502, title: "Upstream failure", description: "A backend the edge depends on failed." },
  unavailable: {
    status: 503,
    title: "Service unavailable",
    description: "The edge is shedding load or a dependency is down; retry after `Retry-After`.",
  },
  upstream_timeout: { status: 504, title: "Upstream timeout", description: "A backend did not answer in time." },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

export const PROBLEM_CONTENT_TYPE = "application/problem+json";

/** The `type` URI of a problem; it resolves against the edge, which documents each code there. */
export function problemType(code: ErrorCode): string {
  return `/errors/${code}`;
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && Object.hasOwn(ERROR_CODES, value);
}

const CODE_BY_STATUS = new Map<number, ErrorCode>(
  Object.entries(ERROR_CODES).map(([code, { status }]) => [status, code as ErrorCode]),
);

/** The code for a bare status, for responses that did not carry a problem document. */
export function codeForStatus(status: number): ErrorCode {
  return CODE_BY_STATUS.get(status) ?? (status >= 500 ? "internal" : "invalid_request");
}
