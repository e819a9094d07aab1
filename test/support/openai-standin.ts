import { createHash } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A LOCAL STAND-IN for OpenAI-compatible embedding endpoints (OpenAI, vLLM's OpenAI-compatible
 * server, Workers AI's OpenAI-compatible endpoint), for tests only: its vectors come from hashing
 * words, not from a model, and say nothing about any real model's quality or speed.
 *
 * It speaks `POST /v1/embeddings` as the `openai` SDK sends it: `{ model, input, dimensions?,
 * encoding_format?, user? }` with `input` a string or an array of strings, answered with
 * `{ object: "list", data: [{ object: "embedding", index, embedding }], model, usage }`, the
 * embedding as a float array or, for `encoding_format: "base64"` (what the SDK asks for when the
 * caller does not choose), little-endian float32 bytes in base64.
 *
 * Like OpenAI, it refuses with `{ error: { message, type, param, code } }`: a missing or wrong
 * `Authorization: Bearer` key (401, the wrong key quoted masked, as OpenAI does), a body that is not
 * JSON, an unknown field, a missing or unknown model (404 `model_not_found`), a missing, empty or
 * non-string input, more inputs than `maxInputs`, `dimensions` for a model that cannot shorten its
 * vectors or larger than it makes, and an unknown `encoding_format`.
 *
 * Vectors are deterministic: each word (identifiers split at camelCase and underscores) is hashed
 * to a few signed coordinates, weighted by 1 + log(count), so texts sharing words are close;
 * `dimensions` keeps the first coordinates of the model's vector, renormalised. Every request,
 * accepted or not, is recorded; knobs inject failures, stalls and malformed answers.
 */
export interface OpenAIStandIn {
  /** The base URL to configure, ending in `/v1`. */
  readonly url: string;
  readonly apiKey: string;
  readonly requests: RecordedEmbeddingRequest[];
  /** The most requests that were being answered at once. */
  readonly maxInFlight: number;
  /** Answers the next `count` requests (Infinity: until `reset`) with `status` and an OpenAI error. */
  failNext(count: number, status: number, options?: { retryAfter?: string; retryAfterMs?: string }): void;
  /** Holds the next `count` answers for `ms` before sending them, e.g. past a client's timeout. */
  stallNext(count: number, ms: number): void;
  /** Breaks the next `count` accepted answers in one way. */
  corruptNext(count: number, mode: Corruption): void;
  /** Clears every knob. */
  reset(): void;
  close(): Promise<void>;
}

export type Corruption = "missing-vector" | "ragged" | "not-a-number";

export interface StandInModel {
  dims: number;
  /** Accepts `dimensions` (OpenAI's text-embedding-3 models do; most vLLM models do not). */
  shortenable?: boolean;
  /** Multiplies every vector, for models whose vectors are not unit length. */
  scale?: number;
}

export interface OpenAIStandInOptions {
  apiKey?: string;
  models?: Record<string, StandInModel>;
  /** Inputs per request; OpenAI's limit is 2,048. */
  maxInputs?: number;
}

export interface RecordedEmbeddingRequest {
  method: string;
  url: string;
  /** Lower-cased names. */
  headers: Record<string, string>;
  body: unknown;
  /** The inputs, as a list, when the request had any. */
  inputs: string[];
  status: number;
  /** The message of a refused request. */
  error?: string;
}

export const STANDIN_MODELS: Record<string, StandInModel> = {
  "text-embedding-3-small": { dims: 1536, shortenable: true },
  "standin-embed-768": { dims: 768, scale: 7.5 },
};

const FIELDS = new Set(["model", "input", "dimensions", "encoding_format", "user"]);

class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly type = "invalid_request_error",
  ) {
    super(message);
  }
}

export async function startOpenAIStandIn(options: OpenAIStandInOptions = {}): Promise<OpenAIStandIn> {
  const apiKey = options.apiKey ?? "sk-standin-0123456789abcdefghijklmnopqrstuv";
  const models = options.models ?? STANDIN_MODELS;
  const maxInputs = options.maxInputs ?? 2048;
  const requests: RecordedEmbeddingRequest[] = [];
  let failures = {
    count: 0,
    status: 500,
    retryAfter: undefined as string | undefined,
    retryAfterMs: undefined as string | undefined,
  };
  let stalls = { count: 0, ms: 0 };
  let corruptions = { count: 0, mode: "ragged" as Corruption };
  let inFlight = 0;
  let maxInFlight = 0;

  const server = createServer(async (req, res) => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    res.once("close", () => inFlight--);
    const record: RecordedEmbeddingRequest = {
      method: req.method ?? "",
      url: req.url ?? "",
      headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
      body: undefined,
      inputs: [],
      status: 0,
    };
    requests.push(record);
    let status = 200;
    let answer: unknown;
    const headers: Record<string, string> = {};
    try {
      const text = await readBody(req);
      try {
        record.body = JSON.parse(text);
      } catch {
        record.body = undefined;
      }
      if (Array.isArray((record.body as { input?: unknown })?.input)) {
        record.inputs = ((record.body as { input: unknown[] }).input ?? []).map(String);
      } else if (typeof (record.body as { input?: unknown })?.input === "string") {
        record.inputs = [(record.body as { input: string }).input];
      }
      if (req.method !== "POST" || req.url?.split("?")[0] !== "/v1/embeddings") {
        throw new Refusal(404, `Invalid URL (${req.method} ${req.url})`);
      }
      authorize(req.headers.authorization, apiKey);
      if (failures.count > 0) {
        failures.count--;
        if (failures.retryAfter) headers["retry-after"] = failures.retryAfter;
        if (failures.retryAfterMs) headers["retry-after-ms"] = failures.retryAfterMs;
        throw failures.status === 429
          ? new Refusal(429, "Rate limit reached for requests.", null, "rate_limit_exceeded", "requests")
          : new Refusal(
              failures.status,
              "The server had an error while processing your request.",
              null,
              null,
              "server_error",
            );
      }
      if (record.body === undefined) {
        throw new Refusal(400, "We could not parse the JSON body of your request. (HINT: the body is not valid JSON.)");
      }
      answer = embeddings(record.body, models, maxInputs);
      if (corruptions.count > 0) {
        corruptions.count--;
        corrupt(answer as Answer, corruptions.mode);
      }
    } catch (err) {
      if (!(err instanceof Refusal)) throw err;
      status = err.status;
      record.error = err.message;
      answer = { error: { message: err.message, type: err.type, param: err.param, code: err.code } };
    }
    record.status = status;
    if (stalls.count > 0) {
      stalls.count--;
      await new Promise((resolve) => setTimeout(resolve, stalls.ms));
    }
    if (res.destroyed) return;
    res.writeHead(status, { "content-type": "application/json", ...headers });
    res.end(JSON.stringify(answer));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    apiKey,
    requests,
    get maxInFlight() {
      return maxInFlight;
    },
    failNext: (count, status, opts = {}) => {
      failures = { count, status, retryAfter: opts.retryAfter, retryAfterMs: opts.retryAfterMs };
    },
    stallNext: (count, ms) => {
      stalls = { count, ms };
    },
    corruptNext: (count, mode) => {
      corruptions = { count, mode };
    },
    reset: () => {
      failures = { ...failures, count: 0 };
      stalls = { count: 0, ms: 0 };
      corruptions = { ...corruptions, count: 0 };
      maxInFlight = 0;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => resolve(body));
    req.on("error", reject);
  });
}

function authorize(header: string | undefined, apiKey: string): void {
  const given = header?.match(/^Bearer (.+)$/)?.[1];
  if (!given) {
    throw new Refusal(
      401,
      "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
    );
  }
  if (given !== apiKey) {
    const masked = given.length > 8 ? `${given.slice(0, 3)}***${given.slice(-4)}` : "***";
    throw new Refusal(401, `Incorrect API key provided: ${masked}.`, null, "invalid_api_key");
  }
}

interface Answer {
  object: "list";
  data: { object: "embedding"; index: number; embedding: number[] | string }[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

function embeddings(body: unknown, models: Record<string, StandInModel>, maxInputs: number): Answer {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new Refusal(400, "The request body must be a JSON object.");
  }
  const request = body as Record<string, unknown>;
  for (const field of Object.keys(request)) {
    if (!FIELDS.has(field)) throw new Refusal(400, `Unrecognized request argument supplied: ${field}`, field);
  }
  if (typeof request.model !== "string" || request.model === "") {
    throw new Refusal(400, "You must provide a model parameter.", "model");
  }
  const model = models[request.model];
  if (!model) {
    throw new Refusal(
      404,
      `The model \`${request.model}\` does not exist or you do not have access to it.`,
      "model",
      "model_not_found",
    );
  }
  if (request.input === undefined) throw new Refusal(400, "'input' is a required property", "input");
  const inputs = typeof request.input === "string" ? [request.input] : request.input;
  if (!Array.isArray(inputs) || inputs.length === 0 || inputs.some((i) => typeof i !== "string")) {
    throw new Refusal(400, "'$.input' is invalid: expected a string or a non-empty array of strings.", "input");
  }
  if (inputs.length > maxInputs) {
    throw new Refusal(400, `'$.input' is too long: at most ${maxInputs} inputs per request.`, "input");
  }
  if (inputs.some((i) => i === "")) throw new Refusal(400, "'$.input' is invalid: an input is empty.", "input");
  let dims = model.dims;
  if (request.dimensions !== undefined) {
    if (!model.shortenable) throw new Refusal(400, "This model does not support specifying dimensions.", "dimensions");
    const d = request.dimensions;
    if (typeof d !== "number" || !Number.isInteger(d) || d < 1 || d > model.dims) {
      throw new Refusal(400, `Invalid 'dimensions': must be an integer from 1 to ${model.dims}.`, "dimensions");
    }
    dims = d;
  }
  const format = request.encoding_format ?? "float";
  if (format !== "float" && format !== "base64") {
    throw new Refusal(400, "Invalid 'encoding_format': expected 'float' or 'base64'.", "encoding_format");
  }
  let tokens = 0;
  const data = (inputs as string[]).map((text, index) => {
    tokens += words(text).length;
    const vector = standInVector(text, model.dims, dims, model.scale ?? 1);
    const embedding = format === "float" ? vector : Buffer.from(Float32Array.from(vector).buffer).toString("base64");
    return { object: "embedding" as const, index, embedding };
  });
  return { object: "list", data, model: request.model, usage: { prompt_tokens: tokens, total_tokens: tokens } };
}

function corrupt(answer: Answer, mode: Corruption): void {
  if (mode === "missing-vector") answer.data.pop();
  if (mode === "ragged") (answer.data.at(-1)!.embedding as number[]).push(0.5);
  if (mode === "not-a-number") (answer.data[0]!.embedding as unknown[])[0] = "NaN";
}

function words(text: string): string[] {
  return text
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => w.length >= 2);
}

/**
 * The stand-in's vector for `text`: the model's `native` coordinates from hashed words, cut to
 * `dims` and normalised, then multiplied by `scale`. Texts without words hash whole.
 */
export function standInVector(text: string, native: number, dims = native, scale = 1): number[] {
  const counts = new Map<string, number>();
  for (const w of words(text)) counts.set(w, (counts.get(w) ?? 0) + 1);
  if (counts.size === 0) counts.set(`\u0000${text}`, 1);
  const vector = new Array<number>(native).fill(0);
  for (const [word, count] of counts) {
    const digest = createHash("sha256").update(word).digest();
    for (let k = 0; k < 4; k++) {
      const h = digest.readUInt32LE(k * 4);
      vector[h % native]! += (h & 0x80000000 ? -1 : 1) * (1 + Math.log(count));
    }
  }
  const cut = vector.slice(0, dims);
  const norm = Math.hypot(...cut) || 1;
  return cut.map((x) => (x / norm) * scale);
}
