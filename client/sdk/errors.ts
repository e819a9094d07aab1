import { codeForStatus, type ErrorCode } from "../../protocol/errors.js";
import type { Problem } from "../../protocol/schemas.js";
import { parseRateLimit, type RateLimitField } from "./rate-limit.js";

/** Base of every error the SDK throws. */
export class SextantError extends Error {
  override name = "SextantError";
}

/** The edge answered with a non-2xx status; `code` is one of the edge's closed set of codes. */
export class APIError extends SextantError {
  override name = "APIError";
  readonly requestId: string | undefined;

  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
    readonly problem: Problem | undefined,
    readonly headers: Headers,
  ) {
    super(message);
    this.requestId = problem?.instance ?? headers.get("X-Request-Id") ?? undefined;
  }

  /** Builds the subclass that matches the status, so callers can `instanceof` what they handle. */
  static from(status: number, problem: Problem | undefined, headers: Headers, fallback: string): APIError {
    const code = problem?.code ?? codeForStatus(status);
    const message = problem ? `${problem.title}: ${problem.detail ?? ""}`.replace(/: $/, "") : fallback;
    const Class = ERROR_CLASSES[status] ?? (status >= 500 ? InternalServerError : APIError);
    return new Class(status, code, message, problem, headers);
  }
}

export class BadRequestError extends APIError {
  override name = "BadRequestError";
}
export class AuthenticationError extends APIError {
  override name = "AuthenticationError";
}
export class PermissionDeniedError extends APIError {
  override name = "PermissionDeniedError";
}
export class NotFoundError extends APIError {
  override name = "NotFoundError";
}
export class ConflictError extends APIError {
  override name = "ConflictError";
}
export class PayloadTooLargeError extends APIError {
  override name = "PayloadTooLargeError";
}
export class RateLimitError extends APIError {
  override name = "RateLimitError";

  /** Seconds to wait, from `Retry-After`. */
  get retryAfterSeconds(): number | undefined {
    const value = Number(this.headers.get("Retry-After"));
    return Number.isFinite(value) && value >= 0 ? value : undefined;
  }

  /** The limit that was hit, from the `RateLimit` field: its policy name and when it resets. */
  get rateLimit(): RateLimitField | undefined {
    return parseRateLimit(this.headers);
  }
}
export class InternalServerError extends APIError {
  override name = "InternalServerError";
}

/** The edge could not be reached, or the connection broke before a response arrived. */
export class APIConnectionError extends SextantError {
  override name = "APIConnectionError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

export class APITimeoutError extends APIConnectionError {
  override name = "APITimeoutError";
}

/** The edge answered 2xx with a body that does not match the protocol: a version mismatch or a proxy in the way. */
export class InvalidResponseError extends SextantError {
  override name = "InvalidResponseError";
}

const ERROR_CLASSES: Record<number, typeof APIError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLargeError,
  415: BadRequestError,
  429: RateLimitError,
};
