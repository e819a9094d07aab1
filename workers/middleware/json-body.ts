import type { Context } from "hono";
import type { z } from "zod";
import { openAIParam } from "../openai-errors.js";
import { ApiError } from "../problem.js";

const JSON_TYPE = /^application\/(?:[\w.+-]+\+)?json\s*(?:;|$)/i;

/**
 * Strict: `c.req.text()` would turn bytes that are not UTF-8 into U+FFFD, and store a name the
 * sender never wrote.
 */
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/**
 * Reads and validates a JSON body. Each failure has its own code: wrong media type (415),
 * a body that is not UTF-8 or not JSON (400) and a schema violation (400, with every offending
 * field listed).
 */
export async function jsonBody<S extends z.ZodType>(
  c: Context,
  schema: S,
  /** A quick check that answers what the schema would for a body that plainly keeps to it, else undefined. */
  quick?: (value: unknown) => z.output<S> | undefined,
): Promise<z.output<S>> {
  const type = c.req.header("Content-Type") ?? "";
  if (!JSON_TYPE.test(type)) {
    throw new ApiError("unsupported_media_type", "Send the request body as `Content-Type: application/json`.");
  }
  const text = await bodyText(c);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ApiError("invalid_request", `The request body is not valid JSON: ${(err as Error).message}`);
  }
  return quick?.(value) ?? validated(schema, value, "body");
}

/** Validates a parsed body or query; a failure is a 400 that lists every offending field. */
export function validated<S extends z.ZodType>(schema: S, value: unknown, what: "body" | "query"): z.output<S> {
  const result = schema.safeParse(value);
  if (!result.success) {
    const errors = result.error.issues.map((issue) => ({
      path: issue.path.map(String).join(".") || `(${what})`,
      message: issue.message,
    }));
    const summary = errors.map((e) => `${e.path}: ${e.message}`).join("; ");
    const subject = what === "body" ? "The request body" : "The query";
    const first = result.error.issues[0]!;
    throw new ApiError("invalid_request", `${subject} is invalid: ${summary}`, {
      errors,
      openai: { code: openAICode(first, value), param: openAIParam(first.path) },
    });
  }
  return result.data;
}

/**
 * OpenAI's `code` for a field that fails validation: a field left out is
 * `missing_required_parameter`, one of the wrong JSON type `invalid_type`, an empty list where one
 * item is the least `empty_array`, and any other bad value `invalid_value`.
 */
function openAICode(issue: z.core.$ZodIssue, value: unknown): string {
  if (issue.code === "invalid_type") return present(value, issue.path) ? "invalid_type" : "missing_required_parameter";
  if (issue.code === "too_small" && issue.origin === "array" && Number(issue.minimum) === 1) return "empty_array";
  return "invalid_value";
}

function present(value: unknown, path: readonly PropertyKey[]): boolean {
  let at = value;
  for (const key of path) {
    if (typeof at !== "object" || at === null || !Object.hasOwn(at, key)) return false;
    at = (at as Record<PropertyKey, unknown>)[key];
  }
  return at !== undefined;
}

/** The request body as text: 400 when it is not UTF-8 (the body guard's own 413 and 408 stand). */
export async function bodyText(c: Context): Promise<string> {
  // Read outside the try: the body guard fails the read itself (413, 408), and that answer stands.
  const bytes = await c.req.arrayBuffer();
  try {
    return utf8.decode(bytes);
  } catch {
    throw new ApiError("invalid_request", "The request body is not valid UTF-8.");
  }
}
