/**
 * One try against one endpoint, up to its first token (streams) or its whole answer: the request
 * as the backend's kind wants it, the connect and first-byte timeouts, and every way it can fail
 * as a `Failure` the decision (proxy.ts) can act on.
 */
import { anthropicStream, fromAnthropicMessage, toAnthropicRequest } from "./anthropic.js";
import { backendHeaders, type ResolvedEndpoint, type Surface } from "./config.js";
import {
  FULL_STATUSES,
  parseEvent,
  type Failure,
  type FailureReason,
  type Outcome,
  type ProxyRequest,
} from "./legs.js";
import { foldPrediction, renderFim } from "./prompts.js";
import { SseReader } from "./sse.js";

const PATHS: Record<Surface, string> = {
  completions: "/completions",
  chat: "/chat/completions",
  embeddings: "/embeddings",
};

const ERROR_SNIPPET = 2_000;

function upstreamBody(req: ProxyRequest, endpoint: ResolvedEndpoint): Record<string, unknown> {
  const model = endpoint.model ?? req.publicModel;
  if (endpoint.kind === "anthropic") {
    const body = "prediction" in req.body ? foldPrediction(req.body) : req.body;
    return toAnthropicRequest(body, model, req.stream, endpoint.promptCaching ?? true);
  }
  let body: Record<string, unknown> = { ...req.body, model };
  if (endpoint.kind !== "openai") {
    if (req.surface === "completions" && req.pool.fim) body = renderFim(body, req.pool.fim);
    if (req.surface === "chat" && "prediction" in body) body = foldPrediction(body);
  }
  if (req.stream) {
    const given = typeof body.stream_options === "object" && body.stream_options ? body.stream_options : {};
    body.stream_options = { ...given, include_usage: true };
  }
  return body;
}

export function failure(reason: FailureReason, detail: string, options: Partial<Failure> = {}): Failure {
  return { ok: false, reason, retryable: true, unhealthy: true, timeout: false, detail, ...options };
}

/** A failure as the logs show it: `status 500`, `connect-timeout`, … */
export const logged = (f: Failure) => (f.reason === "status" ? `status ${f.status}` : f.reason);

async function errorMessage(response: Response): Promise<string> {
  const text = (await response.text().catch(() => "")).slice(0, ERROR_SNIPPET);
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown; detail?: unknown };
    const message =
      typeof parsed.error === "object" ? parsed.error?.message : (parsed.error ?? parsed.message ?? parsed.detail);
    if (typeof message === "string" && message) return message;
  } catch {
    // Not JSON.
  }
  return text || response.statusText;
}

/** One try against one endpoint, up to its first token (streams) or its whole answer. */
export async function attempt(
  req: ProxyRequest,
  endpoint: ResolvedEndpoint,
  controller: AbortController,
  deadline: number,
  accepted: () => void = () => {},
): Promise<Outcome> {
  const { timeouts } = req.pool;
  const remaining = () => Math.max(0, deadline - Date.now());
  const headers: Record<string, string> = {
    "Content-Type": "application/json",
    Accept: req.stream ? "text/event-stream" : "application/json",
    "X-Request-Id": req.requestId,
  };
  Object.assign(headers, backendHeaders(endpoint.kind, endpoint.secret ? req.secrets[endpoint.secret] : undefined));
  const anthropic = endpoint.kind === "anthropic";
  // A stream's headers come at once (vLLM, SGLang, OpenAI); a whole answer's come with it.
  const headersMs = req.stream ? timeouts.connectMs : timeouts.connectMs + timeouts.firstByteMs;
  let timedOut: string | undefined;
  const timer = setTimeout(
    () => {
      timedOut = "connect";
      controller.abort(new Error("connect timeout"));
    },
    Math.min(headersMs, remaining()),
  );
  let response: Response;
  try {
    response = await fetch(`${endpoint.base}${anthropic ? "/messages" : PATHS[req.surface]}`, {
      method: "POST",
      headers,
      body: JSON.stringify(upstreamBody(req, endpoint)),
      signal: controller.signal,
    });
  } catch (err) {
    clearTimeout(timer);
    if (req.signal.aborted)
      return failure("cancelled", "the client went away", { aborted: true, retryable: false, unhealthy: false });
    if (timedOut)
      return failure("connect-timeout", `${endpoint.id} sent no response headers within ${headersMs} ms`, {
        timeout: true,
      });
    if (controller.signal.aborted)
      return failure("cancelled", "cancelled", { aborted: true, retryable: false, unhealthy: false });
    return failure(
      "unreachable",
      `${endpoint.id} could not be reached: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  clearTimeout(timer);

  if (!response.ok) {
    const message = await errorMessage(response);
    const status = response.status;
    if (status === 400 || status === 422)
      return failure("status", message, { retryable: false, unhealthy: false, status });
    // "Full", not "broken": try elsewhere without counting towards ejection.
    const full = FULL_STATUSES.has(status);
    return failure("status", `${endpoint.id} answered ${status}: ${message}`, { unhealthy: !full, full, status });
  }

  const firstByteMs = Math.min(timeouts.firstByteMs, remaining());
  if (req.stream) {
    if (!response.body) return failure("empty-stream", `${endpoint.id} sent an empty stream`);
    accepted();
    const reader = new SseReader(response.body, anthropic ? anthropicStream() : undefined);
    const first = await reader.next(firstByteMs);
    if (first.type === "event") {
      const parsed = parseEvent(first.data);
      if ("value" in parsed) return { ok: true, kind: "stream", reader, first: parsed.value };
      reader.cancel();
      // An overloaded backend is full, not broken: it does not count towards ejection.
      const full = parsed.overloaded ? { full: true, unhealthy: false } : {};
      return failure("error-event", `${endpoint.id} failed before its first token: ${parsed.error}`, full);
    }
    reader.cancel();
    if (req.signal.aborted)
      return failure("cancelled", "the client went away", { aborted: true, retryable: false, unhealthy: false });
    if (controller.signal.aborted)
      return failure("cancelled", "cancelled", { aborted: true, retryable: false, unhealthy: false });
    if (first.type === "timeout")
      return failure("first-token-timeout", `${endpoint.id} sent no token within ${firstByteMs} ms`, { timeout: true });
    if (first.type === "end") return failure("ended-early", `${endpoint.id} ended the stream before its first token`);
    return failure("broken-stream", `${endpoint.id}: ${first.message}`);
  }

  let bodyTimer: ReturnType<typeof setTimeout> | undefined;
  const text = await Promise.race([
    response.text().catch(() => undefined),
    new Promise<"timeout">((resolve) => (bodyTimer = setTimeout(() => resolve("timeout"), firstByteMs))),
  ]);
  if (bodyTimer !== undefined) clearTimeout(bodyTimer);
  if (text === "timeout") {
    controller.abort(new Error("first byte timeout"));
    return failure("answer-timeout", `${endpoint.id} did not answer within ${firstByteMs} ms`, { timeout: true });
  }
  if (text === undefined) {
    if (req.signal.aborted)
      return failure("cancelled", "the client went away", { aborted: true, retryable: false, unhealthy: false });
    if (controller.signal.aborted)
      return failure("cancelled", "cancelled", { aborted: true, retryable: false, unhealthy: false });
    return failure("broken-answer", `${endpoint.id} broke off its answer`);
  }
  try {
    const body = JSON.parse(text) as unknown;
    if (body && typeof body === "object" && !Array.isArray(body))
      return {
        ok: true,
        kind: "json",
        body: anthropic ? fromAnthropicMessage(body as Record<string, unknown>) : (body as Record<string, unknown>),
      };
  } catch {
    // Falls through.
  }
  return failure("not-json", `${endpoint.id} answered with something that is not a JSON object`);
}
