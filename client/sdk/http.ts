import type { z } from "zod";
import { PROBLEM_CONTENT_TYPE } from "../../protocol/errors.js";
import { Problem } from "../../protocol/schemas.js";
import { sleep } from "../../protocol/sleep.js";
import { VERSION } from "../../protocol/version.js";
import { APIConnectionError, APIError, APITimeoutError, InvalidResponseError } from "./errors.js";
import { parseRateLimit } from "./rate-limit.js";

export interface HttpClientOptions {
  baseURL: string;
  /** Sent as `Authorization: Bearer …`; an API key or, for the admin client, the admin secret. */
  token: string | undefined;
  /** Milliseconds per attempt. */
  timeout: number;
  maxRetries: number;
  fetch: typeof fetch;
  defaultHeaders?: Record<string, string>;
}

export interface RequestOptions<S extends z.ZodType> {
  method: "GET" | "POST" | "PATCH" | "PUT" | "DELETE";
  path: string;
  query?: Record<string, string | undefined>;
  /** Sent as JSON; bytes are sent as they are (with `headers`' Content-Type, else application/octet-stream). */
  body?: unknown;
  /** Validates a 2xx body; omit for responses without one. */
  schema?: S;
  signal?: AbortSignal;
  /** Overrides the method's default: only idempotent requests are retried after a possible partial effect. */
  idempotent?: boolean;
  headers?: Record<string, string>;
  /** `bytes`: the 2xx body as it came (a file), not JSON; `schema` is then ignored. */
  responseType?: "json" | "bytes";
}

const IDEMPOTENT = new Set(["GET", "PUT", "DELETE"]);
/** Statuses that mean "nothing happened, try again": safe to retry for any method. */
const RETRY_ANY = new Set([408, 429, 503]);
/** Statuses where the request may have had an effect: retried only when idempotent. */
const RETRY_IDEMPOTENT = new Set([500, 502, 504]);
const MAX_RETRY_AFTER_MS = 60_000;

/** The transport under the SDK: timeouts, retries with backoff that honour `Retry-After`, typed errors. */
export class HttpClient {
  constructor(readonly options: HttpClientOptions) {}

  async request<S extends z.ZodType>(req: RequestOptions<S>): Promise<z.output<S>> {
    const url = new URL(req.path.replace(/^\//, ""), this.options.baseURL.replace(/\/?$/, "/"));
    for (const [k, v] of Object.entries(req.query ?? {})) if (v !== undefined) url.searchParams.set(k, v);
    const idempotent = req.idempotent ?? IDEMPOTENT.has(req.method);
    // One id for every attempt, so the edge's logs tie the retries together.
    const requestId = `sdk-${crypto.randomUUID()}`;

    for (let attempt = 0; ; attempt++) {
      const canRetry = attempt < this.options.maxRetries;
      let response: Response;
      try {
        response = await this.#attempt(url, req, requestId);
      } catch (err) {
        if (req.signal?.aborted) throw err;
        if (canRetry && idempotent) {
          await sleep(backoff(attempt), req.signal);
          continue;
        }
        throw err;
      }
      if (response.ok)
        return req.responseType === "bytes"
          ? (new Uint8Array(await response.arrayBuffer()) as z.output<S>)
          : this.#parse(response, req.schema);
      const retryable = RETRY_ANY.has(response.status) || (idempotent && RETRY_IDEMPOTENT.has(response.status));
      if (canRetry && retryable) {
        await response.body?.cancel();
        await sleep(retryDelay(response.headers, attempt), req.signal);
        continue;
      }
      throw await toApiError(response);
    }
  }

  async #attempt(url: URL, req: RequestOptions<z.ZodType>, requestId: string): Promise<Response> {
    const timeout = AbortSignal.timeout(this.options.timeout);
    const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
    const headers: Record<string, string> = {
      Accept: "application/json",
      "User-Agent": `sextant-sdk/${VERSION}`,
      "X-Request-Id": requestId,
      ...this.options.defaultHeaders,
      ...req.headers,
    };
    if (this.options.token) headers.Authorization = `Bearer ${this.options.token}`;
    const raw = req.body instanceof Uint8Array;
    if (req.body !== undefined && !req.headers?.["Content-Type"])
      headers["Content-Type"] = raw ? "application/octet-stream" : "application/json";
    try {
      return await this.options.fetch(url, {
        method: req.method,
        headers,
        body:
          req.body === undefined ? undefined : raw ? (req.body as Uint8Array<ArrayBuffer>) : JSON.stringify(req.body),
        signal,
      });
    } catch (err) {
      if (req.signal?.aborted) throw err;
      if (timeout.aborted)
        throw new APITimeoutError(`Request to ${url.origin} timed out after ${this.options.timeout} ms.`);
      throw new APIConnectionError(`Could not reach the Sextant edge at ${url.origin}: ${describe(err)}`, {
        cause: err,
      });
    }
  }

  async #parse<S extends z.ZodType>(response: Response, schema: S | undefined): Promise<z.output<S>> {
    if (!schema) {
      await response.body?.cancel();
      return undefined as z.output<S>;
    }
    const text = await response.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new InvalidResponseError(`The edge answered ${response.status} with a body that is not JSON.`);
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) {
      throw new InvalidResponseError(
        `The edge's response does not match this client's protocol: ${parsed.error.message}`,
      );
    }
    return parsed.data;
  }
}

/** A non-2xx response as the typed error its status and problem document say. */
export async function toApiError(response: Response): Promise<APIError> {
  const text = await response.text().catch(() => "");
  let problem: Problem | undefined;
  const type = response.headers.get("Content-Type") ?? "";
  if (type.startsWith(PROBLEM_CONTENT_TYPE) || type.startsWith("application/json")) {
    try {
      const parsed = Problem.safeParse(JSON.parse(text));
      if (parsed.success) problem = parsed.data;
    } catch {
      // Not a problem document: fall through to the status line.
    }
  }
  const fallback = `HTTP ${response.status}${text ? `: ${text.slice(0, 200)}` : ""}`;
  return APIError.from(response.status, problem, response.headers, fallback);
}

/**
 * `Retry-After` in seconds or as an HTTP date, capped; else an exhausted `RateLimit` field's reset
 * time; otherwise exponential backoff.
 */
export function retryDelay(headers: Headers, attempt: number, now = Date.now()): number {
  const value = headers.get("Retry-After");
  if (value) {
    const seconds = Number(value);
    const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(value) - now;
    if (Number.isFinite(ms) && ms >= 0 && ms <= MAX_RETRY_AFTER_MS) return ms;
  }
  const limit = parseRateLimit(headers);
  if (limit && limit.remaining === 0 && limit.resetSeconds * 1000 <= MAX_RETRY_AFTER_MS)
    return limit.resetSeconds * 1000;
  return backoff(attempt);
}

/** 0.5 s, 1 s, 2 s … capped at 8 s, with up to 25% jitter so retrying clients spread out. */
export function backoff(attempt: number): number {
  const base = Math.min(500 * 2 ** attempt, 8000);
  return base * (1 - Math.random() * 0.25);
}

/** An error's message with its cause's, for a message that says why a connection failed. */
export function describe(err: unknown): string {
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
    return `${err.message}${cause}`;
  }
  return String(err);
}
