/**
 * Errors as OpenAI's API words them, for the routes that stand in for it. OpenAI's clients (the
 * `openai` SDKs, editors built on them) switch on `error.type` and `error.code`: an unknown key
 * is `invalid_request_error`/`invalid_api_key`, an unknown model `model_not_found`, a rate limit
 * `rate_limit_exceeded` of type `requests` or `tokens`, a failure on the server's side
 * `server_error` with no code. Sextant's own code stays the problem document's `code`.
 */
import { ERROR_CODES, type ErrorCode } from "../protocol/errors.js";

/** OpenAI's error object: `{"error": {message, type, code, param}}`. */
export interface OpenAIError {
  message: string;
  type: string;
  code: string | null;
  param: string | null;
}

/** What a thrower knows better than the code's default: e.g. that the missing thing is a model. */
export type OpenAIErrorFields = Partial<Pick<OpenAIError, "type" | "code" | "param">>;

/** The paths OpenAI's API has, answered by the gateway (`gateway/routes.ts`), and any path below them. */
export const OPENAI_PATHS = [
  "/v1/models",
  "/v1/completions",
  "/v1/chat/completions",
  "/v1/responses",
  "/v1/embeddings",
];

export function isOpenAIPath(path: string): boolean {
  return OPENAI_PATHS.some((p) => path === p || path.startsWith(`${p}/`));
}

/**
 * OpenAI's type and code for each of Sextant's codes: by status, a client's error
 * (`invalid_request_error`) or the server's (`server_error`), with no code, except where OpenAI
 * names one.
 */
const NAMED: Partial<Record<ErrorCode, Pick<OpenAIError, "type" | "code">>> = {
  unauthenticated: { type: "invalid_request_error", code: "invalid_api_key" },
  rate_limited: { type: "requests", code: "rate_limit_exceeded" },
};
const defaultsFor = (code: ErrorCode): Pick<OpenAIError, "type" | "code"> =>
  NAMED[code] ?? { type: ERROR_CODES[code].status >= 500 ? "server_error" : "invalid_request_error", code: null };

export function openAIError(code: ErrorCode, message: string, fields: OpenAIErrorFields = {}): OpenAIError {
  const defaults = defaultsFor(code);
  return {
    message,
    type: fields.type ?? defaults.type,
    code: fields.code !== undefined ? fields.code : defaults.code,
    param: fields.param ?? null,
  };
}

/** A field's path as OpenAI names it in `param`: `messages[0].content`. */
export function openAIParam(path: readonly PropertyKey[]): string | null {
  let param = "";
  for (const segment of path)
    param += typeof segment === "number" ? `[${segment}]` : `${param ? "." : ""}${String(segment)}`;
  return param || null;
}
