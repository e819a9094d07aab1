import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { codeForStatus, ERROR_CODES, PROBLEM_CONTENT_TYPE, problemType, type ErrorCode } from "../protocol/errors.js";
import type { Problem } from "../protocol/schemas.js";
import { ConfigError } from "./config.js";
import { isOpenAIPath, openAIError, openAIParam, type OpenAIErrorFields } from "./openai-errors.js";

export interface ApiErrorOptions {
  headers?: Record<string, string>;
  errors?: Problem["errors"];
  /** Extension members of the problem document, e.g. which limit was hit. */
  extra?: Record<string, unknown>;
  /** OpenAI's `type`, `code` or `param` where they differ from the code's defaults (openai-errors.ts). */
  openai?: OpenAIErrorFields;
}

/** Thrown anywhere in a request; `onError` turns it into a problem+json response. */
export class ApiError extends Error {
  constructor(
    readonly code: ErrorCode,
    readonly detail: string,
    readonly options: ApiErrorOptions = {},
  ) {
    super(detail);
  }
}

/**
 * The problem document of `error`. It also carries OpenAI's envelope, `error`, so that OpenAI's
 * SDKs show the detail: on the routes that stand in for OpenAI's API with OpenAI's own `type`,
 * `code` and `param` (what its clients switch on), elsewhere with Sextant's code in both.
 */
export function problemResponse(c: Context, error: ApiError): Response {
  const { status, title } = ERROR_CODES[error.code];
  const body: Problem & { error: { message: string; type: string; code: string | null } } = {
    type: problemType(error.code),
    title,
    status,
    detail: error.detail,
    instance: c.get("requestId"),
    code: error.code,
    ...(error.options.errors ? { errors: error.options.errors } : {}),
    ...error.options.extra,
    error: isOpenAIPath(c.req.path)
      ? openAIError(error.code, error.detail, { param: fieldParam(error.options.errors), ...error.options.openai })
      : { message: error.detail, type: error.code, code: error.code },
  };
  const response = c.json(body, status as ContentfulStatusCode, error.options.headers);
  response.headers.set("Content-Type", PROBLEM_CONTENT_TYPE);
  return response;
}

/** The first offending field of a validation failure (`messages.0.role`), as OpenAI's `param`. */
function fieldParam(errors: Problem["errors"]): string | null {
  const path = errors?.[0]?.path;
  if (!path || path.startsWith("(")) return null;
  return openAIParam(path.split(".").map((s) => (/^\d+$/.test(s) ? Number(s) : s)));
}

/** Maps anything thrown to a closed error code; unknown failures never leak their message. */
export function toApiError(err: unknown, requestId: string): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof HTTPException && err.status < 500) {
    const code = codeForStatus(err.status);
    return new ApiError(code, err.message || ERROR_CODES[code].title);
  }
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  console.error(JSON.stringify({ level: "error", requestId, message }));
  if (err instanceof ConfigError) {
    return new ApiError("internal", "The edge is misconfigured; its operator can see why in the logs.");
  }
  return new ApiError("internal", `Something went wrong on our side. Quote request id ${requestId} when reporting it.`);
}

/**
 * Hono hands `onError` only what is an `Error`: anything else thrown below this middleware (a bare
 * string, a promise rejected with a plain value) would reach the runtime, which answers a
 * text/plain 500 without the request id. Wrapped, it takes the one error path.
 */
export const thrownAsErrors = createMiddleware(async (_c, next) => {
  try {
    await next();
  } catch (err) {
    if (err instanceof Error) throw err;
    throw new Error(`A non-Error value was thrown (${typeof err})`, { cause: err });
  }
});
