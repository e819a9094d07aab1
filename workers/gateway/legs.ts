/**
 * What the gateway's decision (proxy.ts) and its stream relay (relay.ts) share: the request, the
 * attempt that won, and how a backend's events are read and reported.
 */
import type { Balancer, Location } from "./balancer.js";
import type { Gateway, ResolvedEndpoint, ResolvedPool, Surface } from "./config.js";
import type { PriorityClass } from "../../protocol/gateway.js";
import type { SseReader } from "./sse.js";
import type { ErrorCode } from "../../protocol/errors.js";
import { openAIError } from "../openai-errors.js";

export interface Usage {
  promptTokens: number;
  completionTokens: number;
}

export type Finish =
  | { outcome: "completed"; usage: Usage; endpoint: string }
  | { outcome: "aborted"; usage: Usage; endpoint?: string }
  | { outcome: "failed"; usage: Usage; endpoint?: string };

/** How the request went, for the edge's own record of it (the lake's `edge_requests`). */
export interface Trace {
  startedAt: number;
  /** When the winning attempt had its first token (a stream) or its whole answer. */
  firstTokenAt?: number;
  attempts: number;
  hedged: boolean;
}

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
  finish(result: Finish, trace: Trace): void;
  waitUntil(promise: Promise<unknown>): void;
  /** Below 1 while a pool ramps up after an outage: the share of capacity this caller may take. */
  capacityShare: number;
  /** Passive ejection: tells the shared health object, off the hot path. */
  eject(endpointId: string, until: number, reason: string): void;
  /** Writes one structured line to the Worker's log: endpoints, reasons and counts, never content. */
  log(message: string, fields: Record<string, unknown>): void;
}

export interface StreamWin {
  ok: true;
  kind: "stream";
  reader: SseReader;
  /** The first event, parsed. */
  first: Record<string, unknown>;
}

export interface JsonWin {
  ok: true;
  kind: "json";
  body: Record<string, unknown>;
}

/** Why an attempt failed: see proxy.ts. */
export interface Failure {
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

export type FailureReason =
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

export type Outcome = Failure | StreamWin | JsonWin;

export interface Attempt {
  endpoint: ResolvedEndpoint;
  controller: AbortController;
  result: Promise<Outcome>;
}

/** The resolved endpoints of the request's pool. */
export const peers = (req: ProxyRequest): ResolvedEndpoint[] => req.pool.endpoints;

/** Statuses by which a backend says it is full rather than broken: 429, 503, and Anthropic's 529. */
export const FULL_STATUSES = new Set<unknown>([429, 503, 529]);

/** Error types and codes by which a backend says, in an error event, that it is overloaded. */
export const OVERLOADED = new Set<unknown>([
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
export function parseEvent(data: string): { value: Record<string, unknown> } | { error: string; overloaded: boolean } {
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

/**
 * The one event that ends a stream that broke: like a problem document, Sextant's code beside
 * OpenAI's envelope with OpenAI's values (`server_error`), which the `openai` SDK raises.
 */
export function errorEvent(code: ErrorCode, message: string, requestId: string): string {
  const data = { code, error: { ...openAIError(code, message), request_id: requestId } };
  return `event: error\ndata: ${JSON.stringify(data)}\n\n`;
}

/** The attempt that answered, and how to give its endpoint slot back. */
export interface Win {
  a: Attempt;
  outcome: StreamWin | JsonWin;
  release: () => void;
}

/** One backend's part of a streamed answer. */
export interface Leg {
  a: Attempt;
  outcome: StreamWin;
  release: () => void;
}

/** Resumes a tab completion that broke after its first token, on another endpoint. */
export type Resume = (sent: string, tokens: number, failedOn: Attempt) => Promise<Leg | undefined>;

/** A tab completion's body to continue after `sent` (the text already streamed, `tokens` events). */
export function continuation(req: ProxyRequest, sent: string, tokens: number): Record<string, unknown> | undefined {
  if (req.surface !== "completions" || !sent) return undefined;
  const body = req.body;
  const prompt = Array.isArray(body.prompt) ? String(body.prompt[0] ?? "") : String(body.prompt ?? "");
  const max = typeof body.max_tokens === "number" ? body.max_tokens : undefined;
  if (max !== undefined && max - tokens < 1) return undefined;
  return { ...body, prompt: prompt + sent, ...(max !== undefined ? { max_tokens: max - tokens } : {}) };
}
