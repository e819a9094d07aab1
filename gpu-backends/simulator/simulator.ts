/**
 * A SIMULATED OpenAI-compatible GPU backend (a stand-in for vLLM or SGLang servers, which cannot run
 * here), for tests, benchmarks and `npm start`. Nothing it returns comes from a model: tokens read
 * "sim0 ", "sim1 ", …, embeddings are hashes, every response carries `X-Simulator: sextant` and
 * `system_fingerprint: "sextant-simulator"`.
 *
 * It speaks the HTTP protocol closely enough for the official `openai` SDK: completions and chat
 * (streamed as server-sent events or whole; chat with `n` choices and tool calls, chat-format.ts),
 * embeddings (float or base64), models, vLLM's `/health` and `/metrics`, the
 * `{ error: { message, type, param, code } }` envelope. With `kind: "anthropic"`
 * it is instead a stand-in for Anthropic's Messages API, closely enough for the official
 * `@anthropic-ai/sdk`: `POST /v1/messages` (whole, or streamed as typed events), `GET /v1/models`,
 * `x-api-key`, the `{ type: "error", error: { type, message } }` envelope and 529 when overloaded. Timing follows a simple
 * GPU model: time to first token, a token rate, full speed up to `capacity` requests, slower up to
 * `maxConcurrency`, 503 beyond. Faults (refused connections, error statuses, hangs, broken streams,
 * slow drips, failing health) are set per backend and changed at run time.
 */
import { createHash, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import {
  AgentScript,
  AgentScriptsBody,
  DEFAULT_UNSCRIPTED_ADVICE,
  scriptedFormat,
  scriptedTokens,
  scriptedTurn,
  unscriptedRefusal,
} from "./agent-script.js";
import { ChatAnswerFields, chatFormat, type Format } from "./chat-format.js";
import { answerFields, logprobRequest, withLogprobs } from "./logprobs.js";
import { TokenSchedule } from "./token-schedule.js";

const HOST = "127.0.0.1";
const FINGERPRINT = "sextant-simulator";

const rate = z.number().min(0).max(1).optional();

/** What goes wrong, and for which share of requests (`rate`; `/health` and `refuse` ignore it). */
export const Fault = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("none"), rate }),
  /** The port stops listening and open connections drop; clearing the fault listens again on the same port. */
  z.strictObject({ type: z.literal("refuse"), rate }),
  /** Answers with this status and an OpenAI error envelope. */
  z.strictObject({ type: z.literal("status"), status: z.number().int().min(400).max(599), rate }),
  /** Never sends headers; the request stays open until the client goes away. */
  z.strictObject({ type: z.literal("hangBeforeHeaders"), rate }),
  /** Streams `afterTokens` tokens, then nothing, forever (a whole response hangs before headers). */
  z.strictObject({ type: z.literal("hangMidStream"), afterTokens: z.number().int().min(0), rate }),
  /** Streams `afterTokens` tokens, then an event of broken JSON, waits a second and ends without `[DONE]`. */
  z.strictObject({ type: z.literal("malformedSse"), afterTokens: z.number().int().min(0), rate }),
  /**
   * Streams `afterTokens` tokens, then an error event in the server's own form (`data: {"error": …}`,
   * or Anthropic's `event: error`), and ends without `[DONE]`; `overloaded` makes it the server's
   * overload error (503, or Anthropic's `overloaded_error`) instead of an internal one. A whole
   * response answers that status instead.
   */
  z.strictObject({
    type: z.literal("errorEvent"),
    afterTokens: z.number().int().min(0),
    overloaded: z.boolean().optional(),
    rate,
  }),
  /** Every token, the first included, comes `intervalMs` after the one before. */
  z.strictObject({ type: z.literal("slowDrip"), intervalMs: z.number().positive(), rate }),
  /** `GET /health` answers 503; requests are still served. */
  z.strictObject({ type: z.literal("unhealthy"), rate }),
]);
export type Fault = z.infer<typeof Fault>;

const tunables = {
  /**
   * `vllm` rejects a non-empty `suffix` on `/v1/completions` as vLLM does; `openai` accepts it;
   * `anthropic` serves Anthropic's Messages API instead of OpenAI's.
   */
  kind: z.enum(["vllm", "openai", "anthropic"]).optional(),
  /** Served model names; other models get 404. Default `["sim-model"]`. */
  models: z.array(z.string().min(1)).min(1).optional(),
  /** Time to first token, default 20 ms. */
  ttftMs: z.number().min(0).optional(),
  /** Default 200. */
  tokensPerSecond: z.number().positive().optional(),
  /** Tokens a completion runs to when `max_tokens` is larger or absent, default 16. */
  completionTokens: z.number().int().min(0).optional(),
  /** Requests served at full speed, default 8; beyond it every delay stretches by inflight / capacity. */
  capacity: z.number().int().min(1).optional(),
  /** Requests in flight beyond which it answers 503, default 2 × capacity. */
  maxConcurrency: z.number().int().min(1).optional(),
  /** When set, `/v1` requests without `Authorization: Bearer <apiKey>` (or `x-api-key: <apiKey>` for `anthropic`) get 401; `null` clears it. */
  apiKey: z.string().min(1).nullish(),
  /** Default 16. */
  embeddingDims: z.number().int().min(1).max(65_536).optional(),
  /** `anthropic`: the shortest prefix, in prompt tokens, its prompt cache keeps (default 1024). */
  cacheMinTokens: z.number().int().min(1).optional(),
  fault: Fault.optional(),
  /**
   * Scripts of the scripted agent model (agent-script.ts); a chat request one matches is answered
   * from it. Given any, the backend is that model: a request offered tools that none matches is
   * refused (400) with why, ending with `unscriptedAdvice`.
   */
  agentScripts: z.array(AgentScript).optional(),
  /** How to run a real model, which the refusal of an unscripted agent conversation ends with. */
  unscriptedAdvice: z.string().min(1).max(2000).optional(),
};

export const BackendPatch = z.strictObject(tunables);
export type BackendPatch = z.infer<typeof BackendPatch>;

export const BackendOptions = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9][\w.-]{0,63}$/),
  /** 0 or absent: an ephemeral port. */
  port: z.number().int().min(0).max(65_535).optional(),
  ...tunables,
});
export type BackendOptions = z.infer<typeof BackendOptions>;

export const SimulatorOptions = z.strictObject({
  backends: z.array(BackendOptions),
  /**
   * Also start the control server (`true`: on an ephemeral port, with a token minted for it). Every
   * control request must carry `Authorization: Bearer <token>`: anything else on the machine could
   * otherwise rewrite every answer the backends give (and read their keys).
   */
  control: z
    .union([
      z.boolean(),
      z.strictObject({
        port: z.number().int().min(0).max(65_535).optional(),
        token: z.string().min(16, "the control token must be 16 characters or more").optional(),
      }),
    ])
    .optional(),
});
export type SimulatorOptions = z.infer<typeof SimulatorOptions>;

export type Outcome = "pending" | "completed" | "aborted" | "refused" | "fault" | "error";

export interface RequestRecord {
  seq: number;
  backend: string;
  method: string;
  path: string;
  /** The parsed JSON body, or null. */
  body: unknown;
  /** The raw header, so tests can check which secret was sent. */
  authorization: string | null;
  /** Lower-cased names. */
  headers: Record<string, string>;
  /** The `x-request-id` echoed back (the client's, or a new one). */
  requestId: string;
  /** Milliseconds on the `performance.timeOrigin + performance.now()` clock. */
  receivedAt: number;
  headersAt?: number;
  firstTokenAt?: number;
  endedAt?: number;
  /**
   * A generation's delays as the server scheduled them, in ms, streamed or not: before its first
   * token (or its end, when it has none) from when generation started, then before each next token.
   */
  tokenGapsMs?: number[];
  /** When the client's connection closed before the response ended. */
  abortedAt?: number;
  /**
   * `refused`: over `maxConcurrency`; `fault`: a fault decided the answer (or `refuse` dropped it);
   * `error`: any other error status, or dropped by `stop()`.
   */
  outcome: Outcome;
  status?: number;
  /** The fault applied to this request, if any. */
  fault?: Fault["type"];
  /** In-flight generation requests at arrival, this one included (even when it is refused). */
  concurrencyAtArrival: number;
}

export interface SimulatedBackend {
  readonly id: string;
  /** Base URL ending in `/v1`. */
  readonly url: string;
  readonly port: number;
  /** Applies to new requests; resolves once the listener follows the fault (`refuse` closes it). */
  configure(patch: BackendPatch): Promise<void>;
  /** The options in effect, defaults filled in. */
  options(): ResolvedBackendOptions;
  records(): RequestRecord[];
  /** Forgets the records; sequence numbers keep counting. */
  clear(): void;
  inflight(): number;
  peakConcurrency(): number;
  /** Restarts the peak from the current in-flight count. */
  resetPeak(): void;
}

export interface Simulator {
  backends: SimulatedBackend[];
  backend(id: string): SimulatedBackend;
  /** The control server's URL, when started with `control`. */
  control?: string;
  /** The bearer token every control request must carry, when started with `control`. */
  controlToken?: string;
  /** Closes every server and drops every connection, hanging ones included. */
  stop(): Promise<void>;
}

export type ResolvedBackendOptions = Required<Omit<BackendOptions, "apiKey">> & { apiKey: string | null };

function resolve(options: BackendOptions, port: number): ResolvedBackendOptions {
  const capacity = options.capacity ?? 8;
  return {
    id: options.id,
    port,
    kind: options.kind ?? "vllm",
    models: options.models ?? ["sim-model"],
    ttftMs: options.ttftMs ?? 20,
    tokensPerSecond: options.tokensPerSecond ?? 200,
    completionTokens: options.completionTokens ?? 16,
    capacity,
    maxConcurrency: options.maxConcurrency ?? 2 * capacity,
    apiKey: options.apiKey ?? null,
    embeddingDims: options.embeddingDims ?? 16,
    cacheMinTokens: options.cacheMinTokens ?? 1024,
    fault: options.fault ?? { type: "none" },
    agentScripts: options.agentScripts ?? [],
    unscriptedAdvice: options.unscriptedAdvice ?? DEFAULT_UNSCRIPTED_ADVICE,
  };
}

/** What differs between kinds of server, as data. */
const KINDS = {
  vllm: { rejectsSuffix: true },
  openai: { rejectsSuffix: false },
  anthropic: { rejectsSuffix: false },
} as const;

/** Anthropic's error types by status (`overloaded_error` is its 529). */
const ANTHROPIC_ERRORS: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  529: "overloaded_error",
};

const anthropicErrorBody = (status: number, message: string) => ({
  type: "error",
  error: { type: ANTHROPIC_ERRORS[status] ?? "api_error", message },
});

const ERROR_TYPES: Record<number, string> = {
  400: "BadRequestError",
  401: "AuthenticationError",
  403: "PermissionDeniedError",
  404: "NotFoundError",
  405: "MethodNotAllowedError",
  408: "RequestTimeoutError",
  409: "ConflictError",
  422: "UnprocessableEntityError",
  429: "RateLimitError",
  500: "InternalServerError",
  502: "BadGatewayError",
  503: "ServiceUnavailableError",
  504: "GatewayTimeoutError",
};

const errorBody = (status: number, message: string) => ({
  error: {
    message,
    type: ERROR_TYPES[status] ?? (status >= 500 ? "InternalServerError" : "BadRequestError"),
    param: null,
    code: status,
  },
});

const now = () => performance.timeOrigin + performance.now();
const promptTokens = (chars: number) => Math.ceil(chars / 4);

const StreamOptions = z.looseObject({ include_usage: z.boolean().nullish() }).nullish();
const MaxTokens = z.number().int().min(0).nullish();

const CompletionBody = z.looseObject({
  model: z.string(),
  prompt: z.union([z.string(), z.array(z.string()).length(1, "the simulator serves one prompt per request")]),
  max_tokens: MaxTokens,
  stream: z.boolean().nullish(),
  stream_options: StreamOptions,
  suffix: z.string().nullish(),
});

const Content = z.union([z.string(), z.array(z.looseObject({ text: z.string().optional() })), z.null()]).optional();
const ChatBody = z.looseObject({
  model: z.string(),
  messages: z.array(z.looseObject({ role: z.string(), content: Content })).min(1),
  max_tokens: MaxTokens,
  max_completion_tokens: MaxTokens,
  stream: z.boolean().nullish(),
  stream_options: StreamOptions,
  ...ChatAnswerFields,
});

const Blocks = z.union([z.string(), z.array(z.looseObject({ type: z.string(), text: z.string().optional() }))]);
const MessagesBody = z.looseObject({
  model: z.string(),
  messages: z.array(z.looseObject({ role: z.enum(["user", "assistant"]), content: Blocks })).min(1),
  system: Blocks.optional(),
  max_tokens: z.number().int().min(1),
  stream: z.boolean().optional(),
  tools: z.array(z.looseObject({ name: z.string(), input_schema: z.looseObject({}) })).optional(),
  tool_choice: z.looseObject({ type: z.enum(["auto", "any", "tool", "none"]), name: z.string().optional() }).optional(),
  thinking: z
    .looseObject({ type: z.enum(["enabled", "disabled"]), budget_tokens: z.number().int().min(1024).optional() })
    .optional(),
});

const EmbeddingBody = z.looseObject({
  model: z.string(),
  input: z.union([z.string(), z.array(z.string()).min(1)]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
});

/** A prompt up to the end of one of its blocks: its hash, its characters, and whether it is marked for caching. */
interface Prefix {
  hash: string;
  chars: number;
  marked: boolean;
}

/** How long a prompt cache entry lives, as Anthropic's default (ephemeral) one does. */
const CACHE_TTL_MS = 5 * 60_000;
/** How many blocks before a mark the prompt cache looks back for an earlier entry, as Anthropic's does. */
const CACHE_LOOKBACK = 20;

/** A generation request, whichever endpoint it came through. */
interface Generation {
  format: Format;
  model: string;
  promptTokens: number;
  maxTokens: number | null;
  /** A fixed answer's length in tokens (a scripted agent turn), instead of `completionTokens`. */
  tokens?: number;
  /** The scripted agent model's refusal of a conversation no script matches: answered 400 with this message. */
  refusal?: string;
  stream: boolean;
  includeUsage: boolean;
  /** Anthropic only: the tool the request made it call; its answer is that call, `{"text": <the tokens>}`. */
  tool?: string;
  /** Anthropic only: the request asked for extended thinking; a thinking block comes first. */
  thinking?: boolean;
  /** Anthropic only: the prompt's blocks in order (tools, system, messages), for the prompt cache. */
  prefixes?: Prefix[];
  /** Anthropic only: prompt tokens read from and written to the prompt cache. */
  cache?: { read: number; written: number };
  /** Fields of the whole answer and of a stream's first chunk (`prompt_token_ids`, logprobs.ts). */
  fields?: Record<string, unknown>;
}

const COMPLETION: Format = {
  idPrefix: "cmpl-sim-",
  object: "text_completion",
  chunkObject: "text_completion",
  n: 1,
  token: (text) => [{ index: 0, text, logprobs: null, finish_reason: null }],
  final: (finish) => [{ index: 0, text: "", logprobs: null, finish_reason: finish }],
  whole: (text, finish) => [{ index: 0, text, logprobs: null, finish_reason: finish }],
};

const MESSAGES: Format = { ...chatFormat({ messages: [] }), anthropic: true, idPrefix: "msg_sim_" };

/** An Anthropic stream event. */
const typed = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

const STOP_REASONS: Record<string, string> = { stop: "end_turn", length: "max_tokens" };

/** The whole of a simulated thinking block. */
const THOUGHT = "Thinking (simulated).";

/** A deterministic unit vector from a hash of the text, already rounded to float32. */
export function simulatedEmbedding(text: string, dims: number): number[] {
  let state = createHash("sha256").update(text).digest().readUInt32LE(0) || 1;
  const values = Array.from({ length: dims }, () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 31 - 1;
  });
  const norm = Math.sqrt(values.reduce((sum, v) => sum + v * v, 0)) || 1;
  return values.map((v) => Math.fround(v / norm));
}

function base64Floats(values: number[]): string {
  const bytes = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => bytes.writeFloatLE(v, i * 4));
  return bytes.toString("base64");
}

async function readBody(req: IncomingMessage): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  try {
    for await (const chunk of req) chunks.push(chunk as Buffer);
  } catch {
    return undefined;
  }
  return Buffer.concat(chunks).toString("utf8");
}

function firstIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return "invalid request";
  return issue.path.length ? `${issue.path.join(".")}: ${issue.message}` : issue.message;
}

/** One request being answered. */
interface Exchange {
  record: RequestRecord;
  res: ServerResponse;
  timer?: NodeJS.Timeout;
}

class Backend implements SimulatedBackend {
  readonly id: string;
  port = 0;
  private raw: BackendOptions;
  private opts: ResolvedBackendOptions;
  private server?: Server;
  private listener: Promise<void> = Promise.resolve();
  private list: RequestRecord[] = [];
  private seq = 0;
  private running = 0;
  private peak = 0;
  private open = new Set<Exchange>();
  private stopped = false;
  /** `anthropic`: the prompt cache, prefix hash → expiry. */
  private promptCache = new Map<string, number>();

  constructor(options: BackendOptions) {
    this.id = options.id;
    this.raw = options;
    this.port = options.port ?? 0;
    this.opts = resolve(options, this.port);
  }

  get url() {
    return `http://${HOST}:${this.port}/v1`;
  }

  async start() {
    await this.listen();
    await this.follow();
  }

  /** Applies at once (before the first await), so callers that do not wait still get it. */
  async configure(patch: BackendPatch): Promise<void> {
    this.raw = { ...this.raw, ...BackendPatch.parse(patch) };
    this.opts = resolve(this.raw, this.port);
    await this.follow();
  }

  options = () => this.opts;
  records = () => [...this.list];
  clear = () => void (this.list = []);
  inflight = () => this.running;
  peakConcurrency = () => this.peak;
  resetPeak = () => void (this.peak = this.running);

  /** Listens or stops listening as the fault says, one change at a time. */
  private follow(): Promise<void> {
    this.listener = this.listener
      .catch(() => undefined)
      .then(() => (this.opts.fault.type === "refuse" ? this.close("fault") : this.listen()));
    return this.listener;
  }

  private async listen() {
    if (this.server || this.stopped) return;
    const server = createServer({ noDelay: true }, (req, res) => this.handle(req, res));
    server.on("connection", (socket) => socket.setNoDelay(true));
    await new Promise<void>((ok, fail) => {
      server.once("error", fail);
      server.listen(this.port, HOST, () => {
        server.off("error", fail);
        ok();
      });
    });
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
    this.opts = resolve(this.raw, this.port);
  }

  /** Closes the listener and drops every connection, as a crashed server would; open requests end with `outcome`. */
  async close(outcome: Outcome) {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    for (const { record } of this.open) settle(record, outcome);
    const closed = new Promise((done) => server.close(done));
    server.closeAllConnections();
    await closed;
  }

  async stop() {
    this.stopped = true;
    await this.listener.catch(() => undefined);
    await this.close("error");
  }

  private handle(req: IncomingMessage, res: ServerResponse) {
    const path = (req.url ?? "/").split("?")[0]!;
    const requestId = (req.headers["x-request-id"] as string | undefined) ?? `sim-${randomUUID()}`;
    res.setHeader("X-Simulator", "sextant");
    res.setHeader("x-request-id", requestId);
    if (req.method === "GET" && path === "/health") {
      res.writeHead(this.opts.fault.type === "unhealthy" ? 503 : 200).end();
    } else if (req.method === "GET" && path === "/metrics") {
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(this.metrics());
    } else if (path.startsWith("/v1/")) {
      this.serve(req, res, path, requestId).catch((err: unknown) => {
        console.error(`simulator ${this.id}:`, err);
        res.destroy();
      });
    } else {
      req.resume();
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify(errorBody(404, `Not Found: ${req.method} ${path}`)));
    }
  }

  private metrics() {
    const model = this.opts.models[0];
    const running = Math.min(this.running, this.opts.capacity);
    const waiting = this.running - running;
    return [
      "# HELP vllm:num_requests_running Number of requests currently running on GPU (simulated).",
      "# TYPE vllm:num_requests_running gauge",
      `vllm:num_requests_running{model_name="${model}"} ${running}`,
      "# HELP vllm:num_requests_waiting Number of requests waiting to be processed (simulated).",
      "# TYPE vllm:num_requests_waiting gauge",
      `vllm:num_requests_waiting{model_name="${model}"} ${waiting}`,
      "",
    ].join("\n");
  }

  private async serve(req: IncomingMessage, res: ServerResponse, path: string, requestId: string) {
    const route = `${req.method} ${path}`;
    const generative = route in GENERATIVE;
    const admitted = !generative || this.running < this.opts.maxConcurrency;
    const record: RequestRecord = {
      seq: ++this.seq,
      backend: this.id,
      method: req.method ?? "",
      path,
      body: null,
      authorization: req.headers.authorization ?? null,
      headers: Object.fromEntries(
        Object.entries(req.headers).map(([name, value]) => [
          name,
          Array.isArray(value) ? value.join(", ") : `${value}`,
        ]),
      ),
      requestId,
      receivedAt: now(),
      outcome: "pending",
      concurrencyAtArrival: this.running + (generative ? 1 : 0),
    };
    this.list.push(record);
    const exchange: Exchange = { record, res };
    this.open.add(exchange);
    if (generative && admitted) {
      this.running++;
      this.peak = Math.max(this.peak, this.running);
    }
    res.once("close", () => {
      clearTimeout(exchange.timer);
      this.open.delete(exchange);
      if (generative && admitted) this.running--;
      if (record.outcome === "pending") {
        record.abortedAt = now();
        record.outcome = "aborted";
      }
    });

    const text = await readBody(req);
    if (text === undefined || res.destroyed) return;
    let json = true;
    try {
      record.body = text ? JSON.parse(text) : null;
    } catch {
      json = false;
    }
    const key = this.opts.apiKey;
    const anthropic = this.opts.kind === "anthropic";
    // Anthropic's API takes the key as `x-api-key` or, as its newer SDKs send it, as a bearer token.
    const keyed = record.authorization === `Bearer ${key}` || (anthropic && record.headers["x-api-key"] === key);
    if (key !== null && !keyed) {
      return this.fail(exchange, 401, "Unauthorized (simulated backend): missing or wrong API key.");
    }
    if (!json) return this.fail(exchange, 400, "We could not parse the JSON body of your request.");
    if (route === "GET /v1/models") return this.json(exchange, 200, this.modelList());
    const handler = GENERATIVE[route];
    // Each kind serves its own API only.
    if (!handler || (route === "POST /v1/messages") !== anthropic)
      return this.fail(exchange, 404, `Not Found: ${route}`);
    if (!admitted) {
      const status = anthropic ? 529 : 503;
      return this.fail(exchange, status, "The simulated backend is at maxConcurrency; try again later.", "refused");
    }
    const parsed = handler(record.body, this.opts);
    if (typeof parsed === "string") return this.fail(exchange, 400, parsed);
    if ("prefixes" in parsed && parsed.prefixes) parsed.cache = this.cachePrompt(parsed.prefixes, parsed.promptTokens);
    if (!this.opts.models.includes(parsed.model)) {
      return this.fail(exchange, 404, `The model \`${parsed.model}\` does not exist.`);
    }
    if ("refusal" in parsed && parsed.refusal) return this.fail(exchange, 400, parsed.refusal);
    const fault = this.pickFault();
    if (fault) record.fault = fault.type;
    if (fault?.type === "status") {
      return this.fail(exchange, fault.status, `Simulated fault: the backend answered ${fault.status}.`, "fault");
    }
    const stream = "stream" in parsed && parsed.stream;
    if (fault?.type === "errorEvent" && !stream) {
      const status = fault.overloaded ? (anthropic ? 529 : 503) : 500;
      return this.fail(exchange, status, `Simulated fault: the backend answered ${status}.`, "fault");
    }
    if (fault?.type === "hangBeforeHeaders" || (fault?.type === "hangMidStream" && !stream)) return;
    if ("inputs" in parsed) return this.embed(exchange, parsed, fault?.type === "malformedSse");
    this.generate(exchange, parsed, fault);
  }

  /**
   * Anthropic's prompt cache, simulated: a prompt reads the longest cached prefix that ends at a block
   * boundary at most `CACHE_LOOKBACK` blocks before one of its marks, and writes the prefix at each
   * mark long enough to keep. Token counts are the prompt's share of its characters.
   */
  private cachePrompt(prefixes: Prefix[], tokens: number): { read: number; written: number } {
    const now = Date.now();
    for (const [hash, expiry] of this.promptCache) if (expiry <= now) this.promptCache.delete(hash);
    const marks = prefixes.flatMap((p, i) => (p.marked ? [i] : []));
    const total = prefixes.at(-1)?.chars ?? 0;
    const share = (chars: number) => (total === 0 ? 0 : Math.round((tokens * chars) / total));
    let hit = -1;
    for (const mark of marks)
      for (let i = mark; i >= Math.max(0, mark - CACHE_LOOKBACK); i--)
        if (this.promptCache.has(prefixes[i]!.hash)) {
          hit = Math.max(hit, i);
          break;
        }
    let written = 0;
    for (const mark of marks) {
      const { hash, chars } = prefixes[mark]!;
      if (share(chars) < this.opts.cacheMinTokens) continue;
      if (mark > hit) written = share(chars) - (hit >= 0 ? share(prefixes[hit]!.chars) : 0);
      this.promptCache.set(hash, now + CACHE_TTL_MS);
    }
    const read = hit >= 0 ? share(prefixes[hit]!.chars) : 0;
    return { read, written: Math.max(0, written) };
  }

  /** The fault for this request, drawn by `rate`; faults that are not about requests never apply. */
  private pickFault(): Fault | undefined {
    const fault = this.opts.fault;
    if (fault.type === "none" || fault.type === "refuse" || fault.type === "unhealthy") return undefined;
    return Math.random() < (fault.rate ?? 1) ? fault : undefined;
  }

  private modelList() {
    const created = Math.floor(Date.now() / 1000);
    if (this.opts.kind === "anthropic") {
      const createdAt = new Date(created * 1000).toISOString();
      const data = this.opts.models.map((id) => ({
        type: "model",
        id,
        display_name: `${id} (simulated)`,
        created_at: createdAt,
      }));
      return { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
    }
    return {
      object: "list",
      data: this.opts.models.map((id) => ({ id, object: "model", created, owned_by: FINGERPRINT })),
    };
  }

  /** Delays stretch by inflight / capacity once the backend is past its capacity. */
  private slowdown() {
    return Math.max(1, this.running / this.opts.capacity);
  }

  private embed(exchange: Exchange, request: Embedding, malformed: boolean) {
    exchange.timer = setTimeout(
      () => {
        if (malformed) return this.json(exchange, 200, undefined, "fault", '{"object":"list","data": [');
        const dims = this.opts.embeddingDims;
        const data = request.inputs.map((input, index) => {
          const vector = simulatedEmbedding(input, dims);
          return { object: "embedding", index, embedding: request.base64 ? base64Floats(vector) : vector };
        });
        const tokens = request.inputs.reduce((sum, input) => sum + promptTokens(input.length), 0);
        this.json(exchange, 200, {
          object: "list",
          data,
          model: request.model,
          usage: { prompt_tokens: tokens, total_tokens: tokens },
        });
      },
      Math.round(this.opts.ttftMs * this.slowdown()),
    );
  }

  /**
   * One timer chain per request, scheduled against absolute due times so that delays do not drift;
   * tokens already due are written in the same turn, each event in one write.
   */
  private generate(exchange: Exchange, g: Generation, fault: Fault | undefined) {
    const { res, record } = exchange;
    const o = this.opts;
    const tokens = g.tokens ?? (g.maxTokens === null ? o.completionTokens : Math.min(g.maxTokens, o.completionTokens));
    const finish = g.maxTokens !== null && tokens === g.maxTokens ? "length" : "stop";
    const drip = fault?.type === "slowDrip" ? fault.intervalMs : undefined;
    const stallAt = g.stream && fault?.type === "hangMidStream" ? Math.min(fault.afterTokens, tokens) : -1;
    const breakAt = fault?.type !== "malformedSse" ? -1 : g.stream ? Math.min(fault.afterTokens, tokens) : tokens;
    const errorAt = g.stream && fault?.type === "errorEvent" ? Math.min(fault.afterTokens, tokens) : -1;
    const head = {
      id: g.format.idPrefix + randomUUID().replaceAll("-", ""),
      object: g.stream ? g.format.chunkObject : g.format.object,
      created: Math.floor(Date.now() / 1000),
      model: g.model,
      system_fingerprint: FINGERPRINT,
    };
    const usage = {
      prompt_tokens: g.promptTokens,
      completion_tokens: tokens * g.format.n,
      total_tokens: g.promptTokens + tokens * g.format.n,
    };
    const event = (data: object) => `data: ${JSON.stringify(g.includeUsage ? { ...data, usage: null } : data)}\n\n`;
    /** One chunk per choice, in one write. */
    const chunks = (choices: object[], fields?: object) =>
      choices.map((choice) => event({ ...head, ...fields, choices: [choice] })).join("");
    const anthropic = g.format.anthropic === true;
    const message = { id: head.id, type: "message", role: "assistant", model: g.model };
    const toolUse = g.tool ? { type: "tool_use", id: `toolu_sim_${head.id.slice(8)}`, name: g.tool } : undefined;
    const cached = g.cache ?? { read: 0, written: 0 };
    const promptUsage = {
      input_tokens: Math.max(0, g.promptTokens - cached.read - cached.written),
      cache_read_input_tokens: cached.read,
      cache_creation_input_tokens: cached.written,
    };
    /** The answer's content block: after the thinking block when there is one. */
    const block = g.thinking ? 1 : 0;
    let emitted = 0;
    let text = "";

    const broken = () => {
      if (!g.stream) return this.json(exchange, 200, undefined, "fault", `{"id":"${head.id}","choices": [`);
      res.write(
        anthropic
          ? 'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0,\n\n'
          : 'data: {"choices": [\n\n',
      );
      exchange.timer = setTimeout(() => this.end(exchange, "fault"), 1000);
    };
    /** The server's own error event in the stream, then the end without `[DONE]`. */
    const failed = () => {
      const overloaded = fault?.type === "errorEvent" && fault.overloaded === true;
      const message = overloaded ? "Overloaded (simulated)" : "Internal error (simulated)";
      const status = overloaded ? 503 : 500;
      this.end(
        exchange,
        "fault",
        anthropic
          ? typed("error", { error: { type: overloaded ? "overloaded_error" : "api_error", message } })
          : `data: ${JSON.stringify(errorBody(status, message))}\n\n`,
      );
    };
    const done = () => {
      if (anthropic) {
        const stop = { stop_reason: toolUse ? "tool_use" : STOP_REASONS[finish], stop_sequence: null };
        if (!g.stream) {
          record.firstTokenAt = now();
          const content = [
            ...(g.thinking ? [{ type: "thinking", thinking: THOUGHT, signature: "sim" }] : []),
            toolUse ? { ...toolUse, input: { text } } : { type: "text", text },
          ];
          const used = { ...promptUsage, output_tokens: tokens };
          return this.json(exchange, 200, { ...message, content, ...stop, usage: used });
        }
        if (toolUse)
          res.write(
            typed("content_block_delta", { index: block, delta: { type: "input_json_delta", partial_json: '"}' } }),
          );
        res.write(typed("content_block_stop", { index: block }));
        res.write(typed("message_delta", { delta: stop, usage: { output_tokens: tokens } }));
        return this.end(exchange, "completed", typed("message_stop", {}));
      }
      if (!g.stream) {
        record.firstTokenAt = now();
        return this.json(exchange, 200, { ...head, ...g.fields, choices: g.format.whole(text, finish), usage });
      }
      res.write(chunks(g.format.final(finish)));
      if (g.includeUsage) res.write(`data: ${JSON.stringify({ ...head, choices: [], usage })}\n\n`);
      this.end(exchange, "completed", "data: [DONE]\n\n");
    };
    /** After `emitted` tokens: stalls, breaks or finishes (true), or goes on (false). */
    const next = (): boolean => {
      if (emitted === stallAt) return true;
      if (emitted === errorAt) failed();
      else if (emitted === breakAt) broken();
      else if (emitted === tokens) done();
      else return false;
      return true;
    };
    const schedule = new TokenSchedule(now(), (record.tokenGapsMs = []));
    const gap = () => (drip ?? (emitted === 0 ? o.ttftMs : 1000 / o.tokensPerSecond)) * this.slowdown();
    const tick = () => {
      exchange.timer = undefined;
      if (res.destroyed) return;
      for (;;) {
        const piece = `sim${emitted} `;
        text += piece;
        if (g.stream) {
          res.write(
            anthropic
              ? typed("content_block_delta", {
                  index: block,
                  delta: toolUse
                    ? { type: "input_json_delta", partial_json: (emitted === 0 ? '{"text":"' : "") + piece }
                    : { type: "text_delta", text: piece },
                })
              : chunks(g.format.token(piece, emitted === 0), emitted === 0 ? g.fields : undefined),
          );
          if (emitted === 0) record.firstTokenAt = now();
        }
        emitted++;
        if (next()) return;
        schedule.next(gap());
        const wait = Math.round(schedule.due - now());
        if (wait >= 1) {
          exchange.timer = setTimeout(tick, wait);
          return;
        }
      }
    };

    if (g.stream) {
      res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" });
      if (anthropic) {
        const usage = { ...promptUsage, output_tokens: 1 };
        const started = { ...message, content: [], stop_reason: null, stop_sequence: null, usage };
        res.write(typed("message_start", { message: started }));
        if (g.thinking) {
          res.write(typed("content_block_start", { index: 0, content_block: { type: "thinking", thinking: "" } }));
          res.write(typed("content_block_delta", { index: 0, delta: { type: "thinking_delta", thinking: THOUGHT } }));
          res.write(typed("content_block_delta", { index: 0, delta: { type: "signature_delta", signature: "sim" } }));
          res.write(typed("content_block_stop", { index: 0 }));
        }
        const content = toolUse ? { ...toolUse, input: {} } : { type: "text", text: "" };
        res.write(typed("content_block_start", { index: block, content_block: content }));
        res.write(typed("ping", {}));
      } else res.flushHeaders();
      record.headersAt = now();
      record.status = 200;
    }
    if (tokens > 0 && (emitted === stallAt || emitted === breakAt || emitted === errorAt)) return void next();
    schedule.next(gap());
    exchange.timer = setTimeout(tokens === 0 ? () => next() : tick, Math.max(1, Math.round(schedule.due - now())));
  }

  private json(exchange: Exchange, status: number, body: unknown, outcome?: Outcome, raw?: string) {
    const { res, record } = exchange;
    if (res.destroyed) return;
    res.writeHead(status, { "content-type": "application/json" });
    record.status = status;
    record.headersAt = now();
    this.end(exchange, outcome ?? (status < 400 ? "completed" : "error"), raw ?? JSON.stringify(body));
  }

  private fail(exchange: Exchange, status: number, message: string, outcome: Outcome = "error") {
    const body = this.opts.kind === "anthropic" ? anthropicErrorBody(status, message) : errorBody(status, message);
    this.json(exchange, status, body, outcome);
  }

  /** Settles the record, then ends the response with its last bytes. */
  private end(exchange: Exchange, outcome: Outcome, last?: string) {
    clearTimeout(exchange.timer);
    if (!settle(exchange.record, outcome)) return;
    if (!exchange.res.destroyed) exchange.res.end(last);
  }
}

/** Marks how a request ended, once; the first to settle wins. */
function settle(record: RequestRecord, outcome: Outcome): boolean {
  if (record.outcome !== "pending") return false;
  record.outcome = outcome;
  record.endedAt = now();
  return true;
}

interface Embedding {
  model: string;
  inputs: string[];
  base64: boolean;
}

/** The generation endpoints: each validates its body into the shared shape, or says why not. */
const GENERATIVE: Record<string, (body: unknown, o: ResolvedBackendOptions) => Generation | Embedding | string> = {
  "POST /v1/completions": (body, o) => {
    const r = CompletionBody.safeParse(body);
    if (!r.success) return firstIssue(r.error);
    if (KINDS[o.kind].rejectsSuffix && r.data.suffix) return "suffix is not currently supported";
    const prompt = typeof r.data.prompt === "string" ? r.data.prompt : r.data.prompt[0]!;
    return {
      format: COMPLETION,
      model: r.data.model,
      promptTokens: promptTokens(prompt.length + (r.data.suffix?.length ?? 0)),
      maxTokens: r.data.max_tokens ?? null,
      stream: r.data.stream ?? false,
      includeUsage: !!r.data.stream && !!r.data.stream_options?.include_usage,
    };
  },
  "POST /v1/chat/completions": (body, o) => {
    const r = ChatBody.safeParse(body);
    if (!r.success) return firstIssue(r.error);
    const logprobs = logprobRequest(body);
    if (typeof logprobs === "string") return logprobs;
    const seed = typeof r.data.seed === "number" ? r.data.seed : null;
    const scripted = r.data.tool_choice === "none" ? undefined : scriptedTurn(o.agentScripts, r.data.messages, seed);
    // A backend with scripts is the scripted agent model: offered tools, it plays a script or says
    // why not. Without tools (plain chat) it answers `sim` tokens as every backend does.
    const agentic = (r.data.tools?.length ?? 0) > 0 && r.data.tool_choice !== "none";
    const refusal =
      !scripted && agentic && o.agentScripts.length > 0 ? unscriptedRefusal(o.unscriptedAdvice) : undefined;
    const chars = r.data.messages.reduce((sum, { content }) => {
      if (typeof content === "string") return sum + content.length;
      return sum + (content ?? []).reduce((s, part) => s + (part.text?.length ?? 0), 0);
    }, 0);
    const format = scripted ? scriptedFormat(scripted) : chatFormat(r.data);
    return {
      format: logprobs ? withLogprobs(format, logprobs) : format,
      ...(logprobs ? { fields: answerFields(logprobs, r.data.messages) } : {}),
      ...(refusal ? { refusal } : {}),
      model: r.data.model,
      promptTokens: promptTokens(chars),
      // A scripted turn is whole whatever the limit: it is a fixed answer, not a generation.
      ...(scripted ? { tokens: scriptedTokens(scripted) } : {}),
      maxTokens: scripted ? null : (r.data.max_completion_tokens ?? r.data.max_tokens ?? null),
      stream: r.data.stream ?? false,
      includeUsage: !!r.data.stream && !!r.data.stream_options?.include_usage,
    };
  },
  "POST /v1/messages": (body, o) => {
    const r = MessagesBody.safeParse(body);
    if (!r.success) return firstIssue(r.error);
    // As on the chat route: a backend with scripts is the scripted agent model, which says why it
    // has no turn for an agent conversation none matches rather than answer it with filler.
    const agentic = (r.data.tools?.length ?? 0) > 0 && r.data.tool_choice?.type !== "none";
    const refusal =
      agentic && o.agentScripts.length > 0 && !scriptedTurn(o.agentScripts, r.data.messages)
        ? unscriptedRefusal(o.unscriptedAdvice)
        : undefined;
    const chars = (blocks: z.infer<typeof Blocks> | undefined) =>
      typeof blocks === "string" ? blocks.length : (blocks ?? []).reduce((sum, b) => sum + (b.text?.length ?? 0), 0);
    // It calls a tool only when made to: a simulator does not decide.
    const choice = r.data.tool_choice;
    const tool = choice?.type === "tool" ? choice.name : choice?.type === "any" ? r.data.tools?.[0]?.name : undefined;
    const thinking = r.data.thinking?.type === "enabled";
    // The prompt's blocks in Anthropic's cache order: tools, system, then the messages.
    const asBlocks = (blocks: z.infer<typeof Blocks>) =>
      typeof blocks === "string" ? [{ type: "text", text: blocks }] : blocks;
    const ordered = [
      ...(r.data.tools ?? []),
      ...(r.data.system === undefined ? [] : asBlocks(r.data.system)),
      ...r.data.messages.flatMap((m) => asBlocks(m.content).map((b) => ({ ...b, role: m.role }))),
    ];
    let hash = "";
    let seen = 0;
    const prefixes = ordered.map((block: Record<string, unknown>) => {
      const { cache_control: mark, ...rest } = block;
      hash = createHash("sha256").update(hash).update(JSON.stringify(rest)).digest("hex");
      seen += typeof rest.text === "string" ? rest.text.length : 0;
      return { hash, chars: seen, marked: mark !== undefined };
    });
    if (thinking && r.data.thinking!.budget_tokens === undefined) return "thinking.budget_tokens: Field required";
    if (thinking && r.data.thinking!.budget_tokens! >= r.data.max_tokens)
      return "max_tokens must be greater than thinking.budget_tokens";
    return {
      ...(refusal ? { refusal } : {}),
      ...(tool ? { tool } : {}),
      ...(thinking ? { thinking } : {}),
      prefixes,
      format: MESSAGES,
      model: r.data.model,
      promptTokens: promptTokens(chars(r.data.system) + r.data.messages.reduce((sum, m) => sum + chars(m.content), 0)),
      maxTokens: r.data.max_tokens,
      stream: r.data.stream ?? false,
      includeUsage: false,
    };
  },
  "POST /v1/embeddings": (body) => {
    const r = EmbeddingBody.safeParse(body);
    if (!r.success) return firstIssue(r.error);
    const inputs = typeof r.data.input === "string" ? [r.data.input] : r.data.input;
    return { model: r.data.model, inputs, base64: r.data.encoding_format === "base64" };
  },
};

/**
 * Starts simulated backends on 127.0.0.1 and, with `control`, an HTTP control server for other
 * processes.
 *
 * @example
 * ```ts
 * const sim = await startSimulator({ backends: [{ id: "us-east-1", ttftMs: 50 }] });
 * const client = new OpenAI({ baseURL: sim.backend("us-east-1").url, apiKey: "unused" });
 * await sim.backend("us-east-1").configure({ fault: { type: "status", status: 503, rate: 0.5 } });
 * await sim.stop();
 * ```
 */
export async function startSimulator(options: SimulatorOptions): Promise<Simulator> {
  const { backends: list, control } = SimulatorOptions.parse(options);
  const ids = new Set(list.map((b) => b.id));
  if (ids.size !== list.length) throw new Error("simulator: backend ids must be unique");
  const backends = list.map((b) => new Backend(b));
  const started: Backend[] = [];
  const stopBackends = () => Promise.all(started.map((b) => b.stop())).then(() => undefined);
  try {
    for (const backend of backends) {
      await backend.start();
      started.push(backend);
    }
  } catch (err) {
    await stopBackends();
    throw err;
  }
  const byId = new Map(backends.map((b) => [b.id, b]));
  const backend = (id: string) => {
    const found = byId.get(id);
    if (!found) throw new Error(`simulator: no backend "${id}"`);
    return found;
  };
  const controlServer = control
    ? await startControlServer(byId, {
        port: control === true ? 0 : (control.port ?? 0),
        token: (control === true ? undefined : control.token) ?? randomBytes(32).toString("base64url"),
      }).catch(async (err: unknown) => {
        await stopBackends();
        throw err;
      })
    : undefined;
  let stopped: Promise<void> | undefined;
  return {
    backends,
    backend,
    ...(controlServer ? { control: controlServer.url, controlToken: controlServer.token } : {}),
    stop: () => (stopped ??= Promise.all([stopBackends(), controlServer?.close()]).then(() => undefined)),
  };
}

/** Whether `header` is `Bearer <token>`, in time that does not depend on where they differ. */
function bearerMatches(header: string | undefined, token: string): boolean {
  const given = /^Bearer (.+)$/.exec(header ?? "")?.[1] ?? "";
  // Digests, so the comparison takes the same time whatever the lengths.
  const digest = (text: string) => createHash("sha256").update(text).digest();
  return timingSafeEqual(digest(given), digest(token));
}

/**
 * The control API, JSON over HTTP, for other processes (benchmarks, `npm start`): `GET /backends`,
 * `PATCH /backends/:id` (a patch of options), `GET /backends/:id/records?since=seq`,
 * `DELETE /backends/:id/records` (clears them and the peak), `POST /backends/:id/reset-peak`,
 * `PUT /backends/:id/agent-scripts` (`{ scripts }`, replacing the scripted agent model's scripts).
 * Every request carries `Authorization: Bearer <token>`, or gets 401.
 */
async function startControlServer(backends: Map<string, Backend>, { port, token }: { port: number; token: string }) {
  const view = (b: Backend) => ({
    id: b.id,
    url: b.url,
    port: b.port,
    options: b.options(),
    inflight: b.inflight(),
    peak: b.peakConcurrency(),
  });
  const answer = async (req: IncomingMessage): Promise<[number, unknown]> => {
    const url = new URL(req.url ?? "/", "http://control");
    const text = (await readBody(req)) ?? "";
    if (req.method === "GET" && url.pathname === "/backends") {
      return [200, { backends: [...backends.values()].map(view) }];
    }
    const match = /^\/backends\/([^/]+)(\/records|\/reset-peak|\/agent-scripts)?$/.exec(url.pathname);
    const backend = match ? backends.get(decodeURIComponent(match[1]!)) : undefined;
    if (!match || !backend) return [404, errorBody(404, `Not Found: ${req.method} ${url.pathname}`)];
    switch (`${req.method} ${match[2] ?? ""}`) {
      case "PATCH ": {
        let patch: BackendPatch;
        try {
          patch = BackendPatch.parse(JSON.parse(text));
        } catch (err) {
          return [400, errorBody(400, err instanceof z.ZodError ? firstIssue(err) : "the body is not JSON")];
        }
        await backend.configure(patch);
        return [200, view(backend)];
      }
      case "GET /records": {
        const since = Number(url.searchParams.get("since") ?? 0);
        return [200, { records: backend.records().filter((r) => r.seq > since) }];
      }
      case "DELETE /records":
        backend.clear();
        backend.resetPeak();
        return [200, view(backend)];
      case "POST /reset-peak":
        backend.resetPeak();
        return [200, view(backend)];
      case "PUT /agent-scripts": {
        let body: AgentScriptsBody;
        try {
          body = AgentScriptsBody.parse(JSON.parse(text));
        } catch (err) {
          return [400, errorBody(400, err instanceof z.ZodError ? firstIssue(err) : "the body is not JSON")];
        }
        await backend.configure({ agentScripts: body.scripts });
        return [200, view(backend)];
      }
      default:
        return [405, errorBody(405, "Method Not Allowed")];
    }
  };
  const server = createServer((req, res) => {
    const reply = ([status, body]: [number, unknown], headers: Record<string, string> = {}) => {
      res.writeHead(status, { "content-type": "application/json", "X-Simulator": "sextant", ...headers });
      res.end(JSON.stringify(body));
    };
    if (!bearerMatches(req.headers.authorization, token)) {
      // Nothing of the request is read: the body may be anyone's.
      req.resume();
      return reply(
        [401, errorBody(401, "The control API needs Authorization: Bearer <the simulator's control token>.")],
        { "WWW-Authenticate": 'Bearer realm="simulator-control"' },
      );
    }
    answer(req).then(
      (answered) => reply(answered),
      (err: unknown) => reply([500, errorBody(500, String(err))]),
    );
  });
  await new Promise<void>((ok, fail) => {
    server.once("error", fail);
    server.listen(port, HOST, () => ok());
  });
  const url = `http://${HOST}:${(server.address() as AddressInfo).port}`;
  const close = () => {
    const closed = new Promise((done) => server.close(done));
    server.closeAllConnections();
    return closed.then(() => undefined);
  };
  return { url, token, close };
}
