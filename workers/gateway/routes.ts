/**
 * The OpenAI-compatible surface: `/v1/completions` (tab), `/v1/chat/completions` (chat and apply),
 * `/v1/responses` (the same pools, translated: responses.ts), `/v1/embeddings` and `/v1/models`.
 * The official `openai` SDK works with `baseURL` set to the edge.
 */
import { Hono, type Context } from "hono";
import { createMiddleware } from "hono/factory";
import { PRIORITY_HEADER, SESSION_HEADER, type PriorityClass } from "../../protocol/gateway.js";
import type { AppEnv } from "../app-env.js";
import { requireApiKey } from "../middleware/auth.js";
import { jsonBody } from "../middleware/json-body.js";
import { ApiError } from "../problem.js";
import type { Location } from "./balancer.js";
import { poolClass, type Surface } from "./config.js";
import { enforceLimits } from "../limits/enforce.js";
import { tokenReserve } from "../../protocol/limits.js";
import { meter } from "./metering.js";
import { proxy, type Finish, type Trace } from "./proxy.js";
import { record } from "../lake/records.js";
import { fromChatCompletion, ResponsesRequest, toChatRequest } from "./responses.js";
import { responsesStream } from "./responses-stream.js";
import { ChatRequest, CompletionRequest, EmbeddingRequest, quickCompletionRequest } from "./requests.js";
import { gatewayRuntime, refreshHealth, reportEjection, supersede } from "./runtime.js";

function gatewayOr503(c: Context<AppEnv>) {
  const runtime = gatewayRuntime(c.env);
  if (!runtime)
    throw new ApiError(
      "unavailable",
      'No inference backends are configured on this edge: set GATEWAY_CONFIG or INFERENCE_UPSTREAM (docs/gateway.md, "Pointing it at real backends").',
    );
  refreshHealth(c.env, runtime.balancer, (p) => c.executionCtx.waitUntil(p));
  return runtime;
}

function location(c: Context<AppEnv>, fallback: Location): Location {
  const cf = c.req.raw.cf as { latitude?: string; longitude?: string } | undefined;
  const latitude = Number(cf?.latitude);
  const longitude = Number(cf?.longitude);
  if (cf?.latitude && cf.longitude && Number.isFinite(latitude) && Number.isFinite(longitude))
    return { latitude, longitude };
  return fallback;
}

async function handle(c: Context<AppEnv>, surface: Surface, body: Record<string, unknown> & { model: string }) {
  const { gateway, balancer } = gatewayOr503(c);
  const pool = gateway.poolFor(surface, body.model);
  if (!pool)
    throw new ApiError("not_found", `No model named ${body.model} is served here; GET /v1/models lists them.`, {
      openai: { code: "model_not_found" },
    });

  const background = c.req.header(PRIORITY_HEADER)?.toLowerCase() === "background";
  const cls: PriorityClass = background ? "background" : poolClass(pool.role);
  const { org, user, key } = c.get("principal");
  // Before any reservation: a background request waits here for room on the isolate's thread.
  if (cls !== "background") balancer.backgroundGate.interactive(Date.now());
  else
    await balancer.backgroundGate.admit(c.req.raw.signal).catch(() => {
      throw new ApiError("unavailable", "The client went away.");
    });
  const limits = await enforceLimits(c, pool.role, pool.role === "tab", tokenReserve(body, surface !== "embeddings"));
  const now = Date.now();
  const ramp = balancer.admitRamp(pool, user.id, org.plan !== "free", now);
  if (!ramp.ok) {
    limits.release();
    throw new ApiError(
      "unavailable",
      ramp.reason === "ramp"
        ? `Pool ${pool.name} is recovering from an outage and admits a growing share of users; retry shortly.`
        : `Every backend of pool ${pool.name} is down.`,
      { headers: { "Retry-After": String(ramp.retryAfterSeconds) } },
    );
  }
  if (!balancer.enterClass(cls)) {
    limits.release();
    throw new ApiError("rate_limited", `Too many ${cls} requests in flight on this edge; retry shortly.`, {
      headers: { "Retry-After": "1" },
    });
  }

  const controller = new AbortController();
  const clientSignal = c.req.raw.signal;
  const onClientAbort = () => controller.abort(new Error("client went away"));
  if (clientSignal.aborted) onClientAbort();
  else clientSignal.addEventListener("abort", onClientAbort, { once: true });
  const session = c.req.header(SESSION_HEADER);
  const leaveSession = cls === "tab" && session ? supersede(`${key.id}\0${session}`, controller) : () => {};
  const waitUntil = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);

  const stream = surface !== "embeddings" && body.stream === true;
  const finish = (result: Finish, trace: Trace) => {
    balancer.leaveClass(cls);
    limits.chargeTokens(result.usage.promptTokens + result.usage.completionTokens);
    limits.release();
    leaveSession();
    clientSignal.removeEventListener("abort", onClientAbort);
    const { promptTokens, completionTokens } = result.usage;
    if (promptTokens > 0 || completionTokens > 0)
      meter(c.env, waitUntil, {
        orgId: org.id,
        userId: user.id,
        keyId: key.id,
        model: body.model,
        promptTokens,
        completionTokens,
        at: Date.now(),
      });
    const now = Date.now();
    // The pool's own entry: an endpoint several pools share serves each its own model.
    const endpoint = result.endpoint ? pool.endpoints.find((e) => e.id === result.endpoint) : undefined;
    record(c.env, waitUntil, "edge_requests", {
      request_id: c.get("requestId"),
      at: now,
      started_at: trace.startedAt,
      org_id: org.id,
      user_id: user.id,
      key_id: key.id,
      surface,
      pool: pool.name,
      class: cls,
      model: body.model,
      served_model: endpoint ? (endpoint.model ?? body.model) : null,
      checkpoint: endpoint?.checkpoint ?? null,
      endpoint: endpoint?.id ?? null,
      region: endpoint?.region ?? null,
      ttft_ms: trace.firstTokenAt !== undefined ? trace.firstTokenAt - trace.startedAt : null,
      total_ms: now - trace.startedAt,
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      attempts: trace.attempts,
      // Attempts past the first that a failure caused (a hedge is a second attempt by design).
      failovers: Math.max(0, trace.attempts - 1 - (trace.hedged ? 1 : 0)),
      hedged: trace.hedged,
      outcome: result.outcome,
    });
  };

  /** What went wrong with the backends, for operators: ids, reasons and counts, never a prompt or an answer. */
  const log = (message: string, fields: Record<string, unknown>) =>
    console.error(JSON.stringify({ level: "warn", message, requestId: c.get("requestId"), ...fields }));

  const response = await proxy({
    gateway,
    balancer,
    pool,
    surface,
    body,
    publicModel: body.model,
    stream,
    includeUsage: Boolean((body.stream_options as { include_usage?: boolean } | null | undefined)?.include_usage),
    cls,
    // `request.cf` is decoded on every read: only a pool spread over places needs it.
    from: pool.spread ? location(c, gateway.config.defaultLocation) : gateway.config.defaultLocation,
    signal: controller.signal,
    cancel: (reason) => controller.abort(reason),
    secrets: c.env as unknown as Record<string, string | undefined>,
    requestId: c.get("requestId"),
    finish,
    waitUntil,
    capacityShare: ramp.capacityShare,
    eject: (id, until, reason) => {
      log("endpoint ejected", { endpoint: id, until: new Date(until).toISOString(), reason });
      reportEjection(c.env, id, until, waitUntil);
    },
    log,
  });
  for (const [name, value] of Object.entries(limits.headers)) response.headers.set(name, value);
  return response;
}

/**
 * A Responses API request, answered by the chat pools: translated into a chat completion request
 * that takes `handle`'s whole path, and its answer (whole, or streamed) translated back.
 */
async function respond(c: Context<AppEnv>, request: ResponsesRequest): Promise<Response> {
  const answer = await handle(c, "chat", toChatRequest(request));
  const headers = new Headers(answer.headers);
  if (request.stream) return new Response(responsesStream(answer.body!, request), { headers });
  headers.delete("Content-Length");
  return Response.json(fromChatCompletion(await answer.json(), request), { headers });
}

/**
 * Starts reading the body while the key is checked, so that the two waits overlap; `jsonBody`
 * takes the same read (Hono keeps it), and the body-size limit applies to it as to any read. A
 * request refused before `jsonBody` drops the read unawaited. Bytes, not text: a text read would
 * already have replaced what is not UTF-8, which `jsonBody` refuses.
 */
const readAhead = createMiddleware<AppEnv>(async (c, next) => {
  c.req.arrayBuffer().catch(() => {});
  await next();
});

export const gateway = new Hono<AppEnv>()
  .get("/models", requireApiKey, (c) => {
    const { gateway } = gatewayOr503(c);
    return c.json({
      object: "list",
      data: gateway.models().map((m) => ({ id: m.id, object: "model", created: 0, owned_by: "sextant", role: m.role })),
    });
  })
  .post("/completions", readAhead, requireApiKey, async (c) =>
    handle(c, "completions", await jsonBody(c, CompletionRequest, quickCompletionRequest)),
  )
  .post("/chat/completions", readAhead, requireApiKey, async (c) => handle(c, "chat", await jsonBody(c, ChatRequest)))
  .post("/responses", readAhead, requireApiKey, async (c) => respond(c, await jsonBody(c, ResponsesRequest)))
  .post("/embeddings", readAhead, requireApiKey, async (c) =>
    handle(c, "embeddings", await jsonBody(c, EmbeddingRequest)),
  );
