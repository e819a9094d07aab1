/**
 * One model request through the gateway: pick endpoints, fail over before the first token within
 * the retry budget and the deadline, hedge late tab requests, then relay the stream event by event
 * and end a broken one with an explicit error event, never a silent truncation.
 */
import type { PriorityClass } from "../../protocol/gateway.js";
import { ApiError } from "../problem.js";
import type { Balancer, Location } from "./balancer.js";
import type { Gateway, ResolvedEndpoint, ResolvedPool, Surface } from "./config.js";
import { foldPrediction, renderFim } from "./prompts.js";
import { SseReader, type SseItem } from "./sse.js";

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
  secrets: Record<string, string | undefined>;
  requestId: string;
  /** Called exactly once, when the request is over (after the last streamed byte). */
  finish(result: Finish): void;
  waitUntil(promise: Promise<unknown>): void;
  /** Below 1 while a pool ramps up after an outage: the share of capacity this caller may take. */
  capacityShare: number;
  /** Passive ejection: tells the shared health object, off the hot path. */
  eject(endpointId: string, until: number): void;
}

const PATHS: Record<Surface, string> = {
  completions: "/completions",
  chat: "/chat/completions",
  embeddings: "/embeddings",
};

/** Why an attempt failed, and whether another endpoint may be tried. */
interface Failure {
  ok: false;
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
  first: SseItem & { type: "event" };
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

/** A retry into an endpoint at most this loaded (its own request included) spends no budget. */
const IDLE_LOAD = 0.5;

/** The resolved endpoints of the request's pool. */
const peers = (req: ProxyRequest): ResolvedEndpoint[] =>
  req.pool.endpoints.map((e) => req.gateway.endpoints.get(e.id)!);
const ERROR_SNIPPET = 2_000;

function upstreamBody(req: ProxyRequest, endpoint: ResolvedEndpoint): Record<string, unknown> {
  let body: Record<string, unknown> = { ...req.body, model: endpoint.model ?? req.publicModel };
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

function failure(detail: string, options: Partial<Failure> = {}): Failure {
  return { ok: false, retryable: true, unhealthy: true, timeout: false, detail, ...options };
}

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
): Promise<Outcome> {
  const { timeouts } = req.pool;
  const remaining = () => Math.max(0, deadline - Date.now());
  const headers: Record<string, string> = {
    "Content-Type": "application/json",
    Accept: req.stream ? "text/event-stream" : "application/json",
    "X-Request-Id": req.requestId,
  };
  const secret = endpoint.secret ? req.secrets[endpoint.secret] : undefined;
  if (secret) headers.Authorization = `Bearer ${secret}`;
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
    response = await fetch(`${endpoint.url.replace(/\/+$/, "")}${PATHS[req.surface]}`, {
      method: "POST",
      headers,
      body: JSON.stringify(upstreamBody(req, endpoint)),
      signal: controller.signal,
    });
  } catch (err) {
    clearTimeout(timer);
    if (req.signal.aborted)
      return failure("the client went away", { aborted: true, retryable: false, unhealthy: false });
    if (timedOut) return failure(`${endpoint.id} sent no response headers within ${headersMs} ms`, { timeout: true });
    if (controller.signal.aborted) return failure("cancelled", { aborted: true, retryable: false, unhealthy: false });
    return failure(`${endpoint.id} could not be reached: ${err instanceof Error ? err.message : String(err)}`);
  }
  clearTimeout(timer);

  if (!response.ok) {
    const message = await errorMessage(response);
    const status = response.status;
    if (status === 400 || status === 422) return failure(message, { retryable: false, unhealthy: false, status });
    // 429 and 503 mean "full", not "broken": try elsewhere without counting towards ejection.
    const full = status === 429 || status === 503;
    return failure(`${endpoint.id} answered ${status}: ${message}`, { unhealthy: !full, full, status });
  }

  const firstByteMs = Math.min(timeouts.firstByteMs, remaining());
  if (req.stream) {
    if (!response.body) return failure(`${endpoint.id} sent an empty stream`);
    const reader = new SseReader(response.body);
    const first = await reader.next(firstByteMs);
    if (first.type === "event") {
      const error = eventError(first.data);
      if (error === undefined) return { ok: true, kind: "stream", reader, first };
      reader.cancel();
      return failure(`${endpoint.id} failed before its first token: ${error}`);
    }
    reader.cancel();
    if (req.signal.aborted)
      return failure("the client went away", { aborted: true, retryable: false, unhealthy: false });
    if (controller.signal.aborted) return failure("cancelled", { aborted: true, retryable: false, unhealthy: false });
    if (first.type === "timeout")
      return failure(`${endpoint.id} sent no token within ${firstByteMs} ms`, { timeout: true });
    if (first.type === "end") return failure(`${endpoint.id} ended the stream before its first token`);
    return failure(`${endpoint.id}: ${first.message}`);
  }

  let bodyTimer: ReturnType<typeof setTimeout> | undefined;
  const text = await Promise.race([
    response.text().catch(() => undefined),
    new Promise<"timeout">((resolve) => (bodyTimer = setTimeout(() => resolve("timeout"), firstByteMs))),
  ]);
  if (bodyTimer !== undefined) clearTimeout(bodyTimer);
  if (text === "timeout") {
    controller.abort(new Error("first byte timeout"));
    return failure(`${endpoint.id} did not answer within ${firstByteMs} ms`, { timeout: true });
  }
  if (text === undefined) {
    if (req.signal.aborted)
      return failure("the client went away", { aborted: true, retryable: false, unhealthy: false });
    if (controller.signal.aborted) return failure("cancelled", { aborted: true, retryable: false, unhealthy: false });
    return failure(`${endpoint.id} broke off its answer`);
  }
  try {
    const body = JSON.parse(text) as unknown;
    if (body && typeof body === "object" && !Array.isArray(body))
      return { ok: true, kind: "json", body: body as Record<string, unknown> };
  } catch {
    // Falls through.
  }
  return failure(`${endpoint.id} answered with something that is not a JSON object`);
}

/** The error an event carries (`{"error": …}`), `null` when malformed, undefined when fine. */
function eventError(data: string): string | undefined {
  try {
    const value = JSON.parse(data) as { error?: { message?: string } | string };
    if (value && typeof value === "object" && value.error)
      return typeof value.error === "string" ? value.error : (value.error.message ?? "the backend reported an error");
    return undefined;
  } catch {
    return "malformed event";
  }
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

export function errorEvent(code: "upstream_failure" | "upstream_timeout", message: string, requestId: string): string {
  return `event: error\ndata: ${JSON.stringify({ error: { message, type: code, code, request_id: requestId } })}\n\n`;
}

/**
 * Runs the request. Returns the response to send (a stream that is already past its first token,
 * or a JSON body), or throws an ApiError when no backend could answer.
 */
export async function proxy(req: ProxyRequest): Promise<Response> {
  const { balancer, pool } = req;
  const started = Date.now();
  const deadline = started + pool.timeouts.deadlineMs;
  const tried = new Set<string>();
  const running = new Set<Attempt>();
  let attempts = 0;
  let lastFailure: Failure | undefined;
  let hedged = false;
  let finished = false;
  const usage: Usage = { promptTokens: 0, completionTokens: 0 };
  const finish = (result: Finish) => {
    if (finished) return;
    finished = true;
    req.finish(result);
  };

  const end = (a: Attempt) => {
    running.delete(a);
    balancer.release(pool, a.endpoint);
  };

  const onClientAbort = () => {
    for (const a of running) a.controller.abort(new Error("client went away"));
  };
  req.signal.addEventListener("abort", onClientAbort, { once: true });

  /** Starts an attempt on the best endpoint with room; false when none can be had now. */
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
    running.add({ endpoint, controller, result: attempt(req, endpoint, controller, deadline) });
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
        if (until !== undefined) req.eject(endpoint.id, until);
      }
    }
    return undefined;
  };

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
        return respond(req, { a, outcome, release: () => end(a) }, usage, finish, resume);
      }
      end(a);
      lastFailure = outcome;
      if (outcome.full) balancer.full(a.endpoint, Date.now());
      if (outcome.unhealthy && !outcome.aborted) {
        const until = balancer.failed(a.endpoint, Date.now(), peers(req));
        if (until !== undefined) req.eject(a.endpoint.id, until);
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
    throw new ApiError(
      lastFailure.timeout ? "upstream_timeout" : "upstream_failure",
      `No backend of pool ${pool.name} answered (${attempts} attempt${attempts === 1 ? "" : "s"}): ${lastFailure.detail}`,
    );
  } catch (err) {
    finish({ outcome: req.signal.aborted ? "aborted" : "failed", usage });
    throw err;
  } finally {
    req.signal.removeEventListener("abort", onClientAbort);
  }
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
function relayEvent(req: ProxyRequest, data: string, usage: Usage, state: RelayState): string | null {
  const value = JSON.parse(data) as Record<string, unknown>;
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
  if (!req.includeUsage && "usage" in value) delete value.usage;
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

function respond(
  req: ProxyRequest,
  first: { a: Attempt; outcome: StreamWin | JsonWin; release: () => void },
  usage: Usage,
  finish: (result: Finish) => void,
  resume: (sent: string, tokens: number, failedOn: Attempt) => Promise<Leg | undefined>,
): Response {
  const headers = { "X-Sextant-Backend": first.a.endpoint.id, "X-Sextant-Region": first.a.endpoint.region };
  if (first.outcome.kind === "json") {
    const body = first.outcome.body;
    const reported = usageOf(body);
    if (reported) Object.assign(usage, reported);
    if ("model" in body) body.model = req.publicModel;
    first.release();
    finish({ outcome: "completed", usage, endpoint: first.a.endpoint.id });
    return Response.json(body, { headers });
  }

  let leg: Leg = { ...first, outcome: first.outcome };
  const state: RelayState = { text: "", events: 0, carried: 0 };
  let closed = false;
  const close = (result: Finish) => {
    if (closed) return;
    closed = true;
    leg.outcome.reader.cancel();
    leg.a.controller.abort(new Error("stream over"));
    if (!usage.completionTokens) usage.completionTokens = state.events;
    leg.release();
    finish(result);
  };
  const gapMs = req.pool.timeouts.gapMs;
  const deadline = Date.now() + req.pool.timeouts.deadlineMs;
  const onAbort = () => close({ outcome: "aborted", usage, endpoint: leg.a.endpoint.id });
  req.signal.addEventListener("abort", onAbort, { once: true });

  /** A leg broke after its first token: resume elsewhere (tab), or end with an explicit error event. */
  const broke = async (code: "upstream_failure" | "upstream_timeout", detail: string): Promise<boolean> => {
    const until = req.balancer.failed(leg.a.endpoint, Date.now(), peers(req));
    if (until !== undefined) req.eject(leg.a.endpoint.id, until);
    leg.outcome.reader.cancel();
    leg.a.controller.abort(new Error(detail));
    const failed = leg;
    const next = await resume(state.text, state.events, failed.a);
    failed.release();
    if (next && !closed) {
      leg = next;
      state.carried = state.events;
      const out = relayEvent(req, next.outcome.first.data, usage, state);
      if (out) await writer.write(encoder.encode(out));
      return true;
    }
    if (next) next.release();
    leg = { ...failed, release: () => {} };
    await writer.write(encoder.encode(errorEvent(code, `${detail} The stream is incomplete.`, req.requestId)));
    await writer.close();
    close({ outcome: "failed", usage, endpoint: failed.a.endpoint.id });
    return false;
  };

  // The relay runs as its own task (kept alive by waitUntil) writing into a TransformStream:
  // each event goes out as soon as it arrives, and a client that stops reading holds it back.
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const writer = writable.getWriter();
  const relay = async () => {
    const opening = relayEvent(req, leg.outcome.first.data, usage, state);
    if (opening) await writer.write(encoder.encode(opening));
    for (;;) {
      if (closed) return;
      let item = await leg.outcome.reader.next(Math.min(gapMs, Math.max(0, deadline - Date.now())));
      if (closed) return;
      let out = "";
      let problem: string | undefined;
      while (item.type === "event") {
        problem = eventError(item.data);
        if (problem !== undefined) break;
        out += relayEvent(req, item.data, usage, state) ?? "";
        const more = leg.outcome.reader.shift();
        if (!more) break;
        item = more;
      }
      if (out) await writer.write(encoder.encode(out));
      if (item.type === "event" && problem === undefined) continue;
      if (item.type === "end" && item.done) {
        await writer.write(encoder.encode("data: [DONE]\n\n"));
        await writer.close();
        req.balancer.succeeded(leg.a.endpoint);
        close({ outcome: "completed", usage, endpoint: leg.a.endpoint.id });
        return;
      }
      const [code, detail]: ["upstream_failure" | "upstream_timeout", string] =
        problem !== undefined
          ? ["upstream_failure", `The backend failed mid-stream: ${problem}.`]
          : item.type === "timeout"
            ? ["upstream_timeout", `The backend sent nothing for ${gapMs} ms.`]
            : item.type === "end"
              ? ["upstream_failure", "The backend ended the stream early."]
              : ["upstream_failure", `${(item as { message: string }).message}.`];
      if (!(await broke(code, detail))) return;
    }
  };
  req.waitUntil(
    relay().catch(() => {
      // The client went away: writes fail once nobody reads.
      onAbort();
      writer.abort().catch(() => {});
    }),
  );
  return new Response(readable, {
    headers: {
      ...headers,
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache",
      "X-Accel-Buffering": "no",
    },
  });
}
