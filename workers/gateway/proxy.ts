/**
 * One model request through the gateway: pick endpoints, fail over before the first token within
 * the retry budget and the deadline, hedge late tab requests, then relay the stream event by event
 * and end a broken one with an explicit error event, never a silent truncation.
 */
import type { PriorityClass } from "../../protocol/gateway.js";
import { ApiError } from "../problem.js";
import { later } from "../later.js";
import type { Balancer, Location } from "./balancer.js";
import { anthropicCannotServe, anthropicStream, fromAnthropicMessage, toAnthropicRequest } from "./anthropic.js";
import { backendHeaders, type Gateway, type ResolvedEndpoint, type ResolvedPool, type Surface } from "./config.js";
import { foldPrediction, renderFim } from "./prompts.js";
import { SseReader } from "./sse.js";

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

export type Finish =
  | { outcome: "completed"; usage: Usage; endpoint: string }
  | { outcome: "aborted"; usage: Usage; endpoint?: string }
  | { outcome: "failed"; usage: Usage; endpoint?: string };

export interface ProxyRequest {
  gateway: Gateway;
  balancer: Balancer;
  pool: ResolvedPool;
  surface: Surface;
  body: Record<string, unknown>;
  publicModel: string;
  stream: boolean;
  includeUsage: boolean;
  cls: PriorityClass;
  from: Location;
  /** Aborts when the client goes away or a newer request of its session supersedes it. */
  signal: AbortSignal;
  /** Aborts `signal`: the client cancelled a stream that had already begun. */
  cancel(reason: Error): void;
  secrets: Record<string, string | undefined>;
  requestId: string;
  /** Called exactly once, when the request is over (after the last streamed byte). */
  finish(result: Finish): void;
  waitUntil(promise: Promise<unknown>): void;
  /** Below 1 while a pool ramps up after an outage: the share of capacity this caller may take. */
  capacityShare: number;
  /** Passive ejection: tells the shared health object, off the hot path. */
  eject(endpointId: string, until: number, reason: string): void;
  /** Writes one structured line to the Worker's log: endpoints, reasons and counts, never content. */
  log(message: string, fields: Record<string, unknown>): void;
}

const PATHS: Record<Surface, string> = {
  completions: "/completions",
  chat: "/chat/completions",
  embeddings: "/embeddings",
};

/** Why an attempt failed, and whether another endpoint may be tried. */
interface Failure {
  ok: false;
  /**
   * What went wrong, as a fixed word (`status` comes with the code): what the logs may say. The
   * `detail` can quote the backend, which may quote the prompt, so it goes to the client only.
   */
  reason: FailureReason;
  retryable: boolean;
  /** Counts towards the endpoint's passive ejection. */
  unhealthy: boolean;
  /** The backend said it is full (429/503): trying elsewhere costs no retry budget. */
  full?: boolean;
  timeout: boolean;
  detail: string;
  status?: number;
  aborted?: boolean;
}

interface StreamWin {
  ok: true;
  kind: "stream";
  reader: SseReader;
  /** The first event, parsed. */
  first: Record<string, unknown>;
}

interface JsonWin {
  ok: true;
  kind: "json";
  body: Record<string, unknown>;
}

type Outcome = Failure | StreamWin | JsonWin;

interface Attempt {
  endpoint: ResolvedEndpoint;
  controller: AbortController;
  result: Promise<Outcome>;
}

const encoder = new TextEncoder();

const HEARTBEAT = new TextEncoder().encode(":\n\n");

/** A retry into an endpoint at most this loaded (its own request included) spends no budget. */
const IDLE_LOAD = 0.5;

/** The resolved endpoints of the request's pool. */
const peers = (req: ProxyRequest): ResolvedEndpoint[] =>
  req.pool.endpoints.map((e) => req.gateway.endpoints.get(e.id)!);
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

type FailureReason =
  | "cancelled"
  | "connect-timeout"
  | "unreachable"
  | "status"
  | "empty-stream"
  | "error-event"
  | "first-token-timeout"
  | "ended-early"
  | "broken-stream"
  | "answer-timeout"
  | "broken-answer"
  | "not-json";

function failure(reason: FailureReason, detail: string, options: Partial<Failure> = {}): Failure {
  return { ok: false, reason, retryable: true, unhealthy: true, timeout: false, detail, ...options };
}

/** A failure as the logs show it: `status 500`, `connect-timeout`, … */
const logged = (f: Failure) => (f.reason === "status" ? `status ${f.status}` : f.reason);

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
async function attempt(
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

/** Statuses by which a backend says it is full rather than broken: 429, 503, and Anthropic's 529. */
const FULL_STATUSES = new Set<unknown>([429, 503, 529]);

/** Error types and codes by which a backend says, in an error event, that it is overloaded. */
const OVERLOADED = new Set<unknown>([
  "overloaded_error",
  "rate_limit_error",
  "RateLimitError",
  "ServiceUnavailableError",
  ...FULL_STATUSES,
]);

/**
 * An event's JSON, or the error it carries (`{"error": …}`, or a malformed event), and whether that
 * error says the backend is overloaded (full, not broken).
 */
function parseEvent(data: string): { value: Record<string, unknown> } | { error: string; overloaded: boolean } {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    return { error: "malformed event", overloaded: false };
  }
  if (!value || typeof value !== "object" || Array.isArray(value))
    return { error: "malformed event", overloaded: false };
  const error = (value as { error?: { message?: string; type?: unknown; code?: unknown } | string }).error;
  if (typeof error === "string") return { error, overloaded: false };
  if (error)
    return {
      error: error.message ?? "the backend reported an error",
      overloaded: OVERLOADED.has(error.type) || OVERLOADED.has(error.code),
    };
  return { value: value as Record<string, unknown> };
}

function usageOf(value: unknown): Usage | undefined {
  if (!value || typeof value !== "object") return undefined;
  const usage = (value as { usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } }).usage;
  if (!usage || typeof usage !== "object") return undefined;
  return {
    promptTokens: typeof usage.prompt_tokens === "number" ? usage.prompt_tokens : 0,
    completionTokens: typeof usage.completion_tokens === "number" ? usage.completion_tokens : 0,
  };
}

export function errorEvent(code: string, message: string, requestId: string): string {
  return `event: error\ndata: ${JSON.stringify({ error: { message, type: code, code, request_id: requestId } })}\n\n`;
}

/**
 * Runs the request. Returns the response to send, or throws an ApiError when no backend accepted
 * it. A stream's response starts as soon as a backend accepts the request (answers 200), so the
 * client's first token is not held behind the response's start; until that first token the edge
 * still fails over and hedges, unseen by the client, and a stream that no backend could serve ends
 * with one explicit `event: error`. A JSON answer is returned whole, from whichever backend gave it.
 */
export async function proxy(req: ProxyRequest): Promise<Response> {
  const { balancer, pool } = req;
  const started = Date.now();
  const deadline = started + pool.timeouts.deadlineMs;
  const tried = new Set<string>();
  const running = new Set<Attempt>();
  let attempts = 0;
  let lastFailure: Failure | undefined;
  /** Every attempt that failed before an answer, for the log line of a request none answered. */
  const failures: { endpoint: string; reason: string }[] = [];
  let hedged = false;
  let finished = false;
  const usage: Usage = { promptTokens: 0, completionTokens: 0 };
  const finish = (result: Finish) => {
    if (finished) return;
    finished = true;
    req.finish(result);
  };

  // Endpoints that cannot take this request at all (Anthropic's API has no logprobs, audio, …)
  // are passed over as if already tried; when that leaves none, the request is what is wrong.
  const unable = req.surface === "chat" ? pool.endpoints.filter((e) => e.kind === "anthropic") : [];
  const cannot = unable.length > 0 ? anthropicCannotServe(req.body) : undefined;
  if (cannot) {
    if (unable.length === pool.endpoints.length) {
      finish({ outcome: "failed", usage });
      throw new ApiError(
        "invalid_request",
        `Pool ${pool.name} is served by Anthropic's Messages API, which cannot take ${cannot}.`,
      );
    }
    for (const e of unable) tried.add(e.id);
  }

  const end = (a: Attempt) => {
    running.delete(a);
    balancer.release(pool, a.endpoint);
  };

  const onClientAbort = () => {
    for (const a of running) a.controller.abort(new Error("client went away"));
  };
  req.signal.addEventListener("abort", onClientAbort, { once: true });

  /** Starts an attempt on the best endpoint with room; false when none can be had now. */
  let accept: () => void = () => {};
  const accepted = new Promise<void>((resolve) => (accept = resolve));

  const launch = (retry: boolean, otherRegionThan?: string): boolean => {
    if (attempts >= pool.retries.maxAttempts || Date.now() >= deadline) return false;
    const now = Date.now();
    const candidates = balancer.candidates(pool, req.gateway.endpoints, req.from, now);
    const endpoint = balancer.acquire(pool, candidates, req.cls, now, tried, otherRegionThan, req.capacityShare);
    if (!endpoint) return false;
    // A retry into a mostly idle endpoint cannot overload it, and one after a "full" answer cost
    // the first backend nothing: neither spends the retry budget.
    const idle = balancer.load(endpoint, pool, req.cls, now) <= IDLE_LOAD;
    if (!retry) balancer.earnRetry(pool, now);
    else if (!lastFailure?.full && !idle && !balancer.takeRetry(pool, now)) {
      balancer.release(pool, endpoint);
      return false;
    }
    attempts++;
    tried.add(endpoint.id);
    const controller = new AbortController();
    running.add({ endpoint, controller, result: attempt(req, endpoint, controller, deadline, accept) });
    return true;
  };

  /**
   * Tab only: continues a completion that broke after its first token on another endpoint, from
   * the prompt plus the text already sent, so the client's stream goes on instead of ending.
   */
  const resume = async (sent: string, tokens: number, failedOn: Attempt): Promise<Leg | undefined> => {
    const body = continuation(req, sent, tokens);
    if (!body) return undefined;
    const resumed: ProxyRequest = { ...req, body };
    while (attempts < pool.retries.maxAttempts && Date.now() < deadline && !req.signal.aborted) {
      const now = Date.now();
      const candidates = balancer.candidates(pool, req.gateway.endpoints, req.from, now);
      const exclude = new Set([...tried, failedOn.endpoint.id]);
      const endpoint = balancer.acquire(pool, candidates, req.cls, now, exclude, undefined, req.capacityShare);
      if (!endpoint) return undefined;
      if (balancer.load(endpoint, pool, req.cls, now) > IDLE_LOAD && !balancer.takeRetry(pool)) {
        balancer.release(pool, endpoint);
        return undefined;
      }
      attempts++;
      tried.add(endpoint.id);
      const controller = new AbortController();
      const a: Attempt = { endpoint, controller, result: attempt(resumed, endpoint, controller, deadline) };
      const outcome = await a.result;
      if (outcome.ok && outcome.kind === "stream") return { a, outcome, release: () => end(a) };
      end(a);
      if (!outcome.ok && outcome.unhealthy && !outcome.aborted) {
        const until = balancer.failed(endpoint, Date.now(), peers(req));
        if (until !== undefined) req.eject(endpoint.id, until, logged(outcome));
      }
    }
    return undefined;
  };

  /** The attempt that answered first (its first token, or its whole answer). */
  const decide = async (): Promise<Win> => {
    try {
      // The first attempt; a tab request may wait briefly for a slot.
      while (!launch(false)) {
        const now = Date.now();
        const routable = balancer.candidates(pool, req.gateway.endpoints, req.from, now);
        if (routable.length === 0)
          throw new ApiError("unavailable", `No backend of pool ${pool.name} is healthy right now.`, {
            headers: { "Retry-After": String(Math.ceil(req.gateway.config.health.probeIntervalMs / 1000)) },
          });
        const wait = req.cls === "tab" ? req.gateway.config.tabQueueMs - (now - started) : 0;
        if (wait <= 0 || !(await balancer.waitForSlot(wait, req.signal))) {
          if (req.signal.aborted) throw new ApiError("unavailable", "The client went away.");
          throw new ApiError(
            "unavailable",
            `The ${req.cls} class is being shed: pool ${pool.name}'s backends are at the share of capacity it may use.`,
            { headers: { "Retry-After": "1" } },
          );
        }
      }

      for (;;) {
        if (running.size === 0) {
          const canRetry = lastFailure?.retryable !== false && !req.signal.aborted;
          if (!canRetry || !launch(true)) break;
        }
        const hedgeAt =
          pool.hedgeAfterMs !== undefined && !hedged && running.size === 1 ? started + pool.hedgeAfterMs : undefined;
        let hedgeTimer: ReturnType<typeof setTimeout> | undefined;
        const settled = await Promise.race([
          ...[...running].map((a) => a.result.then((outcome) => ({ a, outcome }))),
          ...(hedgeAt !== undefined
            ? [
                new Promise<"hedge">(
                  (resolve) => (hedgeTimer = setTimeout(() => resolve("hedge"), Math.max(0, hedgeAt - Date.now()))),
                ),
              ]
            : []),
        ]);
        if (hedgeTimer !== undefined) clearTimeout(hedgeTimer);
        if (settled === "hedge") {
          hedged = true;
          const [primary] = running;
          launch(true, primary!.endpoint.region) || launch(true);
          continue;
        }
        const { a, outcome } = settled;
        if (outcome.ok) {
          // The winner: cancel the rest and relay.
          running.delete(a);
          for (const other of running) {
            other.controller.abort(new Error("another attempt answered first"));
            void other.result.then(() => end(other));
          }
          running.clear();
          // A stream proves the endpoint healthy only when it completes.
          if (outcome.kind === "json") balancer.succeeded(a.endpoint);
          return { a, outcome, release: () => end(a) };
        }
        end(a);
        lastFailure = outcome;
        if (!outcome.aborted) failures.push({ endpoint: a.endpoint.id, reason: logged(outcome) });
        if (outcome.full) balancer.full(a.endpoint, Date.now());
        if (outcome.unhealthy && !outcome.aborted) {
          const until = balancer.failed(a.endpoint, Date.now(), peers(req));
          if (until !== undefined) req.eject(a.endpoint.id, until, logged(outcome));
        }
        if (outcome.aborted && req.signal.aborted) break;
        if (!outcome.retryable && running.size === 0) break;
      }

      // Nothing answered.
      for (const a of running) {
        a.controller.abort(new Error("giving up"));
        void a.result.then(() => end(a));
      }
      running.clear();
      if (req.signal.aborted) throw new ApiError("unavailable", "The request was cancelled.");
      if (lastFailure && !lastFailure.retryable && lastFailure.status)
        throw new ApiError("invalid_request", `The backend refused the request: ${lastFailure.detail}`);
      if (!lastFailure)
        throw new ApiError("unavailable", `No backend of pool ${pool.name} has room right now.`, {
          headers: { "Retry-After": "1" },
        });
      const code = lastFailure.timeout ? "upstream_timeout" : "upstream_failure";
      req.log("no backend answered", { pool: pool.name, code, attempts, failures });
      throw new ApiError(
        code,
        `No backend of pool ${pool.name} answered (${attempts} attempt${attempts === 1 ? "" : "s"}): ${lastFailure.detail}`,
      );
    } catch (err) {
      finish({ outcome: req.signal.aborted ? "aborted" : "failed", usage });
      throw err;
    } finally {
      req.signal.removeEventListener("abort", onClientAbort);
    }
  };

  const decided = decide();
  if (!req.stream) return answer(req, await decided, usage, finish);
  // Whichever comes first: a backend accepting the stream, or the decision (a refusal, typically).
  const refused = await Promise.race([
    decided.then(
      () => undefined,
      (error: unknown) => ({ error }),
    ),
    accepted.then(() => undefined),
  ]);
  if (refused) throw refused.error;
  return relay(req, decided, usage, finish, resume);
}

/** How a stream that broke after its first token is reported to the client, and to the logs. */
type BreakCode = "upstream_failure" | "upstream_timeout";
type BreakReason = "error-event" | "gap-timeout" | "ended-early" | "broken-stream";

/** The attempt that answered, and how to give its endpoint slot back. */
interface Win {
  a: Attempt;
  outcome: StreamWin | JsonWin;
  release: () => void;
}

/** A tab completion's body to continue after `sent` (the text already streamed, `tokens` events). */
function continuation(req: ProxyRequest, sent: string, tokens: number): Record<string, unknown> | undefined {
  if (req.surface !== "completions" || !sent) return undefined;
  const body = req.body;
  const prompt = Array.isArray(body.prompt) ? String(body.prompt[0] ?? "") : String(body.prompt ?? "");
  const max = typeof body.max_tokens === "number" ? body.max_tokens : undefined;
  if (max !== undefined && max - tokens < 1) return undefined;
  return { ...body, prompt: prompt + sent, ...(max !== undefined ? { max_tokens: max - tokens } : {}) };
}

/** One backend's part of a streamed answer. */
interface Leg {
  a: Attempt;
  outcome: StreamWin;
  release: () => void;
}

interface RelayState {
  /** The first event's id, kept on every event so a resumed stream looks like one. */
  id?: unknown;
  /** Completion text sent so far (tab), for a resume. */
  text: string;
  events: number;
  /** Completion tokens of earlier legs, added to a later leg's reported usage. */
  carried: number;
  /** Prompt tokens as the first leg would have reported them. */
  promptTokens?: number;
}

/** Rewrites an event for the client: the public model name, usage captured and maybe dropped. */
function relayEvent(req: ProxyRequest, value: Record<string, unknown>, usage: Usage, state: RelayState): string | null {
  const reported = usageOf(value);
  if (reported) {
    state.promptTokens ??= Math.max(0, reported.promptTokens - (state.carried > 0 ? state.carried : 0));
    usage.promptTokens = state.promptTokens;
    usage.completionTokens = reported.completionTokens + state.carried;
    if (value.usage && typeof value.usage === "object")
      value.usage = {
        ...value.usage,
        prompt_tokens: usage.promptTokens,
        completion_tokens: usage.completionTokens,
        total_tokens: usage.promptTokens + usage.completionTokens,
      };
  }
  if (Array.isArray(value.choices) && value.choices.length === 0 && reported && !req.includeUsage) return null;
  // Not `delete`: that turns the object into a slow dictionary, which JSON.stringify then walks
  // per event; a property set to undefined is left out of the JSON all the same.
  if (!req.includeUsage && "usage" in value) value.usage = undefined;
  if ("model" in value) value.model = req.publicModel;
  if ("id" in value) {
    state.id ??= value.id;
    value.id = state.id;
  }
  if (Array.isArray(value.choices))
    for (const choice of value.choices as { text?: unknown }[])
      if (typeof choice?.text === "string") state.text += choice.text;
  state.events++;
  return `data: ${JSON.stringify(value)}\n\n`;
}

/** A whole (non-streamed) answer, with the public model name and the backend that gave it. */
function answer(req: ProxyRequest, win: Win, usage: Usage, finish: (result: Finish) => void): Response {
  if (win.outcome.kind !== "json") throw new Error("a stream where a whole answer was expected");
  const body = win.outcome.body;
  const reported = usageOf(body);
  if (reported) Object.assign(usage, reported);
  if ("model" in body) body.model = req.publicModel;
  win.release();
  finish({ outcome: "completed", usage, endpoint: win.a.endpoint.id });
  return Response.json(body, {
    headers: { "X-Sextant-Backend": win.a.endpoint.id, "X-Sextant-Region": win.a.endpoint.region },
  });
}

/**
 * The streamed response, begun once a backend has accepted the request: it waits for the attempt
 * that wins (`winner`) and relays its events, or sends the error when none did.
 */
function relay(
  req: ProxyRequest,
  winner: Promise<Win>,
  usage: Usage,
  finish: (result: Finish) => void,
  resume: (sent: string, tokens: number, failedOn: Attempt) => Promise<Leg | undefined>,
): Response {
  // Settled by the first read; until then a refusal must not surface as an unhandled rejection.
  winner.catch(() => {});

  /** Which backend serves the stream, as an SSE comment (clients ignore comments). */
  const served = (endpoint: ResolvedEndpoint) => `: backend=${endpoint.id} region=${endpoint.region}\n\n`;
  let leg: Leg | undefined;
  const state: RelayState = { text: "", events: 0, carried: 0 };
  let closed = false;
  const close = (result: Finish) => {
    if (closed) return;
    closed = true;
    if (!leg) {
      // Still deciding: stop every attempt. A refusal is accounted by the decision itself; a win
      // that arrives anyway is given back here.
      req.cancel(new Error("client went away"));
      winner.then(
        (win) => {
          if (win.outcome.kind === "stream") win.outcome.reader.cancel();
          win.a.controller.abort(new Error("client went away"));
          win.release();
          finish({ outcome: "aborted", usage, endpoint: win.a.endpoint.id });
        },
        () => {},
      );
      return;
    }
    leg.outcome.reader.close(req.waitUntil);
    if (result.outcome !== "completed") leg.a.controller.abort(new Error("stream over"));
    if (!usage.completionTokens) usage.completionTokens = state.events;
    leg.release();
    finish(result);
  };
  /** Set once the backend's answer is whole; run after the client has been sent its end. */
  let completed: (() => void) | undefined;
  const gapMs = req.pool.timeouts.gapMs;
  const deadline = Date.now() + req.pool.timeouts.deadlineMs;
  const onAbort = () => close({ outcome: "aborted", usage, endpoint: leg?.a.endpoint.id });
  req.signal.addEventListener("abort", onAbort, { once: true });

  /** Waits for the attempt that wins, and sends its first token; or the error when none did. */
  const begin = async (send: (text: string) => void): Promise<boolean> => {
    let win: Win;
    try {
      win = await winner;
    } catch (err) {
      if (closed) return false;
      closed = true;
      const error = err instanceof ApiError ? err : undefined;
      send(errorEvent(error?.code ?? "upstream_failure", error?.detail ?? String(err), req.requestId));
      return false;
    }
    if (closed) return false;
    leg = { a: win.a, outcome: win.outcome as StreamWin, release: win.release };
    send(served(win.a.endpoint));
    const opening = relayEvent(req, leg.outcome.first, usage, state);
    if (opening) send(opening);
    return true;
  };

  /** A leg broke after its first token: resume elsewhere (tab), or end with an explicit error event. */
  const broke = async (
    code: BreakCode,
    reason: BreakReason,
    detail: string,
    emit: (text: string) => void,
    overloaded = false,
  ): Promise<boolean> => {
    const failed = leg!;
    if (overloaded) req.balancer.full(failed.a.endpoint, Date.now());
    else {
      const until = req.balancer.failed(failed.a.endpoint, Date.now(), peers(req));
      if (until !== undefined) req.eject(failed.a.endpoint.id, until, reason);
    }
    failed.outcome.reader.cancel();
    failed.a.controller.abort(new Error(detail));
    const next = await resume(state.text, state.events, failed.a);
    failed.release();
    req.log("stream broke", {
      pool: req.pool.name,
      endpoint: failed.a.endpoint.id,
      reason: overloaded ? "overloaded" : reason,
      events: state.events,
      resumedOn: next && !closed ? next.a.endpoint.id : null,
    });
    if (next && !closed) {
      leg = next;
      state.carried = state.events;
      emit(served(next.a.endpoint));
      const out = relayEvent(req, next.outcome.first, usage, state);
      if (out) emit(out);
      return true;
    }
    if (next) next.release();
    leg = { ...failed, release: () => {} };
    emit(errorEvent(code, `${detail} The stream is incomplete.`, req.requestId));
    close({ outcome: "failed", usage, endpoint: failed.a.endpoint.id });
    return false;
  };

  /**
   * Relays what the backend has sent since the last call: one batch of events, the end, or an
   * error event. False once the stream is over.
   */
  const step = async (send: (text: string) => void): Promise<boolean> => {
    let emitted = false;
    const emit = (text: string) => {
      emitted = true;
      send(text);
    };
    for (;;) {
      if (closed || !leg) return false;
      let item = await leg.outcome.reader.next(Math.min(gapMs, Math.max(0, deadline - Date.now())));
      if (closed) return false;
      const { a, outcome } = leg;
      let out = "";
      let problem: string | undefined;
      let overloaded = false;
      while (item.type === "event") {
        const parsed = parseEvent(item.data);
        if ("error" in parsed) {
          problem = parsed.error;
          overloaded = parsed.overloaded;
          break;
        }
        out += relayEvent(req, parsed.value, usage, state) ?? "";
        const more = outcome.reader.shift();
        if (!more) break;
        item = more;
      }
      // The backend's last events and its `[DONE]` usually come together: end in the same write.
      if (item.type === "event" && problem === undefined && outcome.reader.drainedToDone)
        item = { type: "end", done: true };
      if (out) emit(out);
      if (item.type === "event" && problem === undefined) {
        if (emitted) return true;
        continue;
      }
      if (item.type === "end" && item.done) {
        emit("data: [DONE]\n\n");
        // The answer is whole: its last bytes go out first, the bookkeeping after them.
        completed = () => {
          req.balancer.succeeded(a.endpoint);
          close({ outcome: "completed", usage, endpoint: a.endpoint.id });
        };
        return false;
      }
      const [code, reason, detail]: [BreakCode, BreakReason, string] =
        problem !== undefined
          ? ["upstream_failure", "error-event", `The backend failed mid-stream: ${problem}.`]
          : item.type === "timeout"
            ? ["upstream_timeout", "gap-timeout", `The backend sent nothing for ${gapMs} ms.`]
            : item.type === "end"
              ? ["upstream_failure", "ended-early", "The backend ended the stream early."]
              : ["upstream_failure", "broken-stream", `${(item as { message: string }).message}.`];
      if (!(await broke(code, reason, detail, emit, overloaded))) return false;
      if (emitted) return true;
    }
  };

  // The relay writes into a runtime-native stream that the response reads: each write waits until
  // the client has taken the bytes, so a client that stops reading holds the backend back, and
  // one that goes away fails the write (or the heartbeat's), which cancels the backend's request.
  // Writing from JavaScript into a native stream costs the runtime less per event than a
  // JavaScript stream that the response pulls from.
  const { readable, writable } = new IdentityTransformStream();
  const writer = writable.getWriter();
  // The heartbeat fires only after the pool's `heartbeatMs` of silence, so a stream that is
  // flowing never writes one. Writes only note the time; the one timer re-arms itself for the
  // rest of the silence when it finds a write since, instead of every write clearing and setting
  // a timer.
  const heartbeatMs = req.pool.heartbeatMs;
  let lastWrite = Date.now();
  let heartbeat: ReturnType<typeof setTimeout> | undefined;
  /** A write the client has not taken yet: it fails by itself if the client goes away. */
  let writing = false;
  const beat = () => {
    heartbeat = undefined;
    if (closed) return;
    const silent = Date.now() - lastWrite;
    if (silent >= heartbeatMs) {
      if (!writing) writer.write(HEARTBEAT).catch(onAbort);
      lastWrite = Date.now();
    }
    heartbeat = setTimeout(beat, Math.max(1, heartbeatMs - (Date.now() - lastWrite)));
  };
  const stopHeartbeat = () => {
    if (heartbeat !== undefined) clearTimeout(heartbeat);
    heartbeat = undefined;
  };
  heartbeat = setTimeout(beat, heartbeatMs);
  // A client that cancels the response errors the writable side, even with no write pending.
  writer.closed.catch(onAbort);

  const pump = async () => {
    let more = true;
    while (more) {
      let text = "";
      const send = (chunk: string) => void (text += chunk);
      try {
        more = leg ? await step(send) : await begin(send);
      } catch (err) {
        // Not expected: end the stream with an explicit error rather than a silent truncation.
        const detail = `The stream failed at the edge: ${err instanceof Error ? err.message : String(err)}.`;
        send(errorEvent("upstream_failure", detail, req.requestId));
        close({ outcome: "failed", usage, endpoint: leg?.a.endpoint.id });
        more = false;
      }
      if (!text) continue;
      lastWrite = Date.now();
      if (!more) {
        // The last bytes: the close is queued behind them (and fails if they do), so the end of
        // the body follows them at once instead of a round trip later.
        writer.write(encoder.encode(text)).catch(() => {});
        break;
      }
      writing = true;
      await writer.write(encoder.encode(text));
      writing = false;
    }
    stopHeartbeat();
    await writer.close();
    // The bookkeeping waits a turn, so that the end of the body leaves first.
    if (completed) await later();
    completed?.();
  };
  req.waitUntil(
    pump().catch(() => {
      // The client went away mid-write (if the answer was whole, it still counts as completed).
      stopHeartbeat();
      completed?.();
      onAbort();
    }),
  );
  return new Response(readable, {
    headers: {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache",
      "X-Accel-Buffering": "no",
    },
  });
}
